"""The Spark fleet scan against the CLI on the same fleet, in one run (issue 14).

    .venv/bin/python benchmarks/spark_scan_bench.py --jobs 200 [1000 ...]
        [--s3-server light|moto|s3rver] [--runs 1] [--batches 10] [--topics 20]
        [--partitions 32] [--master local[2]] [--cli-timeout 1800] [--no-cli]

What it does:

1. starts the test bed's Kafka broker and an S3 server, each its own process: by default
   the light in-memory server of the benchmarks (``testbed/light_s3.py``: ~0.1-0.5 ms of
   server CPU per request, a LIST costs the same in a bucket of 100 or 220,000 keys, and it
   counts requests), the only one of the three on which 10,000 jobs are measurable here;
   or moto (the tests' server and the one the 349 s DAG run used) or s3rver;
2. creates topics and, for each N, clones a real Spark checkpoint (--template, default
   tests/data/checkpoints/ck43) into N jobs under ``s3a://scan-<N>-<b>/checkpoints/`` (buckets
   of --jobs-per-bucket jobs, one --prefix each; by default one bucket per N), --batches
   retained batches each, varied lag. moto's and s3rver's LIST cost grows with the bucket
   (a job's LIST took 2.9 s on s3rver with 10,000 jobs in its bucket), S3's and the light
   server's do not. The light server is loaded straight through its bulk endpoint (no
   per-object PUT), as the latency benchmark did;
3. for each N, in this order, each as its own process and timed from outside (wall):
   (a) ``sparklag status --prefix s3a://scan-<N>-0/checkpoints ... --json`` (the CLI);
   (b) Spark start-up alone: ``spark-submit`` of a script that starts a SparkSession and
       stops it;
   (c) the Spark fleet scan exactly as the ``sparklag_fleet_scan`` DAG runs it:
       ``spark-submit --master local[2] ... spark_scan.py --prefix ... --output ...``
       (``--format json`` so that this script reads the result without pyarrow);
4. checks that (c) gives every job the CLI's verdict and total lag, and prints the ratio
   scan / (CLI + start-up), the scan's own phase timings (its JSON summary) and the servers'
   CPU (and, on the light server, the S3 requests of each side). With several sizes it
   prints time(N) / time(smallest N), the scan's phases, its time per job, and the CLI's
   time (or how long it was let run: ``--cli-timeout``).

One JSON line per measurement, then a summary. Not part of the test suite. Credentials reach
both the CLI and spark-submit through the AWS environment variables, as in a deployment.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet_bench import _group_cpu as group_cpu  # CPU seconds of a server's process group
from fleet_common import REPO, job_files, load_template, upload_s3

VENV_BIN = Path(sys.executable).parent
STARTUP_SCRIPT = """\
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("sparklag-startup").getOrCreate()
spark.stop()
"""


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# -- set-up ----------------------------------------------------------------------------------


def start_servers(args: argparse.Namespace, workdir: Path) -> tuple[Any, Any]:
    from testbed.kafka_broker import KafkaBroker

    if args.s3_server == "light":
        from testbed.light_s3 import LightS3Server as S3Server
    elif args.s3_server == "s3rver":
        from testbed.s3rver_server import S3rverServer as S3Server  # type: ignore[assignment]
    else:
        from testbed.s3_server import S3Server  # type: ignore[assignment]

    kafka = KafkaBroker(workdir / "kafka", heap="768m").start()
    try:
        s3 = S3Server(workdir / "s3").start()
    except BaseException:
        kafka.stop()
        raise
    print(f"# kafka {kafka.bootstrap}, {args.s3_server} {s3.endpoint}", file=sys.stderr)
    return kafka, s3


def build_fleets(args: argparse.Namespace, kafka: Any, s3: Any) -> dict[int, dict[str, Any]]:
    """Per size, N jobs under s3a://scan-<N>-<b>/checkpoints/job-<i> (one level: s3rver
    does not list a folder that holds only folders, so discovery would not see team-x/job-y)."""
    topics = [
        kafka.create_topic(f"scan-{t:02d}-{uuid.uuid4().hex[:4]}", partitions=args.partitions)
        for t in range(args.topics)
    ]
    for topic in topics:
        kafka.produce(topic, args.partitions * 20)
    ends = {topic: kafka.end_offsets(topic) for topic in topics}
    template = load_template(Path(args.template))
    fleets: dict[int, dict[str, Any]] = {}
    for size in args.jobs:
        started = time.monotonic()
        per_bucket = args.jobs_per_bucket or size
        buckets = [f"scan-{size}-{b}" for b in range((size + per_bucket - 1) // per_bucket)]
        rng = random.Random(size)
        objects: list[tuple[str, str, bytes]] = []
        for i in range(size):
            bucket = buckets[i // per_bucket]
            prefix = f"checkpoints/job-{i:05d}"
            topic = topics[i % len(topics)]
            files = job_files(
                template, topic, ends[topic], batches=args.batches, state_objects=0, rng=rng
            )
            objects.extend((bucket, f"{prefix}/{rel}", body) for rel, body in files.items())
        load_objects(s3, buckets, objects)
        seconds = time.monotonic() - started
        print(f"# fleet {size}: {len(objects)} objects in {seconds:.0f} s", file=sys.stderr)
        prefixes = [f"s3a://{bucket}/checkpoints" for bucket in buckets]
        fleets[size] = {"prefixes": prefixes, "objects": len(objects)}
    return fleets


def load_objects(s3: Any, buckets: list[str], objects: list[tuple[str, str, bytes]]) -> None:
    """Into the light server straight through its bulk endpoint (no per-object PUT, as
    the latency benchmark did), else bucket by bucket with PUTs."""
    if not hasattr(s3, "bulk_load"):
        client = s3.client()
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        upload_s3(client, objects)
        return
    per_bucket: dict[str, list[tuple[str, bytes]]] = {bucket: [] for bucket in buckets}
    for bucket, key, body in objects:
        per_bucket[bucket].append((key, body))
    for bucket, items in per_bucket.items():
        for start in range(0, len(items), 50_000):  # requests of ~40 MB at most
            s3.bulk_load(bucket, items[start : start + 50_000])


def aws_env(s3: Any) -> dict[str, str]:
    options = s3.options
    return {
        **os.environ,
        "AWS_ACCESS_KEY_ID": options["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": options["aws_secret_access_key"],
        "AWS_DEFAULT_REGION": options["region_name"],
        "PYTHONUNBUFFERED": "1",
        "SPARK_LOCAL_IP": "127.0.0.1",  # the test bed talks to loopback only
    }


# -- the three measurements ------------------------------------------------------------------


def timed(
    command: list[str], ctx: dict, log: str, env: dict | None = None, timeout: float = 7200
) -> dict:
    """Run ``command`` to its end (or ``timeout``: then ``timed_out`` and no stdout); wall
    seconds, its stdout, the servers' CPU meanwhile and, on the light server, the S3 requests
    (every client's, counted by the server: discovery included)."""
    pids, stats = ctx["pids"], ctx["s3_stats"]
    before = {name: group_cpu(pid) for name, pid in pids.items()}
    requests_before = stats() if stats else {}
    started = time.perf_counter()
    with open(ctx["workdir"] / log, "w") as errors:
        try:
            done = subprocess.run(
                command,
                env=env or ctx["env"],
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
                timeout=timeout,
            )
            row: dict[str, Any] = {"returncode": done.returncode, "stdout": done.stdout}
        except subprocess.TimeoutExpired:  # subprocess.run killed it
            row = {"returncode": None, "stdout": "", "timed_out": timeout}
    row["seconds"] = time.perf_counter() - started
    row.update({f"{name}_cpu_seconds": group_cpu(pid) - before[name] for name, pid in pids.items()})
    if stats:
        after = stats()
        row["s3_requests"] = sum(
            n - requests_before.get(op, 0) for op, n in after.items() if op.startswith("op:")
        )
    return row


def spark_submit() -> str:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    return str(Path(spec.origin).parent / "bin" / "spark-submit")


def spark_submit_args(master: str, name: str) -> list[str]:
    """spark-submit and the settings the sparklag_fleet_scan DAG passes (dags/)."""
    return [
        spark_submit(),
        "--master",
        master,
        "--name",
        name,
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        "--conf",
        f"spark.pyspark.driver.python={sys.executable}",
    ]


def prefix_args(fleet: dict) -> list[str]:
    return [arg for prefix in fleet["prefixes"] for arg in ("--prefix", prefix)]


def run_cli(fleet: dict, ctx: dict) -> tuple[dict, dict[str, tuple] | None]:
    """The CLI's run and its verdicts; ``None`` verdicts when it ran past ``--cli-timeout``."""
    command = [
        str(VENV_BIN / "sparklag"),
        "status",
        *prefix_args(fleet),
        "--bootstrap-servers",
        ctx["bootstrap"],
        "--s3-endpoint-url",
        ctx["endpoint"],
        "--json",
        "--no-progress",
    ]
    row = timed(command, ctx, "cli.log", timeout=ctx["cli_timeout"])
    if row.get("timed_out"):
        row.pop("stdout")
        return row, None
    if row["returncode"] not in (0, 1, 2, 3, 4):
        raise RuntimeError(f"CLI failed ({row['returncode']}): {row['stdout'][-2000:]}")
    document = json.loads(row.pop("stdout"))
    verdicts = {
        r["location"]: (r["verdict"]["health"], (r["report"] or {}).get("total_lag"))
        for r in document["results"]
    }
    return row, verdicts


def run_startup(ctx: dict) -> dict:
    script = ctx["workdir"] / "startup.py"
    script.write_text(STARTUP_SCRIPT)
    command = [*spark_submit_args(ctx["master"], "sparklag-startup"), str(script)]
    row = timed(command, ctx, "startup.log")
    row.pop("stdout")
    if row["returncode"] != 0:
        raise RuntimeError(f"spark start-up failed: see {ctx['workdir'] / 'startup.log'}")
    return row


def run_scan(fleet: dict, ctx: dict, package: Path | None = None) -> tuple[dict, dict[str, tuple]]:
    """The scan as the DAG runs it; ``package``: a directory holding another copy of
    ``airflow_sparklag`` to run instead (put first on PYTHONPATH, for driver and workers)."""
    from airflow_sparklag import spark_scan

    env = dict(ctx["env"])
    script = spark_scan.__file__
    if package is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(package), env.get("PYTHONPATH")]))
        script = str(package / "airflow_sparklag" / "spark_scan.py")
    output = ctx["workdir"] / f"scan-{uuid.uuid4().hex[:6]}"
    command = [
        *spark_submit_args(ctx["master"], "sparklag-fleet-scan"),
        script,
        *prefix_args(fleet),
        "--bootstrap-servers",
        ctx["bootstrap"],
        "--output",
        str(output),
        "--s3-endpoint-url",
        ctx["endpoint"],
        "--format",
        "json",
        *ctx["scan_args"],
    ]
    log = ctx["workdir"] / "scan.log"
    row = timed(command, ctx, log.name, env=env)
    if row["returncode"] != 0:
        # Python's traceback, without Spark's INFO/WARN lines (the shutdown alone fills a page)
        lines = [x for x in log.read_text().splitlines() if " INFO " not in x and " WARN " not in x]
        raise RuntimeError(f"spark scan failed ({row['returncode']}):\n" + "\n".join(lines[-60:]))
    row["summary"] = json.loads(row.pop("stdout").strip().splitlines()[-1])
    verdicts: dict[str, tuple] = {}
    for part in sorted((output / "jobs").glob("part-*")):
        for line in part.read_text().splitlines():
            job = json.loads(line)
            verdicts[job["location"]] = (job["health"], job.get("total_lag"))
    shutil.rmtree(output, ignore_errors=True)
    return row, verdicts


