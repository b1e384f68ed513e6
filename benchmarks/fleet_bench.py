"""Fleet benchmark: checking many checkpoints on S3 (moto server) against a real Kafka broker.

    .venv/bin/python benchmarks/fleet_bench.py --sizes 100 1000 --runs 3 [--spark-sizes 1000 10000]
        [--s3-server s3rver|moto] [--batches 100]

What it does, in one run:

1. starts the test bed's Kafka broker and an S3 server (separate processes): s3rver
   (testbed/s3rver_server.py, the default: about half moto's CPU per request, and its LIST
   cost grows with the keys returned, as S3's latency does, not with the bucket) or moto;
2. creates topics with 32 partitions and runs ONE real stateful Spark query over Kafka to get a
   real checkpoint, used as a template;
3. clones the template into a fleet of jobs on S3 (varied offsets, 20 retained batches each,
   10% of the jobs with a state/ directory of 1,000 objects), spread over buckets of 100 jobs
   (moto's LIST cost grows with the number of objects in the BUCKET, unlike S3's);
4. measures, each in its own subprocess (so peak RSS is per method), median of --runs:
   - ours: FleetChecker first check and a repeated check (history=1, 16 threads);
   - baseline, the naive way, with the same 16 threads: list EVERY object under the
     checkpoint prefix, pick the newest offsets file by modification time, read its last line,
     one Kafka consumer per job with get_watermark_offsets per partition;
5. state size: jobs with 0, 5,000 and 50,000 state objects (--state-sizes, --state-jobs
   checkpoints each), requests of both methods;
6. --spark-sizes: spark_scan at local[2] on lighter fleets (3 batches per job, no state).

Prints one JSON line per measurement and a summary table. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet_common import (
    counting_s3_client,
    job_files,
    load_template,
    real_template,
    upload_s3,
)

JOBS_PER_BUCKET = 100
THREADS = 16


def _peak_rss_mb() -> float:
    """VmHWM: peak RSS of this process image. (ru_maxrss survives exec on Linux, so a child
    started from a big parent would report the parent's peak.)"""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _client_cpu() -> float:
    """User + system CPU seconds of this (measuring) process, from getrusage."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _group_cpu(pgid: int | None) -> float:
    """User + system CPU seconds of every process in process group ``pgid`` (a test-bed
    server: moto, or the Kafka broker's JVM), from /proc; 0 when unknown."""
    if not pgid:
        return 0.0
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:  # fields after the name: state ppid pgrp ... utime stime
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


class _Meter:
    """Wall, client CPU and the servers' CPU between start() and stop()."""

    def __init__(self, manifest: dict[str, Any]) -> None:
        self.pids = {"s3": manifest.get("s3_pid"), "kafka": manifest.get("kafka_pid")}

    def start(self) -> None:
        self._wall = time.perf_counter()
        self._cpu = _client_cpu()
        self._servers = {name: _group_cpu(pid) for name, pid in self.pids.items()}

    def stop(self, prefix: str = "") -> dict[str, float]:
        wall = time.perf_counter() - self._wall
        result = {f"{prefix}seconds": wall, f"{prefix}cpu_seconds": _client_cpu() - self._cpu}
        for name, pid in self.pids.items():
            result[f"{prefix}{name}_server_cpu_seconds"] = _group_cpu(pid) - self._servers[name]
        return result


def _rss_kb() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() // 1024


# -- measurements (run in a subprocess) ------------------------------------------------------


class _CountingAdmin:
    """Counts the Kafka admin API calls our client makes (each is one request per broker)."""

    def __init__(self, admin: Any, counter: dict[str, int]) -> None:
        self._admin = admin
        self._counter = counter

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._admin, name)
        if name in ("list_topics", "list_offsets"):

            def counted(*args: Any, **kwargs: Any) -> Any:
                self._counter[name] = self._counter.get(name, 0) + 1
                return attribute(*args, **kwargs)

            return counted
        return attribute


def measure_ours(manifest: dict[str, Any], locations: list[str], history: int) -> dict[str, Any]:
    from airflow_sparklag.fleet import FleetChecker
    from airflow_sparklag.kafka import KafkaOffsetsClient

    kafka_calls: dict[str, int] = {}
    kafka = KafkaOffsetsClient({"bootstrap.servers": manifest["bootstrap"]}, timeout=30)
    real_admin = kafka.admin()
    kafka._admin = _CountingAdmin(real_admin, kafka_calls)
    checker = FleetChecker(
        locations,
        kafka_config={"bootstrap.servers": manifest["bootstrap"]},
        s3_options=manifest["s3_options"],
        kafka_client=kafka,
        history=history,
        max_workers=THREADS,
    )

    # Requests the package sent to S3 (its own counter: boto3 or obstore, whichever reads).
    def s3_calls() -> int:
        return checker.storage_requests

    meter = _Meter(manifest)
    read_done: list[float] = []

    def progress(done: int, total: int) -> None:
        if done == total:
            read_done.append(time.perf_counter())

    rss_before = _rss_kb()
    meter.start()
    start = time.perf_counter()
    results = checker.check(progress=progress)
    first = meter.stop()
    first["read_seconds"] = read_done[0] - start if read_done else 0.0
    first_s3 = s3_calls()
    first_kafka = sum(kafka_calls.values())
    meter.start()
    checker.check()
    repeat = meter.stop("repeat_")
    errors = [r.error for r in results if r.error]
    return {
        **first,
        **repeat,
        "s3_requests": first_s3,
        "kafka_requests": first_kafka,
        "repeat_s3_requests": s3_calls() - first_s3,
        "repeat_kafka_requests": sum(kafka_calls.values()) - first_kafka,
        "peak_rss_mb": _peak_rss_mb(),
        "rss_growth_mb": _peak_rss_mb() - rss_before / 1024,
        "total_lag": sum(r.report.total_lag for r in results if r.report),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def measure_baseline(manifest: dict[str, Any], locations: list[str]) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    client, s3_calls = counting_s3_client(manifest["s3_options"])
    lock = threading.Lock()
    kafka_calls = {"consumers": 0, "get_watermark_offsets": 0}

    def one(location: str) -> int:
        bucket, _, prefix = location.split("://", 1)[1].partition("/")
        objects: list[dict[str, Any]] = []
        paginator = client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix + "/"):
            objects.extend(page.get("Contents", []))
        offsets = [o for o in objects if o["Key"].startswith(f"{prefix}/offsets/")]
        newest = max(offsets, key=lambda o: o["LastModified"])
        body = client.get_object(Bucket=bucket, Key=newest["Key"])["Body"].read().decode()
        committed = json.loads(body.split("\n")[-1])
        consumer = Consumer(
            {
                "bootstrap.servers": manifest["bootstrap"],
                "group.id": f"naive-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
            }
        )
        lag = 0
        calls = 0
        try:
            for topic, partitions in committed.items():
                for partition, offset in partitions.items():
                    _low, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, int(partition)), timeout=30
                    )
                    calls += 1
                    lag += high - offset
        finally:
            consumer.close()
        with lock:
            kafka_calls["consumers"] += 1
            kafka_calls["get_watermark_offsets"] += calls
        return lag

    rss_before = _rss_kb()
    meter = _Meter(manifest)
    meter.start()
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        lags = list(pool.map(one, locations))
    measured = meter.stop()
    return {
        **measured,
        "s3_requests": s3_calls(),
        # each get_watermark_offsets sends ListOffsets for the low and the high watermark
        "kafka_requests": 2 * kafka_calls["get_watermark_offsets"],
        "kafka_consumers": kafka_calls["consumers"],
        "peak_rss_mb": _peak_rss_mb(),
        "rss_growth_mb": _peak_rss_mb() - rss_before / 1024,
        "total_lag": sum(lags),
    }


