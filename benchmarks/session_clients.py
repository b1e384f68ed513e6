"""First fleet check of N jobs on S3: one client built by the Session vs one per worker thread.

Before the Session, a first fleet check built its boto3 client lazily in every worker thread
(16 threads -> 16 clients). The Session builds the backend of a store once, under a lock. This
script measures both in the same run, on the same checkpoints (moto S3 on 127.0.0.1, N copies of
a real sample checkpoint), alternating the two sides; it prints clients built, wall time and the
ratio. The "before" side is the Session with its one-time build switched off, which is exactly
the old lazy path.

    .venv/bin/python benchmarks/session_clients.py --jobs 200 --rounds 3

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SAMPLE = REPO / "tests" / "data" / "checkpoints" / "ckm4.3.0"


def upload(client: Any, run: str, jobs: int) -> list[str]:
    files = [p for p in SAMPLE.rglob("*") if p.is_file() and not p.name.endswith(".crc")]

    def one(job: int) -> None:
        for path in files:
            key = f"{run}/job{job}/{path.relative_to(SAMPLE).as_posix()}"
            client.put_object(Bucket="checkpoints", Key=key, Body=path.read_bytes())

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(one, range(jobs)))
    return [f"s3a://checkpoints/{run}/job{i}" for i in range(jobs)]


def first_check(options: dict, locations: list[str], lazy: bool) -> tuple[float, int]:
    import boto3.session

    from airflow_sparklag.fleet import FleetChecker
    from airflow_sparklag.session import Session

    class LazySession(Session):
        """The old path: the backend's client is built by whichever thread uses it first."""

        def _new_backend(self, key: tuple[str, str], location: str) -> Any:
            backend = self.storage_options.open(location)
            with self._lock:
                self._backends[key] = backend
            return backend

    built: list[str] = []
    original = boto3.session.Session.client

    def counting(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        built.append(name)
        return original(self, name, *args, **kwargs)

    boto3.session.Session.client = counting  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        with (LazySession if lazy else Session)(s3_options=options) as session:
            results = FleetChecker(locations, session=session, history=1, max_workers=16).check()
        elapsed = time.perf_counter() - started
    finally:
        boto3.session.Session.client = original  # type: ignore[method-assign]
    errors = [r.error for r in results if r.error]
    if errors:
        raise SystemExit(f"check failed: {errors[:3]}")
    return elapsed, len(built)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from testbed.s3_server import S3Server

    server = S3Server(Path(tempfile.mkdtemp(prefix="session-bench-"))).start()
    try:
        server.client().create_bucket(Bucket="checkpoints")
        times: dict[str, list[float]] = {"session": [], "per-thread": []}
        clients: dict[str, int] = {}
        for round_ in range(args.rounds):
            # Fresh checkpoints each round so no side benefits from a warm server cache.
            locations = upload(server.client(), f"r{round_}-{uuid.uuid4().hex[:6]}", args.jobs)
            for name, lazy in (("per-thread", True), ("session", False)):
                elapsed, built = first_check(server.options, locations, lazy)
                times[name].append(elapsed)
                clients[name] = built
        for name in ("per-thread", "session"):
            print(
                f"{name:10s}  S3 clients built {clients[name]:3d}   first check of {args.jobs} "
                f"jobs: median {statistics.median(times[name]):.2f} s "
                f"({', '.join(f'{t:.2f}' for t in times[name])})"
            )
        ratio = statistics.median(times["per-thread"]) / statistics.median(times["session"])
        print(f"per-thread / session: {ratio:.2f}x")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
