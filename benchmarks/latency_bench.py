"""Fleet check with network latency: ours vs the naive way, side by side, behind toxiproxy.

    .venv/bin/python benchmarks/latency_bench.py --sizes 200 1000 \\
        --template-checkpoint tests/data/checkpoints/ck43 [--methods ours-boto3 ours-obstore naive]
        [--s3-latency 20 --s3-jitter 5 --kafka-latency 2 --kafka-jitter 1] [--profile]

What it does, in one run:

1. starts the light in-memory S3 server (``testbed/light_s3.py``: ~0.1-0.5 ms of server CPU
   per request, where s3rver needs ~45 ms for a 200-key listing and moto more), a real KRaft
   Kafka broker, and toxiproxy in front of both: every S3 answer is delayed by 20 +- 5 ms and
   every Kafka answer by 2 +- 1 ms (toxiproxy's ``latency`` toxic, downstream); the broker
   advertises the proxy's port, so every Kafka request goes through it;
2. clones one real stateful Spark checkpoint (``--template-checkpoint``) into a fleet: 20 topics
   x 32 partitions, ``--batches`` retained batches per job (offsets + commits), ``metadata``,
   ``sources/0/0``, and every ``--stateful-every``-th job a ``state/`` of ``--state-objects``
   objects; 100 jobs per bucket, loaded straight into the server (not through the proxy);
3. measures, each in its own subprocess, the FIRST check of the first N jobs:
   - ``ours-boto3``: ``FleetChecker(locations, history=1, max_workers=16).check()``, reads
     through boto3 (``s3_options={"reader": "boto3"}``);
   - ``ours-obstore``: the same with ``{"reader": "obstore"}`` (storage/s3_obstore.py);
   - ``ours-lean``: the same with ``{"reader": "lean"}`` (storage/s3_lean.py: urllib3 and
     SigV4 signing of our own, the listing walked only up to ``offsets/``);
   - ``before-boto3`` / ``before-obstore``: the same two with the package from
     ``--before-tree`` (a copy of the code before a change), for before/after in one run;
   - ``naive``: fleet_bench's baseline with the same 16 threads: list every object under the
     checkpoint, GET the newest offsets file, one consumer per job and
     ``get_watermark_offsets`` per partition.
   Wall time, client CPU (getrusage of the measuring process: every thread, librdkafka's and
   obstore's included), S3 requests (counted by the S3 server), Kafka requests, the servers'
   CPU, and a digest of every job's (total lag, verdict) so the two readers' answers can be
   compared.

Prints one JSON line per measurement and a table. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet_bench import _client_cpu, _CountingAdmin, _Meter, measure_baseline
from fleet_common import job_files, load_template

_CODE_ENV = "SPARKLAG_BENCH_CODE"
JOBS_PER_BUCKET = 100
THREADS = 16
METHODS = (
    "ours-boto3",
    "ours-obstore",
    "ours-lean",
    "naive",
    "before-boto3",
    "before-obstore",
    "before-lean",
)


def _s3_stats(manifest: dict[str, Any]) -> dict[str, int]:
    import requests

    return dict(requests.get(manifest["s3_direct"] + "/_stats", timeout=30).json())


def _s3_requests(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(after.get(k, 0) - before.get(k, 0) for k in after if k.startswith("op:"))


def measure_ours(
    manifest: dict[str, Any], locations: list[str], reader: str, profile: bool
) -> dict[str, Any]:
    from airflow_sparklag.fleet import FleetChecker
    from airflow_sparklag.kafka import KafkaOffsetsClient
    from airflow_sparklag.session import Session

    kafka_calls: dict[str, int] = {}
    kafka = KafkaOffsetsClient({"bootstrap.servers": manifest["bootstrap"]}, timeout=30)
    kafka._admin = _CountingAdmin(kafka._get_admin(), kafka_calls)
    session = Session(kafka_client=kafka, s3_options={**manifest["s3_options"], "reader": reader})
    checker = FleetChecker(locations, session=session, history=1, max_workers=THREADS)
    meter = _Meter(manifest)
    before = _s3_stats(manifest)
    profiler = cProfile.Profile() if profile else None
    # The reading phase ends before the judging starts: the client CPU and wall at that point
    # split the check in two (read: storage and checkpoint parsing; judge: Kafka + verdicts).
    read_states = checker.read_states
    phase: dict[str, float] = {}

    def timed_read_states(progress: Any = None) -> Any:
        found = read_states(progress)
        phase.update(cpu=_client_cpu(), wall=time.perf_counter())
        return found

    checker.read_states = timed_read_states  # type: ignore[method-assign]
    meter.start()
    started = (_client_cpu(), time.perf_counter())
    if profiler:
        profiler.enable()
    results = checker.check()
    if profiler:
        profiler.disable()
    measured = meter.stop()
    after = _s3_stats(manifest)
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue(), file=sys.stderr)
    errors = [r.error for r in results if r.error]
    answers = sorted(
        (r.location, r.report.total_lag if r.report else None, r.verdict.health.value)
        for r in results
    )
    return {
        **measured,
        "read_cpu_seconds": phase["cpu"] - started[0],
        "read_seconds": phase["wall"] - started[1],
        "s3_requests": _s3_requests(before, after),
        "kafka_requests": sum(kafka_calls.values()),
        "total_lag": sum(r.report.total_lag for r in results if r.report),
        "answers_digest": hashlib.sha1(json.dumps(answers).encode()).hexdigest()[:12],
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def run_measure(args: argparse.Namespace) -> None:
    if os.environ.get(_CODE_ENV):  # fleet_bench put this tree first again: the other one first
        assert "airflow_sparklag" not in sys.modules
        sys.path.insert(0, os.environ[_CODE_ENV])
    manifest = json.loads(Path(args.manifest).read_text())
    locations = manifest["locations"][: args.size]
    if args.method == "naive":
        before = _s3_stats(manifest)
        result = measure_baseline(manifest, locations)
        result["s3_requests"] = _s3_requests(before, _s3_stats(manifest))
    else:
        reader = args.method.split("-", 1)[1]
        result = measure_ours(manifest, locations, reader, args.profile)
    import airflow_sparklag

    result.update({"method": args.method, "size": len(locations)})
    result["package"] = str(Path(airflow_sparklag.__file__).parent)
    result["cpu_ms_per_job"] = 1000 * result["cpu_seconds"] / len(locations)
    print(json.dumps(result))


def subprocess_measure(
    manifest: Path,
    method: str,
    size: int,
    profile: bool,
    py_spy: str | None = None,
    before_tree: str | None = None,
) -> dict[str, Any]:
    command = [sys.executable, __file__, "measure", "--manifest", str(manifest)]
    env = dict(os.environ)
    env.pop(_CODE_ENV, None)
    if method.startswith("before-"):
        if not before_tree:
            raise SystemExit("--methods before-*: give --before-tree (a copy of the old code)")
        env[_CODE_ENV] = before_tree
    command += ["--method", method, "--size", str(size)] + (["--profile"] if profile else [])
    if py_spy and method != "naive":
        # every thread, Python and native frames, as collapsed stacks (one file per run)
        out = Path(py_spy) / f"{method}-{size}.txt"
        command = [
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "-r",
            "250",
            "--threads",
            "-f",
            "raw",
            "-o",
            str(out),
            "--",
            *command,
        ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{method} {size} failed:\n{done.stderr[-4000:]}")
    if profile:
        print(done.stderr[-6000:], file=sys.stderr)
    # the measurement's JSON line; under --py-spy, py-spy's own messages follow it
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return dict(json.loads(lines[-1]))


# -- set-up ----------------------------------------------------------------------------------


def build_fleet(s3: Any, template: Any, topics: list[str], ends: dict, args: Any) -> list[str]:
    """Clone the template into max(sizes) jobs, loaded bucket by bucket into the S3 server."""
    rng = random.Random(1)
    locations: list[str] = []
    buckets: dict[str, list[tuple[str, bytes]]] = {}
    for i in range(max(args.sizes)):
        bucket = f"fleet-{i // JOBS_PER_BUCKET}"
        prefix = f"checkpoints/team-{i % 7}/job-{i:05d}"
        topic = topics[i % len(topics)]
        stateful = args.stateful_every > 0 and i % args.stateful_every == 0
        files = job_files(
            template,
            topic,
            ends[topic],
            batches=args.batches,
            state_objects=args.state_objects if stateful else 0,
            rng=rng,
        )
        buckets.setdefault(bucket, []).extend((f"{prefix}/{r}", b) for r, b in files.items())
        locations.append(f"s3a://{bucket}/{prefix}")
    for bucket, items in buckets.items():
        s3.bulk_load(bucket, items)
    objects = sum(len(items) for items in buckets.values())
    print(f"# fleet: {len(locations)} jobs, {objects} objects", file=sys.stderr)
    return locations


def setup(args: argparse.Namespace, workdir: Path) -> tuple[Path, list[Any]]:
    from testbed.kafka_broker import KafkaBroker
    from testbed.light_s3 import LightS3Server
    from testbed.process import free_port
    from testbed.toxiproxy import Toxiproxy

    started: list[Any] = []
    toxiproxy = Toxiproxy(workdir / "toxiproxy").start()
    started.append(toxiproxy)
    kafka_port = free_port()
    kafka_proxy = toxiproxy.proxy("kafka", f"127.0.0.1:{kafka_port}")
    kafka = KafkaBroker(
        workdir / "kafka", heap="768m", port=kafka_port, advertised_port=kafka_proxy.port
    ).start()
    started.append(kafka)
    s3 = LightS3Server(workdir / "s3").start()
    started.append(s3)
    s3_proxy = toxiproxy.proxy("s3", f"127.0.0.1:{s3.port}")
    topics = [
        kafka.create_topic(f"lat-{t:02d}-{uuid.uuid4().hex[:4]}", partitions=args.partitions)
        for t in range(args.topics)
    ]
    for topic in topics:
        kafka.produce(topic, args.partitions * 20)
    template = load_template(Path(args.template_checkpoint))
    ends = {topic: kafka.end_offsets(topic) for topic in topics}
    locations = build_fleet(s3, template, topics, ends, args)
    s3_proxy.add("latency", latency=args.s3_latency, jitter=args.s3_jitter)
    kafka_proxy.add("latency", latency=args.kafka_latency, jitter=args.kafka_jitter)
    manifest = {
        "bootstrap": kafka.bootstrap,
        "s3_options": {**s3.options, "endpoint_url": s3_proxy.url},
        "s3_direct": s3.endpoint,
        "s3_pid": s3.process.pid if s3.process else None,
        "kafka_pid": kafka.process.pid if kafka.process else None,
        "locations": locations,
    }
    path = workdir / "manifest.json"
    path.write_text(json.dumps(manifest))
    return path, started


def _print_table(rows: list[dict[str, Any]]) -> None:
    header = (
        "N | run | method | wall s | client CPU s | CPU ms per job | of which reading s | "
        "S3 requests | Kafka requests | S3 server CPU s | broker CPU s | total lag | answers | "
        "x faster than naive (same run)"
    )
    print(f"\n| {header} |")
    print("|---" * (header.count("|") + 1) + "|")
    # each run's own naive measurement (the machine's load moves between runs)
    naive = {(r["size"], r.get("run")): r["seconds"] for r in rows if r["method"] == "naive"}
    for r in rows:
        baseline = naive.get((r["size"], r.get("run")), 0)
        ratio = baseline / r["seconds"] if r["method"] != "naive" else 1.0
        reading = r.get("read_cpu_seconds")
        cells = [
            f"{r['size']:,}",
            str(r.get("run", "-")),
            r["method"],
            f"{r['seconds']:.2f}",
            f"{r['cpu_seconds']:.2f}",
            f"{r['cpu_ms_per_job']:.2f}",
            "-" if reading is None else f"{reading:.2f}",
            f"{r['s3_requests']:,}",
            f"{r['kafka_requests']:,}",
            f"{r['s3_server_cpu_seconds']:.2f}",
            f"{r['kafka_server_cpu_seconds']:.2f}",
            f"{r['total_lag']:,}",
            r.get("answers_digest", "-"),
            f"{ratio:.1f}x",
        ]
        print("| " + " | ".join(cells) + " |")


def run_benchmark(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="sparklag-latency-"))
    start = time.monotonic()
    manifest, started = setup(args, workdir)
    print(f"# set-up {time.monotonic() - start:.0f} s", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    try:
        for size in args.sizes:
            for run in range(args.runs):
                for method in args.methods:
                    row = subprocess_measure(
                        manifest, method, size, args.profile, args.py_spy, args.before_tree
                    )
                    row["run"] = run + 1
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        for component in reversed(started):
            component.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    _print_table(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    measure = sub.add_parser("measure", help="(internal) one measurement in this process")
    measure.add_argument("--manifest", required=True)
    measure.add_argument("--method", choices=METHODS, required=True)
    measure.add_argument("--size", type=int, required=True)
    measure.add_argument("--profile", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--batches", type=int, default=100, help="retained batches per job")
    parser.add_argument("--stateful-every", type=int, default=10)
    parser.add_argument("--state-objects", type=int, default=3000)
    parser.add_argument("--s3-latency", type=int, default=20, help="ms added to S3 answers")
    parser.add_argument("--s3-jitter", type=int, default=5)
    parser.add_argument("--kafka-latency", type=int, default=2, help="ms added to Kafka answers")
    parser.add_argument("--kafka-jitter", type=int, default=1)
    parser.add_argument(
        "--template-checkpoint",
        default=str(Path(__file__).resolve().parent.parent / "tests/data/checkpoints/ck43"),
        help="a real stateful Spark checkpoint to clone (default: the test data's ck43)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile our checks (stderr)")
    parser.add_argument("--py-spy", help="record our checks with py-spy into this directory")
    parser.add_argument(
        "--before-tree",
        help="directory holding a copy of the airflow_sparklag package as it was before a "
        "change: methods before-boto3 / before-obstore measure it in the same run",
    )
    args = parser.parse_args()
    if args.command == "measure":
        run_measure(args)
    else:
        run_benchmark(args)


if __name__ == "__main__":
    main()
