"""Server CPU per S3 request: moto's server vs s3rver (testbed/s3rver_server.py), same run.

    .venv/bin/python benchmarks/s3_server_cost.py [--others 5000 50000] [--requests 300]
        [--rounds 3] [--workers 16 32] [--servers moto s3rver] [--keep]

Both servers get the same bucket: a 20-key target prefix laid out like a small checkpoint
(``fleet/job-target/commits|offsets/0..9``, ~1 KB each), the same with 300 ``state/`` objects
(``fleet/job-stateful/``: its first ``list_checkpoint`` page holds 320 keys), next to sibling
"jobs" of 50 objects each (``fleet/job-NNNNN/state/0/K.delta``, as the fleet benchmark lays its
checkpoints side by side), uploaded in stages up to each ``--others`` count. At each stage,
per server:

* GET of a ~1 KB object, and LIST of each target prefix as ``list_checkpoint`` sends it
  (StartAfter ``commits``, MaxKeys 320: 20 or 320 keys): server CPU (utime+stime of the server
  process from /proc/<pid>/stat, before/after ``--requests`` requests; the minimum over
  ``--rounds`` rounds, servers interleaved) and the client's wall time per request (median),
  sequential and from 16 threads (there, wall per request = 1 / throughput);
* after the last stage, every ListObjectsV2 page (1,000 keys) of the whole ``fleet/`` prefix
  (all the sibling objects), then its first and its last full page alone, 5 times each;
* the upload itself: PUTs/s with ``--workers`` threads (one value per stage), the server's RSS
  and, for s3rver, bytes and inodes on disk per object.

CPU is in clock ticks (10 ms), so per-request numbers come from hundreds of requests. Prints
a Markdown table; ratios are moto / s3rver. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.s3_server import S3Server
from testbed.s3rver_server import S3rverServer

BUCKET = "cost-bench"
TARGET = "fleet/job-target/"
STATEFUL = "fleet/job-stateful/"  # the same 20 log keys + 300 state objects
PER_JOB = 50
TICK = os.sysconf("SC_CLK_TCK")


def server_cpu(pid: int) -> float:
    """utime + stime of one process, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def server_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def disk_usage(root: Path) -> tuple[int, int, int]:
    """(bytes allocated, bytes apparent, inodes) under root."""
    blocks = apparent = inodes = 0
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(directory, name))
            blocks += st.st_blocks * 512
            apparent += st.st_size
            inodes += 1
    return blocks, apparent, inodes


class Target:
    def __init__(self, name: str, server: Any) -> None:
        import boto3
        from botocore.config import Config

        self.name = name
        self.server = server
        self.pid = server.process.pid
        self.client = boto3.session.Session().client(
            "s3",
            config=Config(
                max_pool_connections=64,
                retries={"max_attempts": 3},
                s3={"addressing_style": "path"},
            ),
            **server.options,
        )

    def measure(self, request: Any, count: int, threads: int = 1) -> tuple[float, float]:
        """(server CPU ms, client wall ms) per request, over `count` requests sent by
        `threads` threads (wall per request = 1 / throughput when threads > 1)."""
        cpu = server_cpu(self.pid)
        wall = time.perf_counter()
        if threads == 1:
            for _ in range(count):
                request()
        else:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                for _ in pool.map(lambda _: request(), range(count)):
                    pass
        wall = time.perf_counter() - wall
        return (server_cpu(self.pid) - cpu) * 1000 / count, wall * 1000 / count

    def upload(self, keys: list[tuple[str, bytes]], workers: int) -> tuple[float, float]:
        """(PUTs per second, server CPU ms per PUT)."""
        cpu = server_cpu(self.pid)
        wall = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for _ in pool.map(
                lambda kv: self.client.put_object(Bucket=BUCKET, Key=kv[0], Body=kv[1]),
                keys,
                chunksize=64,
            ):
                pass
        wall = time.perf_counter() - wall
        return len(keys) / wall, (server_cpu(self.pid) - cpu) * 1000 / max(1, len(keys))


