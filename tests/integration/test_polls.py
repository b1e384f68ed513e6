"""Polling one session's readers: a quiet poll is ONE point read per job, on local disk, S3
(moto) and HDFS (MiniCluster), against a real PySpark query's checkpoint; every verdict equals
a fresh session's.

Spark writes the checkpoint on local disk; each backend's copy receives its files in the order
Spark wrote them (offsets/N before commits/N), so a poll sees what it would see of a query
writing there.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.checkpoint import FULL_LISTING_SECONDS
from airflow_sparklag.errors import CheckpointNotFound
from airflow_sparklag.fleet import FleetChecker
from airflow_sparklag.session import Session
from airflow_sparklag.storage import Storage
from testbed import jobs

pytestmark = pytest.mark.testbed

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"


class SparkJob:
    """A real Kafka -> noop query, run one availableNow batch at a time."""

    def __init__(self, spark: Any, kafka: Any, root: Path) -> None:
        self.kafka, self.root, self.produced = kafka, root, 0
        self.topic = kafka.create_topic(f"polls-{uuid.uuid4().hex[:8]}", partitions=2)
        self.frame = jobs.select_value(
            jobs.kafka_stream(spark, kafka.bootstrap, topics=[self.topic])
        )

    def batch(self) -> None:
        self.kafka.produce(self.topic, 10, start=self.produced)
        self.produced += 10
        jobs.run_available_now(self.frame, str(self.root))


@pytest.fixture(scope="module")
def spark_job(spark: Any, kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> SparkJob:
    job = SparkJob(spark, kafka, tmp_path_factory.mktemp("polls") / "ck")
    job.batch()
    job.batch()
    return job


def _files(root: Path) -> list[str]:
    """The checkpoint's files as Spark wrote them: offsets/ before commits/ (no .crc, no state)."""
    names = [
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".") and "state" not in p.parts
    ]
    return sorted(names, key=lambda name: (name.startswith("commits/"), name))


class Target:
    """A checkpoint location on one backend, filled from a local checkpoint."""

    def __init__(self, backend: str, tmp_path: Path, kafka: Any, s3: Any, hdfs: Any) -> None:
        run = uuid.uuid4().hex[:8]
        self.kafka_config = {"bootstrap.servers": kafka.bootstrap}
        if backend == "s3":
            self.options: dict[str, Any] = {"s3_options": s3.options}
            self.location = f"s3a://checkpoints/polls-{run}/job"
        elif backend == "hdfs":
            self.options = {"webhdfs_options": {"url": hdfs.webhdfs_url, "user": "root"}}
            self.location = f"{hdfs.namenode_uri}/polls-{run}/job"
        else:
            self.options = {}
            self.location = str(tmp_path / "job")
        self.backend = backend
        self.storage: Storage = Session(**self.options).storage(self.location)
        self.copied: set[str] = set()

    def mirror(self, source: Path) -> None:
        for name in _files(source):
            if name not in self.copied:
                self.storage.write_atomic(
                    f"{self.location}/{name}", (source / name).read_bytes(), overwrite=True
                )
                self.copied.add(name)

    def delete(self, names: list[str]) -> None:
        for name in names:
            self.storage.delete(f"{self.location}/{name}")
            self.copied.discard(name)

    def remove(self) -> None:
        """The whole checkpoint, directories included (HDFS and local keep empty ones)."""
        self.delete(sorted(self.copied))
        if self.backend == "local":
            shutil.rmtree(self.location)
        elif self.backend == "hdfs":
            self.storage.delete(self.location, recursive=True)  # type: ignore[call-arg]

    def session(self) -> Session:
        return Session(kafka_config=self.kafka_config, **self.options)


def _verdicts(checker: FleetChecker) -> list[tuple[Any, ...]]:
    return [
        (
            r.location,
            r.error,
            r.verdict.health,
            r.verdict.rule,
            None if r.report is None else r.report.committed_batch_id,
            None if r.report is None else r.report.total_lag,
        )
        for r in checker.check()
    ]