def differences(cli: dict[str, tuple], scan: dict[str, tuple]) -> list[str]:
    """Jobs whose (health, total lag) differ between the CLI and the scan."""
    wrong = [
        f"{loc}: CLI {cli.get(loc)} scan {scan.get(loc)}"
        for loc in sorted(set(cli) | set(scan))
        if cli.get(loc) != scan.get(loc)
    ]
    return wrong


# -- driver ----------------------------------------------------------------------------------


def measure_size(size: int, fleet: dict, ctx: dict) -> dict[str, Any]:
    load = load_average()
    startup = run_startup(ctx)
    cli, cli_verdicts = run_cli(fleet, ctx) if ctx["cli"] else ({"skipped": True}, None)
    scan, scan_verdicts = run_scan(fleet, ctx)
    # against the CLI's answers; without them (not run, or past --cli-timeout), the baseline
    # scan's and this scan's answers against each other
    reference = cli_verdicts
    wrong = differences(reference, scan_verdicts) if reference is not None else []
    if ctx["baseline"] is not None:
        baseline, baseline_verdicts = run_scan(fleet, ctx, ctx["baseline"])
        wrong += differences(reference or scan_verdicts, baseline_verdicts)
        scan["baseline"] = baseline
        reference = reference or baseline_verdicts
    finished = "seconds" in cli and not cli.get("timed_out") and not cli.get("skipped")
    row = {
        "jobs": size,
        "objects": fleet["objects"],
        "cli": cli,
        "startup": startup,
        "scan": scan,
        "ratio": scan["seconds"] / (cli["seconds"] + startup["seconds"]) if finished else None,
        "same_verdicts": not wrong if reference is not None else None,
        "differences": wrong[:5],
        "health": dict(sorted(_count(v[0] for v in scan_verdicts.values()).items())),
        "load_before": load,
        "load_after": load_average(),
    }
    print(json.dumps(row), flush=True)
    return row


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