def target_objects() -> list[tuple[str, bytes]]:
    body = (b"v1\n" + b"x" * 1021)[:1024]
    objects = [(f"{TARGET}offsets/{b}", body) for b in range(10)]
    objects += [(f"{TARGET}commits/{b}", b'v1\n{"nextBatchWatermarkMs":0}') for b in range(10)]
    objects += [(STATEFUL + key[len(TARGET) :], body) for key, body in objects]
    objects += [(f"{STATEFUL}state/0/{i % 200}/{i}.delta", b"state") for i in range(300)]
    return objects


def sibling_objects(start: int, stop: int) -> list[tuple[str, bytes]]:
    """Objects `start`..`stop` of the sibling jobs, PER_JOB per job directory."""
    return [
        (f"fleet/job-{i // PER_JOB:05d}/state/0/{i % PER_JOB}.delta", b"state")
        for i in range(start, stop)
    ]


def list_pages(client: Any, prefix: str) -> list[str | None]:
    """Continuation tokens of every page of `prefix` (None for the first page)."""
    tokens: list[str | None] = [None]
    while True:
        kwargs: dict[str, Any] = {"Bucket": BUCKET, "Prefix": prefix}
        if tokens[-1]:
            kwargs["ContinuationToken"] = tokens[-1]
        response = client.list_objects_v2(**kwargs)
        if not response.get("IsTruncated"):
            return tokens
        tokens.append(response["NextContinuationToken"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--others", type=int, nargs="+", default=[5000, 50000])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--servers", nargs="+", default=["moto", "s3rver"])
    parser.add_argument("--keep", action="store_true", help="keep the work dir (s3rver's data)")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="sparklag-s3cost-"))
    classes = {"moto": S3Server, "s3rver": S3rverServer}
    servers = [classes[name](workdir / name).start() for name in args.servers]
    targets = [Target(name, server) for name, server in zip(args.servers, servers, strict=True)]
    print(f"# load average {os.getloadavg()[0]:.1f}; workdir {workdir}", file=sys.stderr)
    rows: list[tuple[str, dict[str, tuple[float, float]]]] = []
    notes: list[str] = []
    try:
        for t in targets:
            t.client.create_bucket(Bucket=BUCKET)
            t.upload(target_objects(), 4)
            rows.append(("idle RSS MB", {t.name: (server_rss_mb(t.pid), 0.0)}))
        loaded = 0
        for stage, others in enumerate(args.others):
            keys = sibling_objects(loaded, others)
            loaded = others
            workers = args.workers[min(stage, len(args.workers) - 1)]
            for t in targets:
                rate, cpu = t.upload(keys, workers)
                notes.append(
                    f"{t.name}: {len(keys)} PUTs with {workers} threads: {rate:.0f}/s, "
                    f"server CPU {cpu:.2f} ms per PUT, RSS {server_rss_mb(t.pid):.0f} MB "
                    f"(load {os.getloadavg()[0]:.1f})"
                )
                print(f"# {notes[-1]}", file=sys.stderr)
            requests = {
                f"GET 1 KB ({others:,} others)": lambda c: c.get_object(
                    Bucket=BUCKET, Key=f"{TARGET}offsets/3"
                )["Body"].read(),
                f"LIST 20 keys ({others:,} others)": lambda c: c.list_objects_v2(
                    Bucket=BUCKET, Prefix=TARGET, StartAfter=TARGET + "commits", MaxKeys=320
                ),
                f"LIST 320 keys, stateful job ({others:,} others)": lambda c: c.list_objects_v2(
                    Bucket=BUCKET, Prefix=STATEFUL, StartAfter=STATEFUL + "commits", MaxKeys=320
                ),
            }
            for (label, request), threads in itertools.product(requests.items(), (1, 16)):
                results: dict[str, list[tuple[float, float]]] = {t.name: [] for t in targets}
                for _ in range(args.rounds):
                    for t in targets:
                        results[t.name].append(
                            t.measure(lambda t=t, r=request: r(t.client), args.requests, threads)
                        )
                label = f"{label}, {threads} threads" if threads > 1 else label
                rows.append((label, {n: _best(r) for n, r in results.items()}))
                print(f"# {label}: {rows[-1][1]}", file=sys.stderr)
        for t in targets:
            rows.append((f"RSS MB after {loaded:,} objects", {t.name: (server_rss_mb(t.pid), 0.0)}))
            if isinstance(t.server, S3rverServer):
                blocks, apparent, inodes = disk_usage(t.server.data)
                count = loaded + len(target_objects())
                notes.append(
                    f"s3rver disk: {blocks / count:.0f} bytes allocated per object "
                    f"({apparent / count:.0f} apparent), {inodes / count:.2f} inodes per "
                    f"object ({inodes:,} for {count:,} objects)"
                )
        # Paging through all sibling objects (a baseline-style full listing).
        page_rows: dict[str, tuple[float, float]] = {}
        one_rows: dict[str, dict[str, tuple[float, float]]] = {}
        for t in targets:
            tokens = list_pages(t.client, "fleet/")
            position = iter(range(10**9))

            def page(c: Any, tokens: list[str | None] = tokens, position: Any = position) -> Any:
                token = tokens[next(position) % len(tokens)]
                extra = {"ContinuationToken": token} if token else {}
                return c.list_objects_v2(Bucket=BUCKET, Prefix="fleet/", **extra)

            page_rows[t.name] = t.measure(lambda c=t.client, p=page: p(c), len(tokens))
            for which, token in (
                ("first", None),
                ("last full", tokens[-2] if len(tokens) > 2 else None),
            ):

                def one_page(c: Any, token: str | None = token) -> Any:
                    extra = {"ContinuationToken": token} if token else {}
                    return c.list_objects_v2(Bucket=BUCKET, Prefix="fleet/", **extra)

                one_rows.setdefault(which, {})[t.name] = t.measure(
                    lambda c=t.client, p=one_page: p(c), 5
                )
            notes.append(f"{t.name}: fleet/ has {len(tokens)} pages of 1,000 keys")
        rows.append((f"LIST page of 1,000 ({loaded:,}-key prefix, mean)", page_rows))
        for which, values in one_rows.items():
            rows.append((f"LIST {which} page ({loaded:,}-key prefix, x5)", values))
    finally:
        for server in servers:
            server.stop()
        if not args.keep:  # s3rver's data: ~3 inodes per object
            shutil.rmtree(workdir, ignore_errors=True)
    _print(rows, notes, [t.name for t in targets])


def _best(results: list[tuple[float, float]]) -> tuple[float, float]:
    """Least server CPU of the rounds, median client wall."""
    return min(r[0] for r in results), statistics.median(r[1] for r in results)


def _print(
    rows: list[tuple[str, dict[str, tuple[float, float]]]], notes: list[str], names: list[str]
) -> None:
    print(
        "| request | " + " | ".join(f"{n} CPU ms | {n} wall ms" for n in names) + " | CPU ratio |"
    )
    print("|---|" + "---|---|" * len(names) + "---|")
    merged: dict[str, dict[str, tuple[float, float]]] = {}
    for label, values in rows:
        merged.setdefault(label, {}).update(values)
    for label, values in merged.items():
        cells = []
        for n in names:
            cpu, wall = values.get(n, (float("nan"), 0.0))
            cells.append(f"{cpu:.2f} | {wall:.2f}" if wall else f"{cpu:.0f} | ")
        ratio = ""
        if len(names) == 2 and all(values.get(n, (0, 0))[1] for n in names):
            a, b = (values[n][0] for n in names)
            ratio = f"{a / b:.1f}x" if b else "-"
        print(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
    print()
    for note in notes:
        print(f"- {note}")


if __name__ == "__main__":
    main()