def measure_spark(manifest: dict[str, Any], locations: list[str], workdir: Path) -> dict[str, Any]:
    from airflow_sparklag import spark_scan
    from airflow_sparklag.monitor import CheckOptions
    from testbed.spark import spark_session

    spark = spark_session(workdir / "spark-measure", memory="2g")
    meter = _Meter(manifest)
    try:
        meter.start()
        start = time.perf_counter()
        result = spark_scan.scan(
            spark,
            locations,
            kafka_config={"bootstrap.servers": manifest["bootstrap"]},
            s3_options=manifest["s3_options"],
            options=CheckOptions(history=1),
        )
        jobs = result.jobs.count()
        partitions = result.partitions.count()
        read_and_judge = time.perf_counter() - start
        servers = meter.stop()  # moto's CPU during the read + judge pass
        output = workdir / f"scan-{uuid.uuid4().hex[:6]}"
        spark_scan.write_scan(result, str(output))
        seconds = time.perf_counter() - start
        result.unpersist()
    finally:
        spark.stop()
    return {
        "seconds": seconds,
        "seconds_without_write": read_and_judge,
        "s3_server_cpu_seconds": servers["s3_server_cpu_seconds"],
        "s3_requests": result.storage_requests,
        "kafka_requests": 3,  # one snapshot on the driver: metadata + 2 batched ListOffsets
        "jobs": jobs,
        "partitions": partitions,
    }


