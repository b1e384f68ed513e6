"""Storage requests of ONE `sparklag status` (a single-job check), per job shape, on S3.

    .venv/bin/python benchmarks/check_requests.py [--history 10 1]

Starts moto's S3 server and a real KRaft Kafka broker (the test bed's), writes one checkpoint
per case to S3 (12 committed batches, offsets files in Spark's v1 format with the `metadata`
line and `conf` of a real Spark 3.5 checkpoint, `tests/data/checkpoints/ck35`, and Kafka source
offsets against a real 4-partition topic), then runs the CLI once per case and history, each
in its own process (a first check: a new session), and counts the requests moto served (its
access log). Prints a Markdown table: case, --history, requests (LIST / GET), verdict. Each
case's logs are written again before each run, the newest batch 10 s before it.

``--s3-latency MS`` puts toxiproxy in front of moto (every S3 answer delayed by MS +- MS/4) and
adds the median wall time of ``--repeat`` runs per row (the CLI process, start-up included:
compare rows, not absolute times). ``--tree DIR`` runs another checkout's code (a
``git worktree`` of an older commit) with this one's venv, for a before/after in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testbed.kafka_broker import KafkaBroker  # noqa: E402
from testbed.s3_server import S3Server  # noqa: E402

DATA = REPO / "tests" / "data" / "checkpoints" / "ck35"
BUCKET = "check-requests"
TOPIC = "orders"
PARTITIONS = 4
BATCHES = 12
RECORDS = 120  # per partition
STATE_OBJECTS = 2000


def _offsets_file(batch_ts_ms: int, offsets: dict[int, int]) -> bytes:
    """offsets/N as Spark 3.5 writes it: ck35's metadata line (conf) with our batch time."""
    meta = json.loads((DATA / "offsets" / "6").read_text().split("\n")[1])
    meta["batchTimestampMs"] = batch_ts_ms
    source = json.dumps({TOPIC: {str(p): o for p, o in offsets.items()}}, separators=(",", ":"))
    return f"v1\n{json.dumps(meta, separators=(',', ':'))}\n{source}".encode()


def _checkpoint(ends: dict[int, int], lag: int, in_flight: bool) -> dict[str, bytes]:
    """12 committed batches, 10 s apart, the last one `lag` records behind per partition."""
    now_ms = int(time.time() * 1000)
    files = {"metadata": (DATA / "metadata").read_bytes()}
    commit = (DATA / "commits" / "6").read_bytes()
    for batch in range(BATCHES):
        share = (batch + 1) / BATCHES
        offsets = {p: int((end - lag) * share) for p, end in ends.items()}
        ts = now_ms - (BATCHES - batch) * 10_000
        files[f"offsets/{batch}"] = _offsets_file(ts, offsets)
        files[f"commits/{batch}"] = commit
    if in_flight:
        files[f"offsets/{BATCHES}"] = _offsets_file(now_ms - 1000, dict(ends))
    return files


CASES = {
    # name: (lag per partition, batch in flight, state objects, extra CLI flags)
    "healthy": (0, False, 0, []),
    "healthy, 2,000 state objects": (0, False, STATE_OBJECTS, []),
    "healthy, batch in flight": (0, True, 0, []),
    "lag 5 per partition (a batch reads ~10)": (5, False, 0, []),
    "lag 5 per partition, 2,000 state objects": (5, False, STATE_OBJECTS, []),
    "lag 5 per partition, --max-lag 10": (5, False, 0, ["--max-lag-records-per-partition", "10"]),
    "lag 30 per partition (a batch reads ~7), no threshold": (30, False, 0, []),
    "lag 30 per partition, --max-lag 10": (30, False, 0, ["--max-lag-records-per-partition", "10"]),
}


def _upload(s3: S3Server, ends: dict[int, int]) -> dict[str, str]:
    from concurrent.futures import ThreadPoolExecutor

    client = s3.client()
    client.create_bucket(Bucket=BUCKET)
    objects: dict[str, bytes] = {}
    urls = {}
    for index, (name, (lag, in_flight, state, _)) in enumerate(CASES.items()):
        prefix = f"ck{index}"
        urls[name] = f"s3a://{BUCKET}/{prefix}"
        for rel, body in _checkpoint(ends, lag, in_flight).items():
            objects[f"{prefix}/{rel}"] = body
        for i in range(state):
            objects[f"{prefix}/state/0/{i % 200}/{i}.delta"] = b"s"
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda kv: client.put_object(Bucket=BUCKET, Key=kv[0], Body=kv[1]),
                      objects.items()))  # fmt: skip
    return urls