PHASES = ("discover", "spark_start", "read", "kafka", "judge_and_write")


def _median(values: Any) -> float:
    return statistics.median(list(values))


def _scan_line(label: str, size: int, scans: list[dict]) -> str:
    """One scan's medians: wall (and per job), in Spark, each phase, storage requests."""
    wall = _median(s["seconds"] for s in scans)
    inner = _median(s["summary"]["seconds"] for s in scans)
    timings = [s["summary"]["timings"] for s in scans]
    phases = ", ".join(
        f"{phase} {_median(t.get(phase + '_seconds', 0.0) for t in timings):.1f}"
        for phase in PHASES
    )
    requests = _median(s["summary"]["storage_requests"] for s in scans)
    served = (
        f", S3 requests served {_median(s['s3_requests'] for s in scans):.0f}"
        if "s3_requests" in scans[0]
        else ""
    )
    return (
        f"N={size} {label}: wall {wall:.1f} s ({1000 * wall / size:.1f} ms per job), in Spark "
        f"{inner:.1f} s; phases s: {phases}; read requests {requests:.0f}{served}"
    )


def _cli_text(runs: list[dict]) -> str:
    cli = runs[0]["cli"]
    if cli.get("skipped"):
        return "CLI not run (--no-cli)"
    if cli.get("timed_out"):
        return f"CLI did not finish in {cli['timed_out']:.0f} s (killed)"
    seconds = _median(r["cli"]["seconds"] for r in runs)
    served = f", {runs[0]['cli']['s3_requests']} S3 requests" if "s3_requests" in cli else ""
    return f"CLI {seconds:.1f} s{served}"