def run_measure(args: argparse.Namespace) -> None:
    manifest = json.loads(Path(args.manifest).read_text())
    locations = manifest["fleets"][args.fleet][: args.size]
    if args.method == "ours":
        result = measure_ours(manifest, locations, args.history)
    elif args.method == "baseline":
        result = measure_baseline(manifest, locations)
    else:
        result = measure_spark(manifest, locations, Path(args.manifest).parent)
    result.update({"method": args.method, "fleet": args.fleet, "size": len(locations)})
    print(json.dumps(result))


def subprocess_measure(
    manifest_path: Path, method: str, fleet: str, size: int, history: int = 1
) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "measure",
        "--manifest",
        str(manifest_path),
        "--method",
        method,
        "--fleet",
        fleet,
        "--size",
        str(size),
        "--history",
        str(history),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{method} {fleet} {size} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- set-up ----------------------------------------------------------------------------------


def build_fleet(
    s3_client: Any,
    template: Any,
    topics: list[str],
    ends: dict[str, dict[int, int]],
    *,
    name: str,
    size: int,
    batches: int,
    stateful_every: int,
    state_objects: int,
    seed: int,
) -> tuple[list[str], int]:
    rng = random.Random(seed)
    locations: list[str] = []
    objects: list[tuple[str, str, bytes]] = []
    for bucket_index in range((size + JOBS_PER_BUCKET - 1) // JOBS_PER_BUCKET):
        s3_client.create_bucket(Bucket=f"{name}-{bucket_index}")
    for i in range(size):
        bucket = f"{name}-{i // JOBS_PER_BUCKET}"
        prefix = f"checkpoints/team-{i % 7}/job-{i:05d}"
        topic = topics[i % len(topics)]
        stateful = stateful_every > 0 and i % stateful_every == 0
        files = job_files(
            template,
            topic,
            ends[topic],
            batches=batches,
            state_objects=state_objects if stateful else 0,
            rng=rng,
        )
        objects.extend((bucket, f"{prefix}/{rel}", body) for rel, body in files.items())
        locations.append(f"s3a://{bucket}/{prefix}")
    upload_s3(s3_client, objects)
    return locations, len(objects)


def setup(args: argparse.Namespace, workdir: Path) -> tuple[Path, list[Any]]:
    from testbed.kafka_broker import KafkaBroker

    if args.s3_server == "s3rver":
        from testbed.s3rver_server import S3rverServer as S3Server
    else:
        from testbed.s3_server import S3Server

    started: list[Any] = []
    kafka = KafkaBroker(workdir / "kafka", heap="768m").start()
    started.append(kafka)
    s3 = S3Server(workdir / "s3").start()
    started.append(s3)
    print(f"# kafka {kafka.bootstrap}, {args.s3_server} {s3.endpoint}", file=sys.stderr)
    topics = [
        kafka.create_topic(f"bench-{t:02d}-{uuid.uuid4().hex[:4]}", partitions=args.partitions)
        for t in range(args.topics)
    ]
    for topic in topics:
        kafka.produce(topic, args.partitions * 20)
    start = time.monotonic()
    if args.template_checkpoint:
        # a checkpoint an earlier run of real_template() left behind (a real stateful query)
        template = load_template(Path(args.template_checkpoint))
    else:
        template = real_template(workdir, kafka, topics[0])
    print(f"# template checkpoint: {time.monotonic() - start:.0f} s", file=sys.stderr)
    ends = {topic: kafka.end_offsets(topic) for topic in topics}
    client = s3.client()
    fleets: dict[str, list[str]] = {}
    start = time.monotonic()
    fleets["main"], count = build_fleet(
        client,
        template,
        topics,
        ends,
        name="fleet",
        size=max(args.sizes),
        batches=args.batches,
        stateful_every=args.stateful_every,
        state_objects=args.state_objects,
        seed=1,
    )
    print(f"# main fleet: {count} objects in {time.monotonic() - start:.0f} s", file=sys.stderr)
    for objects in args.state_sizes:
        label = f"state{objects}"
        start = time.monotonic()
        fleets[label], count = build_fleet(
            client,
            template,
            topics,
            ends,
            name=label.lower(),
            size=args.state_jobs,
            batches=args.batches,
            stateful_every=1,
            state_objects=objects,
            seed=2,
        )
        print(f"# {label}: {count} objects in {time.monotonic() - start:.0f} s", file=sys.stderr)
    if args.spark_sizes:
        start = time.monotonic()
        fleets["light"], count = build_fleet(
            client,
            template,
            topics,
            ends,
            name="light",
            size=max(args.spark_sizes),
            batches=3,
            stateful_every=0,
            state_objects=0,
            seed=3,
        )
        print(
            f"# light fleet: {count} objects in {time.monotonic() - start:.0f} s", file=sys.stderr
        )
    manifest = {
        "bootstrap": kafka.bootstrap,
        "s3_options": s3.options,
        "s3_pid": s3.process.pid if s3.process else None,
        "kafka_pid": kafka.process.pid if kafka.process else None,
        "fleets": fleets,
        "s3_server": args.s3_server,
        "topics": len(topics),
        "partitions": args.partitions,
    }
    path = workdir / "manifest.json"
    path.write_text(json.dumps(manifest))
    return path, started


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def run_benchmark(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="sparklag-bench-"))
    manifest, started = setup(args, workdir)
    summary: dict[str, Any] = {"sizes": {}, "state": {}, "spark": {}}
    try:
        for size in args.sizes:
            rows: dict[str, list[dict[str, Any]]] = {"ours": [], "baseline": []}
            for _ in range(args.runs):
                for method in ("ours", "baseline"):
                    row = subprocess_measure(manifest, method, "main", size)
                    print(json.dumps(row))
                    rows[method].append(row)
            summary["sizes"][size] = {
                method: {
                    key: _median(method_rows, key)
                    for key in method_rows[0]
                    if isinstance(method_rows[0][key], (int, float))
                    and not isinstance(method_rows[0][key], bool)
                }
                for method, method_rows in rows.items()
            }
        for objects in args.state_sizes:
            label = f"state{objects}"
            summary["state"][label] = {
                method: subprocess_measure(manifest, method, label, args.state_jobs)
                for method in ("ours", "baseline")
            }
            print(json.dumps({label: summary["state"][label]}))
        for size in args.spark_sizes:
            spark_rows = [
                subprocess_measure(manifest, "spark", "light", size) for _ in range(args.spark_runs)
            ]
            for row in spark_rows:
                print(json.dumps(row))
            summary["spark"][size] = {
                key: _median(spark_rows, key)
                for key in spark_rows[0]
                if isinstance(spark_rows[0][key], (int, float))
            }
    finally:
        for component in reversed(started):
            component.stop()
        if not args.keep_workdir:
            # s3rver keeps every object as 3 files: a 400k-object fleet is ~1.2M inodes.
            shutil.rmtree(workdir, ignore_errors=True)
    print("\n# summary (medians)")
    print(json.dumps(summary, indent=2, default=str))
    for size, methods in summary["sizes"].items():
        ours, base = methods["ours"], methods["baseline"]
        print(
            f"N={size}: ours {ours['seconds']:.2f} s / {ours['s3_requests']:.0f} S3 / "
            f"{ours['kafka_requests']:.0f} Kafka / {ours['peak_rss_mb']:.0f} MB peak RSS; "
            f"baseline {base['seconds']:.2f} s / {base['s3_requests']:.0f} S3 / "
            f"{base['kafka_requests']:.0f} Kafka / {base['peak_rss_mb']:.0f} MB; "
            f"speed-up {base['seconds'] / ours['seconds']:.1f}x, "
            f"S3 requests {base['s3_requests'] / ours['s3_requests']:.1f}x fewer, "
            f"repeat check {ours['repeat_seconds']:.2f} s / {ours['repeat_s3_requests']:.0f} S3"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    measure = sub.add_parser("measure", help="(internal) one measurement in this process")
    measure.add_argument("--manifest", required=True)
    measure.add_argument("--method", choices=["ours", "baseline", "spark"], required=True)
    measure.add_argument("--fleet", default="main")
    measure.add_argument("--size", type=int, required=True)
    measure.add_argument("--history", type=int, default=1)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--batches", type=int, default=20, help="retained batches per job")
    parser.add_argument("--stateful-every", type=int, default=10, help="every k-th job stateful")
    parser.add_argument("--state-objects", type=int, default=1000)
    parser.add_argument(
        "--state-sizes",
        type=int,
        nargs="*",
        default=[0, 5_000, 50_000],
        help="state/ objects of the extra state-size fleets (one fleet per size)",
    )
    parser.add_argument(
        "--state-jobs", type=int, default=1, help="checkpoints in each state-size fleet"
    )
    parser.add_argument("--template-checkpoint", help="reuse a real checkpoint as the template")
    parser.add_argument("--spark-sizes", type=int, nargs="*", default=[])
    parser.add_argument("--spark-runs", type=int, default=1)
    parser.add_argument(
        "--s3-server",
        choices=["s3rver", "moto"],
        default="s3rver",
        help="S3 API to serve the fleet: s3rver (npm, ~half moto's CPU per request; its "
        "listings are exact under a checkpoint root) or moto (the tests' server)",
    )
    parser.add_argument(
        "--keep-workdir", action="store_true", help="keep the servers' data and logs afterwards"
    )
    args = parser.parse_args()
    if args.command == "measure":
        run_measure(args)
    else:
        run_benchmark(args)


if __name__ == "__main__":
    main()
