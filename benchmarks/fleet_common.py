"""Shared pieces of the fleet benchmarks: one real Spark checkpoint as a template, and a
generator that clones it into N jobs with varied offsets (on S3 or on local disk).

Not part of the test suite. Run from the repository root with the project's virtualenv.
"""

from __future__ import annotations

import json
import random
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Template:
    """The files of one real checkpoint written by a stateful Spark query over Kafka."""

    offsets_header: str  # "v1\n{metadata json}"
    commit: bytes
    source_start: bytes
    state_names: tuple[str, ...]  # relative paths under state/

    def offsets_file(self, topic: str, offsets: dict[int, int]) -> bytes:
        body = json.dumps({topic: {str(p): o for p, o in offsets.items()}}, separators=(",", ":"))
        return f"{self.offsets_header}\n{body}".encode()


def real_template(workdir: Path, kafka: Any, topic: str) -> Template:
    """Run a real stateful query (count per partition) twice with availableNow; keep its files."""
    import sys

    sys.path.insert(0, str(REPO))
    from testbed import jobs
    from testbed.spark import spark_session

    spark = spark_session(workdir / "spark")
    checkpoint = workdir / "template-checkpoint"
    try:
        for _ in range(2):
            counts = (
                jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
                .groupBy("partition")
                .count()
            )
            query = (
                counts.writeStream.outputMode("update")
                .format("noop")
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(300)
            kafka.produce(topic, 64)
    finally:
        spark.stop()
    return load_template(checkpoint)


def load_template(checkpoint: Path) -> Template:
    """A Template from a real checkpoint directory on local disk."""
    # the newest COMMITTED batch (offsets/N may be ahead of commits/N)
    offsets = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    last = (checkpoint / "offsets" / str(offsets[-1])).read_text().split("\n")
    state = tuple(
        p.relative_to(checkpoint / "state").as_posix()
        for p in (checkpoint / "state").rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )
    return Template(
        offsets_header="\n".join(last[:2]),
        commit=(checkpoint / "commits" / str(offsets[-1])).read_bytes(),
        source_start=(checkpoint / "sources" / "0" / "0").read_bytes(),
        state_names=state,
    )


def job_files(
    template: Template,
    topic: str,
    end_offsets: dict[int, int],
    *,
    batches: int,
    state_objects: int,
    rng: random.Random,
) -> dict[str, bytes]:
    """relative path -> content of one cloned job: `batches` committed batches whose offsets
    climb to (log end - a random lag), metadata, sources, and `state_objects` state files."""
    files: dict[str, bytes] = {
        "metadata": json.dumps({"id": str(uuid.uuid4())}).encode(),
        "sources/0/0": template.source_start,
    }
    lag = {p: rng.randint(0, min(end, 50)) for p, end in end_offsets.items()}
    first = rng.randint(0, 1000)
    for b in range(batches):
        behind = batches - 1 - b
        offsets = {p: max(0, end - lag[p] - behind) for p, end in end_offsets.items()}
        batch_id = first + b
        files[f"offsets/{batch_id}"] = template.offsets_file(topic, offsets)
        files[f"commits/{batch_id}"] = template.commit
    names = template.state_names or ("0/0/1.delta",)
    for i in range(state_objects):
        base = names[i % len(names)]
        files[f"state/{i // len(names)}/{base}"] = b"state"
    return files


def upload_s3(client: Any, objects: list[tuple[str, str, bytes]], workers: int = 32) -> None:
    """PUT (bucket, key, body) objects with a thread pool (moto accepts ~1-2k PUT/s here)."""

    def put(item: tuple[str, str, bytes]) -> None:
        client.put_object(Bucket=item[0], Key=item[1], Body=item[2])

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(put, objects, chunksize=64):
            pass


def write_local(root: Path, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def counting_s3_client(
    options: dict[str, Any], max_pool: int = 64
) -> tuple[Any, Callable[[], int]]:
    """A boto3 S3 client whose API calls are counted by botocore's before-call event."""
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client(
        "s3",
        config=Config(max_pool_connections=max_pool, retries={"max_attempts": 3}),
        **options,
    )
    return client, count_calls(client)


def count_calls(client: Any) -> Callable[[], int]:
    """A function returning how many API calls ``client`` has made (botocore before-call)."""
    import threading

    lock = threading.Lock()
    count = [0]

    def on_call(**_: Any) -> None:
        with lock:
            count[0] += 1

    client.meta.events.register("before-call.s3", on_call)
    return lambda: count[0]


def requests_by_kind(backends: Any) -> dict[str, int]:
    """Requests sent by these storage backends so far, by kind (list, read, stat, ...)."""
    total: dict[str, int] = {}
    for backend in backends:
        for kind, count in backend.requests.by_operation.items():
            total[kind] = total.get(kind, 0) + count
    return total


def per_job_per_poll(
    before: dict[str, int], after: dict[str, int], jobs: int, polls: float
) -> dict[str, float]:
    """Requests per job per poll by kind between two ``requests_by_kind`` counts."""
    kinds = sorted(set(before) | set(after))
    return {
        kind: round((after.get(kind, 0) - before.get(kind, 0)) / (jobs * polls), 3)
        for kind in kinds
    }