def _refresh(s3: S3Server, ends: dict[int, int], name: str, url: str) -> None:
    """Write ``name``'s offsets and commits again with batch times relative to now (the newest
    10 s ago), so a case measured late in the run is not older than one measured early (a
    check judges the time since the newest batch: past 30 s a job with lag reads its window)."""
    client = s3.client()
    prefix = url.split(f"{BUCKET}/", 1)[1]
    lag, in_flight, _, _ = CASES[name]
    for rel, body in _checkpoint(ends, lag, in_flight).items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{rel}", Body=body)


def _served(log: Path, offset: int) -> tuple[int, list[str]]:
    data = log.read_bytes()
    lines = [line.decode() for line in data[offset:].splitlines() if b'HTTP/1.1" ' in line]
    return len(data), lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, nargs="+", default=[10, 1])
    parser.add_argument("--s3-latency", type=float, default=0.0, help="ms added per S3 answer")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row with --s3-latency")
    parser.add_argument("--tree", type=Path, default=REPO, help="checkout whose code runs")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="check-requests-"))
    s3 = S3Server(work / "s3").start()
    kafka = KafkaBroker(work / "kafka").start()
    toxiproxy = None
    try:
        kafka.create_topic(TOPIC, PARTITIONS)
        for partition in range(PARTITIONS):
            kafka.produce(TOPIC, RECORDS, partition=partition)
        ends = kafka.end_offsets(TOPIC)
        urls = _upload(s3, ends)
        log = work / "s3" / "moto.log"
        env = dict(
            os.environ,
            AWS_ACCESS_KEY_ID=s3.options["aws_access_key_id"],
            AWS_SECRET_ACCESS_KEY=s3.options["aws_secret_access_key"],
            PYTHONPATH=str(args.tree.resolve()),
        )
        endpoint = s3.endpoint
        if args.s3_latency > 0:
            from testbed.toxiproxy import Toxiproxy

            toxiproxy = Toxiproxy(work / "toxiproxy").start()
            proxy = toxiproxy.proxy("s3", f"127.0.0.1:{s3.port}")
            proxy.add("latency", latency=int(args.s3_latency), jitter=int(args.s3_latency / 4))
            endpoint = proxy.url
        timed = args.s3_latency > 0
        print(f"code: {args.tree.resolve()}; S3 latency {args.s3_latency:g} ms")
        print("| case | --history | S3 requests | of which | verdict |" + (" wall s |" * timed))
        print("|---|---|---|---|---|" + "---|" * timed)
        for name, url in urls.items():
            for history in args.history:
                command = [
                    str(REPO / ".venv" / "bin" / "sparklag"), "status", url,
                    "--bootstrap-servers", kafka.bootstrap, "--s3-endpoint-url", endpoint,
                    "--s3-region", "us-east-1", "--history", str(history), "--json",
                    *CASES[name][3],
                ]  # fmt: skip
                walls = []
                for _ in range(args.repeat if timed else 1):
                    _refresh(s3, ends, name, url)
                    offset, _ = _served(log, 0)
                    started = time.perf_counter()
                    done = subprocess.run(command, capture_output=True, text=True, env=env)
                    walls.append(time.perf_counter() - started)
                    time.sleep(0.3)  # the access log is written after the response
                    _, lines = _served(log, offset)
                verdict = json.loads(done.stdout)["verdict"]["health"] if done.stdout else "-"
                lists = sum(" /check-requests?" in line or "list-type" in line for line in lines)
                gets = len(lines) - lists
                row = [name, str(history), str(len(lines)), f"{lists} LIST, {gets} GET", verdict]
                if timed:
                    row.append(f"{sorted(walls)[len(walls) // 2]:.3f}")
                print("| " + " | ".join(row) + " |")
    finally:
        if toxiproxy is not None:
            toxiproxy.stop()
        kafka.stop()
        s3.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