def _fresh(target: Target) -> list[tuple[Any, ...]]:
    with FleetChecker([target.location], session=target.session()) as checker:
        return _verdicts(checker)


@pytest.mark.parametrize("backend", ["local", "s3", "hdfs"])
def test_quiet_polls_cost_one_point_read_and_a_new_batch_is_seen(
    backend: str, spark_job: SparkJob, kafka: Any, s3: Any, hdfs: Any, tmp_path: Path
) -> None:
    target = Target(backend, tmp_path, kafka, s3, hdfs)
    target.mirror(spark_job.root)
    with target.session() as session, FleetChecker([target.location], session=session) as long:
        assert _verdicts(long) == _fresh(target)
        _verdicts(long)  # the listing agrees with the first: later polls may point-read
        storage = session.storage(target.location)
        for _ in range(3):
            storage.requests.reset()
            assert _verdicts(long) == _fresh(target)
            assert dict(storage.requests.by_operation) == {"stat": 1}
        # The real query runs one more batch; its files reach the store in Spark's order.
        spark_job.batch()
        target.mirror(spark_job.root)
        storage.requests.reset()
        seen = _verdicts(long)
        assert storage.requests["stat"] == 1 and storage.requests["list"] >= 1
        assert seen == _fresh(target)
        assert seen[0][4] == max(int(n.split("/")[1]) for n in target.copied if "commits/" in n)


@pytest.mark.parametrize("backend", ["local", "s3", "hdfs"])
def test_purge_reset_and_deletion_are_noticed_within_the_bound(
    backend: str, spark_job: SparkJob, kafka: Any, s3: Any, hdfs: Any, tmp_path: Path
) -> None:
    target = Target(backend, tmp_path, kafka, s3, hdfs)
    target.mirror(spark_job.root)
    with target.session() as session:
        reader = session.reader(target.location)
        reader.read()
        reader.read()

        def fresh() -> Any:
            return target.session().reader(target.location).read()

        start = time.time()
        # Spark's purge removes the oldest batch; no point read sees it, the bound does.
        target.delete(["offsets/0", "commits/0"])
        reader.read(now=start + 1)
        assert reader.read(now=start + FULL_LISTING_SECONDS) == fresh()
        # A reset: deleted, and the query restarted on a new checkpoint (batches 0 and 1).
        reader.read(now=start + FULL_LISTING_SECONDS + 1)
        target.delete(sorted(target.copied))
        target.mirror(DATA / "ck43")
        later = start + 2 * FULL_LISTING_SECONDS + 1
        state = reader.read(now=later)
        assert state == fresh() and state.committed_batch_id == 0
        # Deleted for good.
        reader.read(now=later + 1)
        target.remove()
        with pytest.raises(CheckpointNotFound):
            reader.read(now=later + 1 + FULL_LISTING_SECONDS)


@pytest.mark.parametrize("backend", ["local", "s3", "s3-boto3", "hdfs", "fsspec"])
def test_is_file_is_one_point_request(
    backend: str, kafka: Any, s3: Any, hdfs: Any, tmp_path: Path
) -> None:
    if backend == "fsspec":
        import fsspec

        from airflow_sparklag.storage.fsspec_store import FsspecStorage

        storage: Storage = FsspecStorage(fsspec.filesystem("memory"))
        root = f"memory://polls-{uuid.uuid4().hex[:8]}"
    else:
        target = Target(backend.split("-")[0], tmp_path, kafka, s3, hdfs)
        if backend == "s3-boto3":
            target.options = {"s3_options": {**s3.options, "reader": "boto3"}}
        storage, root = Session(**target.options).storage(target.location), target.location
    storage.write_atomic(f"{root}/offsets/7", b"v1")
    storage.requests.reset()
    assert storage.is_file(f"{root}/offsets/7")
    assert not storage.is_file(f"{root}/offsets/8")
    assert not storage.is_file(f"{root}/offsets")  # a directory (where the store has them)
    assert dict(storage.requests.by_operation) == {"stat": 3}
