"""What a user gets at defaults: ``sparklag status --prefix s3://... --json`` against a naive
sequential script, both over real Spark-written checkpoints behind network latency.

    .venv/bin/python benchmarks/user_path_bench.py --sizes 200 1000 [--runs 1]
        [--template /work/shared/spark-checkpoints/ckk3.5.7-stateful]

In one run:

1. starts a real KRaft Kafka broker, the light S3 server (``testbed/light_s3.py``: little
   server CPU per request, a listen backlog of 1,024) and toxiproxy in front of both: every S3
   answer is delayed by 20 +- 5 ms, every Kafka answer by 2 +- 1 ms;
2. copies the template checkpoint byte for byte (a real Spark 3.5.7 stateful query on topic
   ``v35a``, 3 partitions, batches 0-19, RocksDB state, Hadoop ``.crc`` files) into
   ``max(sizes)`` jobs, 100 per bucket; the topic gets 100 more records per partition than the
   checkpoint committed, so every job has lag and its health reads the history window;
3. for each size, alternating: the CLI as a user runs it, a subprocess at DEFAULT settings
   (no reader, history or concurrency flag: only the broker, the endpoint and one ``--prefix``
   per bucket), and the naive script (per job, one after another: LIST ``offsets/`` and
   ``commits/``, GET the newest offsets file by LastModified, a new consumer for the end
   offsets), also a subprocess.

Prints, per measurement: wall time, client CPU of the whole process (``wait4`` rusage of the
child: start-up, imports, threads, librdkafka's and obstore's), S3 requests per job by what
they read (counted by the S3 server), the kernel's ListenOverflows during the run (must stay 0:
a dropped connection costs ~1 s of SYN retry), and the ratio to the naive wall time.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testbed.light_s3 import listen_overflows  # noqa: E402

JOBS_PER_BUCKET = 100
TOPIC = "v35a"
DEFAULT_TEMPLATE = "/work/shared/spark-checkpoints/ckk3.5.7-stateful"
SPARKLAG = Path(sys.executable).parent / "sparklag"


def naive(manifest: dict[str, Any], size: int) -> dict[str, Any]:
    """The naive script: each job in turn, a LIST per log directory, a GET of the newest
    offsets file, a new consumer for the end offsets."""
    import boto3
    from confluent_kafka import Consumer, TopicPartition

    client = boto3.session.Session().client("s3", **manifest["s3_options"])
    total_lag = 0
    for location in manifest["locations"][:size]:
        bucket, _, prefix = location.split("://", 1)[1].partition("/")
        listed = {}
        for directory in ("offsets", "commits"):
            page = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/{directory}/")
            listed[directory] = [o for o in page.get("Contents", []) if "/." not in o["Key"]]
        newest = max(
            listed["offsets"], key=lambda o: (o["LastModified"], int(o["Key"].rsplit("/", 1)[1]))
        )
        body = client.get_object(Bucket=bucket, Key=newest["Key"])["Body"].read().decode()
        committed = json.loads(body.splitlines()[-1])
        consumer = Consumer({"bootstrap.servers": manifest["bootstrap"], "group.id": "naive"})
        try:
            for topic, partitions in committed.items():
                for partition, offset in partitions.items():
                    _low, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, int(partition)), timeout=30
                    )
                    total_lag += high - offset
        finally:
            consumer.close()
    return {"total_lag": total_lag}


def _cli_command(manifest: dict[str, Any], size: int) -> list[str]:
    buckets = sorted({loc.split("/")[2] for loc in manifest["locations"][:size]})
    command = [str(SPARKLAG), "status", "--json", "--no-progress"]
    command += ["--bootstrap-servers", manifest["bootstrap"]]
    command += ["--s3-endpoint-url", manifest["s3_options"]["endpoint_url"]]
    for bucket in buckets:
        command += ["--prefix", f"s3://{bucket}/checkpoints"]
    return command


def _measured(command: list[str], env: dict[str, str]) -> tuple[float, float, str, int]:
    """Wall seconds, CPU seconds (user + system of the child), stdout, exit status."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err, env=env)
        _pid, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        text = out.read().decode()
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, 1, 2, 3) or not text.strip():  # 1-3: a verdict worse than OK
            sys.stderr.write(err.read().decode()[-4000:])
    return wall, usage.ru_utime + usage.ru_stime, text, code


