"""Soak: a FleetChecker polling 100 jobs 1,000 times, as a sensor would; memory and CPU per poll.

    .venv/bin/python benchmarks/fleet_soak.py [--jobs 100] [--polls 1000] \\
        [--template-checkpoint /path/to/a/real/kafka/checkpoint]

The jobs live on local disk (cloned from one real Spark checkpoint: the given one, or one made
by running a real query first) and read real Kafka topics (32 partitions). Between polls, 10 jobs
commit a new batch (offsets/N then commits/N) and Spark's retention is imitated (files below
N - 100 are deleted). Local disk keeps the run short: the storage backend only changes the
request latency, not what the checker keeps in memory. Reports, every 100 polls, the Python heap
(tracemalloc current), RSS, storage requests and CPU per poll, and at the end the storage
requests per job per poll by kind (list, read, stat) from poll 2 on. Not part of the test suite.
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
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet_common import (
    job_files,
    load_template,
    per_job_per_poll,
    real_template,
    requests_by_kind,
    write_local,
)

RETAINED = 100  # Spark's default minBatchesToRetain


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--polls", type=int, default=1000)
    parser.add_argument("--advancing", type=int, default=10, help="jobs with a new batch per poll")
    parser.add_argument("--history", type=int, default=10)
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--template-checkpoint", type=Path)
    args = parser.parse_args()

    from airflow_sparklag.fleet import FleetChecker
    from testbed.kafka_broker import KafkaBroker

    workdir = Path(tempfile.mkdtemp(prefix="sparklag-soak-"))
    kafka = KafkaBroker(workdir / "kafka").start()
    try:
        topics = [
            kafka.create_topic(f"soak-{t}", partitions=args.partitions) for t in range(args.topics)
        ]
        for topic in topics:
            kafka.produce(topic, args.partitions * 400)
        if args.template_checkpoint:
            template = load_template(args.template_checkpoint)
        else:
            template = real_template(workdir, kafka, topics[0])
        ends = {topic: kafka.end_offsets(topic) for topic in topics}
        rng = random.Random(7)
        roots: list[Path] = []
        next_batch: list[int] = []
        for i in range(args.jobs):
            root = workdir / "fleet" / f"job-{i:03d}"
            files = job_files(
                template,
                topics[i % len(topics)],
                ends[topics[i % len(topics)]],
                batches=20,
                state_objects=0,
                rng=rng,
            )
            write_local(root, files)
            roots.append(root)
            next_batch.append(
                max(int(name.split("/")[1]) for name in files if name.startswith("offsets/")) + 1
            )

        checker = FleetChecker(
            [str(root) for root in roots],
            kafka_config={"bootstrap.servers": kafka.bootstrap},
            history=args.history,
        )
        tracemalloc.start()
        samples: list[dict[str, float]] = []
        cpu_per_poll: list[float] = []
        wall_per_poll: list[float] = []
        after_first: dict[str, int] = {}
        for poll in range(1, args.polls + 1):
            for i in rng.sample(range(args.jobs), args.advancing):
                root, batch_id = roots[i], next_batch[i]
                previous = (root / "offsets" / str(batch_id - 1)).read_bytes()
                (root / "offsets" / str(batch_id)).write_bytes(previous)
                (root / "commits" / str(batch_id)).write_bytes(template.commit)
                for directory in ("offsets", "commits"):
                    (root / directory / str(batch_id - RETAINED)).unlink(missing_ok=True)
                next_batch[i] += 1
            cpu, wall = time.process_time(), time.perf_counter()
            results = checker.check()
            cpu_per_poll.append(time.process_time() - cpu)
            wall_per_poll.append(time.perf_counter() - wall)
            if poll == 1:
                after_first = requests_by_kind(checker.session.backends)
            if any(result.error for result in results):
                raise SystemExit(f"poll {poll}: {[r.error for r in results if r.error][:3]}")
            if poll == 1 or poll % 100 == 0:
                sample = {
                    "poll": poll,
                    "heap_mb": tracemalloc.get_traced_memory()[0] / 2**20,
                    "rss_mb": _rss_mb(),
                    "storage_requests": checker.storage_requests,
                    "cpu_ms_per_poll_median": 1000 * statistics.median(cpu_per_poll[-100:]),
                    "wall_ms_per_poll_median": 1000 * statistics.median(wall_per_poll[-100:]),
                }
                samples.append(sample)
                print(json.dumps(sample), flush=True)
        by_kind = per_job_per_poll(
            after_first, requests_by_kind(checker.session.backends), args.jobs, args.polls - 1
        )
        checker.close()
        polled = max(1, samples[-1]["poll"] - 1)
        per_poll = (samples[-1]["storage_requests"] - samples[0]["storage_requests"]) / polled
        first, last = samples[1] if len(samples) > 1 else samples[0], samples[-1]
        print(
            f"# {args.jobs} jobs, {args.polls} polls: heap {first['heap_mb']:.1f} -> "
            f"{last['heap_mb']:.1f} MB (poll {first['poll']} -> {last['poll']}), RSS "
            f"{first['rss_mb']:.0f} -> {last['rss_mb']:.0f} MB, CPU per poll median "
            f"{1000 * statistics.median(cpu_per_poll):.1f} ms, wall per poll median "
            f"{1000 * statistics.median(wall_per_poll):.1f} ms, storage requests per poll "
            f"{per_poll:.1f}; per job per poll by kind (polls 2-{args.polls}, {args.advancing} "
            f"of {args.jobs} jobs with a new batch each poll): {json.dumps(by_kind)}"
        )
    finally:
        kafka.stop()


if __name__ == "__main__":
    main()
