"""Soak: `sparklag serve` for 1,000 jobs refreshed every 30 s; CPU and memory per refresh.

    .venv/bin/python benchmarks/exporter_soak.py [--jobs 1000] [--refreshes 120] \\
        [--partitions 16] [--template-checkpoint tests/data/checkpoints/ck43]

One hour of refreshes every 30 s is 120 refreshes: they run back to back here, each followed by
one scrape over HTTP (OpenMetrics, gzip, as Prometheus asks), through the exporter's ONE
session and ONE FleetChecker. The jobs live on local disk, cloned from one real Spark
checkpoint (the given one, or one made by running a real query first), and read real Kafka
topics (test-bed broker). Before each refresh ``--advancing`` jobs commit a new batch and
Spark's retention is imitated (files below N - 100 deleted).

Prints, every 10 refreshes, RSS and the process CPU of the refresh + scrape (every thread:
ours, the HTTP server's and librdkafka's), and at the end the CPU as a percentage of one core
for one 30 s interval. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet_common import job_files, load_template, real_template, write_local

RETAINED = 100  # Spark's default minBatchesToRetain
INTERVAL = 30.0  # the refresh interval being simulated
ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


def _scrape(url: str) -> int:
    request = urllib.request.Request(url, headers={"Accept": ACCEPT, "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return len(response.read())


def _fleet(args: argparse.Namespace, workdir: Path, kafka: object) -> tuple[list[Path], list[int]]:
    topics = [
        kafka.create_topic(f"soak-{t}", partitions=args.partitions)  # type: ignore[attr-defined]
        for t in range(args.topics)
    ]
    for topic in topics:
        kafka.produce(topic, args.partitions * 200)  # type: ignore[attr-defined]
    if args.template_checkpoint:
        template = load_template(args.template_checkpoint)
    else:
        template = real_template(workdir, kafka, topics[0])
    ends = {topic: kafka.end_offsets(topic) for topic in topics}  # type: ignore[attr-defined]
    rng = random.Random(7)
    roots, next_batch = [], []
    for i in range(args.jobs):
        topic = topics[i % len(topics)]
        files = job_files(template, topic, ends[topic], batches=20, state_objects=0, rng=rng)
        root = workdir / "fleet" / f"job-{i:04d}"
        write_local(root, files)
        roots.append(root)
        ids = [int(name.split("/")[1]) for name in files if name.startswith("offsets/")]
        next_batch.append(max(ids) + 1)
    args.commit = template.commit
    return roots, next_batch


def _advance(
    args: argparse.Namespace, rng: random.Random, roots: list[Path], nxt: list[int]
) -> None:
    for i in rng.sample(range(len(roots)), args.advancing):
        root, batch_id = roots[i], nxt[i]
        previous = (root / "offsets" / str(batch_id - 1)).read_bytes()
        (root / "offsets" / str(batch_id)).write_bytes(previous)
        (root / "commits" / str(batch_id)).write_bytes(args.commit)
        for directory in ("offsets", "commits"):
            (root / directory / str(batch_id - RETAINED)).unlink(missing_ok=True)
        nxt[i] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--refreshes", type=int, default=120)
    parser.add_argument("--advancing", type=int, default=100, help="jobs with a new batch each")
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--template-checkpoint", type=Path)
    args = parser.parse_args()

    from airflow_sparklag.exporter import LagExporter
    from airflow_sparklag.fleet import FleetChecker
    from airflow_sparklag.session import Session
    from testbed.kafka_broker import KafkaBroker
    from testbed.process import free_port

    workdir = Path(tempfile.mkdtemp(prefix="sparklag-exporter-soak-"))
    kafka = KafkaBroker(workdir / "kafka").start()
    try:
        roots, next_batch = _fleet(args, workdir, kafka)
        rng = random.Random(11)
        with Session(kafka_config={"bootstrap.servers": kafka.bootstrap}) as session:
            checker = FleetChecker([str(r) for r in roots], session=session)
            exporter = LagExporter(checker, interval=INTERVAL)
            port = free_port()
            # The HTTP server only: refreshes are driven below, back to back.
            exporter.start = lambda: None  # type: ignore[method-assign]
            server = exporter.serve("127.0.0.1", port)
            url = f"http://127.0.0.1:{port}/metrics"
            cpu_each, wall_each, rss = [], [], []
            for refresh in range(1, args.refreshes + 1):
                _advance(args, rng, roots, next_batch)
                cpu, wall = time.process_time(), time.perf_counter()
                if not exporter.refresh():
                    raise SystemExit(f"refresh {refresh} failed: {exporter.health()[1]}")
                size = _scrape(url)
                cpu_each.append(time.process_time() - cpu)
                wall_each.append(time.perf_counter() - wall)
                rss.append(_rss_mb())
                if refresh == 1 or refresh % 10 == 0:
                    print(json.dumps({
                        "refresh": refresh,
                        "rss_mb": round(rss[-1], 1),
                        "cpu_s": round(cpu_each[-1], 3),
                        "wall_s": round(wall_each[-1], 3),
                        "cpu_pct_of_core_per_30s": round(100 * cpu_each[-1] / INTERVAL, 2),
                        "scrape_bytes_gzip": size,
                    }), flush=True)  # fmt: skip
            server.shutdown()
            server.server_close()
        steady = cpu_each[1:] or cpu_each
        print(
            f"# {args.jobs} jobs x {args.partitions} partitions, {args.refreshes} refreshes "
            f"(= {args.refreshes * INTERVAL / 3600:.1f} h at {INTERVAL:.0f} s): CPU per refresh "
            f"+ scrape median {statistics.median(steady):.2f} s (first {cpu_each[0]:.2f} s, "
            f"max {max(steady):.2f} s) = {100 * statistics.median(steady) / INTERVAL:.1f}% of "
            f"one core per {INTERVAL:.0f} s; wall median {statistics.median(wall_each):.2f} s; "
            f"RSS {rss[0]:.0f} MB after the first, {rss[9 if len(rss) > 9 else -1]:.0f} MB "
            f"after 10, {rss[-1]:.0f} MB after {len(rss)}"
        )
    finally:
        kafka.stop()


if __name__ == "__main__":
    main()