def print_summary(rows: dict[int, list[dict[str, Any]]]) -> None:
    print("\n# summary (medians over runs)")
    smallest = min(rows)
    first = _median(r["scan"]["seconds"] for r in rows[smallest])
    for size, runs in rows.items():
        scans = [r["scan"] for r in runs]
        print(_scan_line("scan", size, scans))
        if "baseline" in scans[0]:
            print(_scan_line("baseline scan", size, [s["baseline"] for s in scans]))
        startup = _median(r["startup"]["seconds"] for r in runs)
        ratios = [r["ratio"] for r in runs if r["ratio"] is not None]
        ratio = f"scan / (CLI + start-up) = {_median(ratios):.2f}; " if ratios else ""
        scan = _median(s["seconds"] for s in scans)
        print(
            f"N={size}: {_cli_text(runs)}, Spark start-up {startup:.1f} s; {ratio}"
            f"same verdicts and lag: {[r['same_verdicts'] for r in runs]}; "
            f"scan time / N={smallest}: {scan / first:.2f} ({size / smallest:.0f}x the jobs)"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Spark fleet scan vs the CLI, same fleet")
    parser.add_argument("--jobs", type=int, nargs="+", default=[200])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--s3-server",
        choices=["light", "moto", "s3rver"],
        default="light",
        help="light (default: testbed/light_s3.py, the only one here that serves 10,000 jobs "
        "in reasonable time), moto (the tests' server) or s3rver",
    )
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--batches", type=int, default=10, help="retained batches per job")
    parser.add_argument(
        "--jobs-per-bucket",
        type=int,
        default=0,
        help="spread each fleet over buckets of this many jobs, one --prefix each (default: one "
        "bucket; moto's and s3rver's LIST cost grows with the bucket, S3's does not)",
    )
    parser.add_argument("--template", default=str(REPO / "tests/data/checkpoints/ck43"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--scan-arg", action="append", default=[], help="one more spark_scan argument"
    )
    parser.add_argument(
        "--baseline-package",
        help="a directory with another airflow_sparklag (e.g. the previous spark_scan.py): its "
        "scan runs right after this one on the same fleet, for a same-load comparison",
    )
    parser.add_argument(
        "--cli-timeout",
        type=float,
        default=1800,
        help="seconds the CLI may run before it is killed and reported as not finished",
    )
    parser.add_argument("--no-cli", action="store_true", help="time only start-up and scan")
    parser.add_argument("--keep-workdir", action="store_true")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="sparklag-scanbench-"))
    kafka, s3 = start_servers(args, workdir)
    try:
        fleets = build_fleets(args, kafka, s3)
        ctx = {
            "bootstrap": kafka.bootstrap,
            "endpoint": s3.endpoint,
            "env": aws_env(s3),
            "workdir": workdir,
            "master": args.master,
            "scan_args": args.scan_arg,
            "baseline": Path(args.baseline_package) if args.baseline_package else None,
            "pids": {"s3": s3.process.pid, "kafka": kafka.process.pid},
            "s3_stats": getattr(s3, "stats", None),
            "cli": not args.no_cli,
            "cli_timeout": args.cli_timeout,
        }
        rows = {
            size: [measure_size(size, fleets[size], ctx) for _ in range(args.runs)]
            for size in args.jobs
        }
    finally:
        s3.stop()
        kafka.stop()
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print_summary(rows)


if __name__ == "__main__":
    main()