def measure(manifest_path: Path, method: str, size: int, s3: Any) -> dict[str, Any]:
    manifest = json.loads(manifest_path.read_text())
    env = {**os.environ, "PYTHONPATH": str(REPO), **manifest["env"]}
    if method == "cli":
        command = _cli_command(manifest, size)
    else:
        command = [sys.executable, __file__, "--naive", str(manifest_path), str(size)]
    before, overflows = s3.stats(), listen_overflows()
    wall, cpu, out, code = _measured(command, env)
    after, overflows = s3.stats(), listen_overflows() - overflows
    sent = {k: after.get(k, 0) - before.get(k, 0) for k in after if ":" in k}
    sent = {k: v for k, v in sent.items() if v and not k.startswith("key:")}
    row: dict[str, Any] = {"method": method, "size": size, "seconds": round(wall, 2)}
    row.update(cpu_seconds=round(cpu, 2), cpu_ms_per_job=round(1000 * cpu / size, 2))
    row["s3_requests_per_job"] = round(
        sum(v for k, v in sent.items() if k.startswith("op:")) / size, 2
    )
    # op:list, op:read (all), read:offsets, read:commits, read:metadata
    row["s3_by_kind_per_job"] = {k: round(v / size, 2) for k, v in sorted(sent.items())}
    row["listen_overflows"] = overflows
    if method == "cli":
        document = json.loads(out)
        row.update(exit=code, jobs=len(document["results"]))
        row["verdicts"] = document["summary"]["health"]
        row["total_lag"] = document["summary"]["total_lag"]
    else:
        row.update(json.loads(out.strip().splitlines()[-1]))
    return row


def setup(args: argparse.Namespace, workdir: Path) -> tuple[Path, list[Any], Any]:
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
    kafka.create_topic(TOPIC, partitions=3)
    template = Path(args.template)
    files = [
        (path.relative_to(template).as_posix(), path.read_bytes())
        for path in sorted(template.rglob("*"))
        if path.is_file()
    ]
    committed = json.loads((template / "offsets" / "19").read_text().splitlines()[-1])[TOPIC]
    for partition, offset in committed.items():
        kafka.produce(TOPIC, int(offset) + args.lag, partition=int(partition))
    locations = []
    size = max(args.sizes)
    for first in range(0, size, JOBS_PER_BUCKET):
        bucket = f"fleet-{first // JOBS_PER_BUCKET}"
        items = []
        for i in range(first, min(size, first + JOBS_PER_BUCKET)):
            prefix = f"checkpoints/job-{i:05d}"
            items += [(f"{prefix}/{name}", body) for name, body in files]
            locations.append(f"s3a://{bucket}/{prefix}")
        s3.bulk_load(bucket, items)
    print(f"# {size} jobs x {len(files)} objects from {template.name}", file=sys.stderr)
    s3_proxy.add("latency", latency=args.s3_latency, jitter=args.s3_jitter)
    kafka_proxy.add("latency", latency=args.kafka_latency, jitter=args.kafka_jitter)
    options = s3.options
    manifest = {
        "bootstrap": kafka.bootstrap,
        "s3_options": {**options, "endpoint_url": s3_proxy.url},
        "env": {
            "AWS_ACCESS_KEY_ID": options["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": options["aws_secret_access_key"],
            "AWS_DEFAULT_REGION": options["region_name"],
        },
        "locations": locations,
    }
    path = workdir / "manifest.json"
    path.write_text(json.dumps(manifest))
    return path, started, s3


def _print_table(rows: list[dict[str, Any]]) -> None:
    print(
        "\n| N | run | method | wall s | x naive | CPU s | CPU ms/job | S3 req/job | "
        "S3 reads per job by kind | ListenOverflows | total lag | verdicts |"
    )
    print("|---" * 12 + "|")
    naive_wall = {(r["size"], r["run"]): r["seconds"] for r in rows if r["method"] == "naive"}
    for r in rows:
        ratio = naive_wall.get((r["size"], r["run"]), 0) / r["seconds"]
        kinds = ", ".join(f"{k} {v:g}" for k, v in r["s3_by_kind_per_job"].items())
        cells = [r["size"], r["run"], r["method"], r["seconds"], f"{ratio:.1f}x"]
        cells += [r["cpu_seconds"], r["cpu_ms_per_job"], r["s3_requests_per_job"], kinds]
        cells += [r["listen_overflows"], r.get("total_lag", "-"), r.get("verdicts", "-")]
        print("| " + " | ".join(str(c) for c in cells) + " |")


def run(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="sparklag-userpath-"))
    manifest, started, s3 = setup(args, workdir)
    rows = []
    try:
        if args.hold:  # keep the test bed up for experiments by hand
            command = _cli_command(json.loads(manifest.read_text()), max(args.sizes))
            print(f"# manifest {manifest}; CLI: {' '.join(command)}", flush=True)
            time.sleep(args.hold)
        for size in args.sizes:
            for number in range(1, args.runs + 1):
                for method in ("naive", "cli"):
                    row = measure(manifest, method, size, s3)
                    row["run"] = number
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        for component in reversed(started):
            component.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    _print_table(rows)


def main() -> None:
    if sys.argv[1:2] == ["--naive"]:
        manifest = json.loads(Path(sys.argv[2]).read_text())
        print(json.dumps(naive(manifest, int(sys.argv[3]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--template", default=DEFAULT_TEMPLATE)
    parser.add_argument("--lag", type=int, default=100, help="records per partition past C")
    parser.add_argument("--s3-latency", type=int, default=20)
    parser.add_argument("--s3-jitter", type=int, default=5)
    parser.add_argument("--kafka-latency", type=int, default=2)
    parser.add_argument("--kafka-jitter", type=int, default=1)
    parser.add_argument("--hold", type=float, default=0, help="seconds to keep the bed up first")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
