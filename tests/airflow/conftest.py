"""Fixtures for the Airflow adapters: connections pointing at the test bed, real checkpoints.

Connections are ``AIRFLOW_CONN_<ID>`` environment variables (JSON form), exactly what a
deployment would set; the checkpoints are written by real Spark queries reading real topics.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed import jobs
from testbed.airflow_cluster import AirflowCluster

DB_VAR = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
KAFKA_CONN_ID = "sparklag_kafka"
AWS_CONN_ID = "sparklag_aws"
WEBHDFS_CONN_ID = "sparklag_webhdfs"


def conn_env(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def kafka_connection(bootstrap: str, **extra: Any) -> str:
    return json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap, **extra}})


def kept_reader(hook: Any, location: str) -> Any:
    """The checkpoint reader the hook's earlier checks of ``location`` used: its session keeps
    one per checkpoint between calls (asserted: asking for it builds no new reader)."""
    readers = len(hook.session._readers)
    reader = hook.session.reader(location)
    assert len(hook.session._readers) == readers, f"the hook kept no reader of {location}"
    return reader


@pytest.fixture(scope="session")
def kafka_conn(kafka) -> str:  # type: ignore[no-untyped-def]
    os.environ[conn_env(KAFKA_CONN_ID)] = kafka_connection(kafka.bootstrap)
    return KAFKA_CONN_ID


@pytest.fixture(scope="session")
def aws_conn(s3) -> str:  # type: ignore[no-untyped-def]
    options = s3.options
    os.environ[conn_env(AWS_CONN_ID)] = json.dumps(
        {
            "conn_type": "aws",
            "login": options["aws_access_key_id"],
            "password": options["aws_secret_access_key"],
            "extra": {
                "endpoint_url": options["endpoint_url"],
                "region_name": options.get("region_name", "us-east-1"),
            },
        }
    )
    return AWS_CONN_ID


@pytest.fixture(scope="session")
def webhdfs_conn(hdfs) -> str:  # type: ignore[no-untyped-def]
    host_port = hdfs.webhdfs_url.split("://", 1)[1]
    host, port = host_port.rsplit(":", 1)
    os.environ[conn_env(WEBHDFS_CONN_ID)] = json.dumps(
        {"conn_type": "webhdfs", "host": host, "port": int(port), "login": "root"}
    )
    return WEBHDFS_CONN_ID


@dataclass
class Job:
    """A topic and the checkpoint of a Spark query that consumed part of it."""

    topic: str
    location: str
    committed: dict[int, int]  # Kafka end offsets when the query stopped


@pytest.fixture(scope="session")
def consume(spark, kafka) -> Callable[..., Job]:  # type: ignore[no-untyped-def]
    """consume(topic, location): a real availableNow query reads all of `topic` into `location`."""

    def run(topic: str, location: str) -> Job:
        df = jobs.select_value(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]))
        jobs.run_available_now(df, location)
        return Job(topic, location, kafka.end_offsets(topic))

    return run


@pytest.fixture(scope="session")
def lagging_job(kafka, consume, tmp_path_factory) -> Job:  # type: ignore[no-untyped-def]
    """A local checkpoint that processed 60 records; 45 more wait (15 per partition)."""
    topic = kafka.create_topic(f"af-lagging-{uuid.uuid4().hex[:6]}", partitions=3)
    kafka.produce(topic, 60)
    job = consume(topic, str(tmp_path_factory.mktemp("af") / "lagging"))
    for partition in range(3):
        kafka.produce(topic, 15, partition=partition, start=1000 + partition * 100)
    return job


@pytest.fixture(scope="session")
def healthy_job(kafka, consume, tmp_path_factory) -> Job:  # type: ignore[no-untyped-def]
    """A local checkpoint that processed everything in its topic (lag 0)."""
    topic = kafka.create_topic(f"af-healthy-{uuid.uuid4().hex[:6]}", partitions=3)
    kafka.produce(topic, 30)
    return consume(topic, str(tmp_path_factory.mktemp("af") / "healthy"))


@pytest.fixture(scope="session")
def data_loss_job(kafka, consume, tmp_path_factory) -> Job:  # type: ignore[no-untyped-def]
    """A checkpoint whose committed offsets retention has deleted (DeleteRecords past them)."""
    from confluent_kafka import TopicPartition

    topic = kafka.create_topic(f"af-loss-{uuid.uuid4().hex[:6]}", partitions=3)
    kafka.produce(topic, 30)
    job = consume(topic, str(tmp_path_factory.mktemp("af") / "loss"))
    kafka.produce(topic, 30)
    ends = kafka.end_offsets(topic)
    futures = kafka.admin().delete_records(
        [TopicPartition(topic, p, o) for p, o in ends.items()], request_timeout=20
    )
    for future in futures.values():
        future.result(timeout=30)
    return job


def airflow_env(tmp_path: Path) -> dict[str, str]:
    """Environment for an ``airflow`` subprocess: this session's AIRFLOW_HOME and connections."""
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")) if p
    )
    env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    env.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(Path(__file__).resolve().parents[2] / "dags"))
    return env


class Deployment:
    """Starts the cluster on first use, inside a test, so a failed start fails that test."""

    def __init__(self, cluster: AirflowCluster) -> None:
        self.cluster = cluster
        self.error: BaseException | None = None
        self.started = False

    def running(self) -> AirflowCluster:
        if self.error is not None:
            pytest.fail(f"the Airflow deployment did not start: {self.error}", pytrace=False)
        if not self.started:
            begin = time.monotonic()
            try:
                self.cluster.start(timeout=240)
            except Exception as exc:
                self.error = exc
                pytest.fail(f"the Airflow deployment did not start: {exc}", pytrace=False)
            self.started = True
            print(f"Airflow deployment up in {time.monotonic() - begin:.1f}s at {self.cluster.url}")
        return self.cluster


@pytest.fixture(scope="session")
def deployment(kafka_conn, tmp_path_factory) -> Iterator[Deployment]:  # type: ignore[no-untyped-def]
    """ONE real deployment (api-server, scheduler, dag-processor, triggerer) for the test
    session, running the example DAGs; the Kafka connection is in its environment (tasks run
    under the scheduler's, triggers under the triggerer's)."""
    repo = Path(__file__).resolve().parents[2]
    cluster = AirflowCluster(
        tmp_path_factory.mktemp("airflow-deployment"),
        dags_folder=repo / "dags",
        env={
            "PYTHONPATH": str(repo),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            # The connection form's Test button (off by default since Airflow 2.7).
            "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
        },
    )
    holder = Deployment(cluster)
    yield holder
    cluster.stop()


@dataclass(frozen=True)
class MetadataDb:
    """An Airflow metadata database of the test bed: ``name`` (``sqlite`` or ``postgresql``)
    and its SQLAlchemy URL. ``airflow`` subprocesses reach it with ``env``; this process's
    Airflow ORM works on it inside ``current()``."""

    name: str
    url: str

    @property
    def env(self) -> dict[str, str]:
        return {DB_VAR: self.url}

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Airflow's sessions in this process (``create_session``) on this database, then
        back on the one they were on."""
        from airflow import settings

        saved = settings.SQL_ALCHEMY_CONN, settings.SQL_ALCHEMY_CONN_ASYNC
        if saved[0] == self.url:
            yield
            return
        settings.dispose_orm()
        settings.SQL_ALCHEMY_CONN = self.url
        settings.SQL_ALCHEMY_CONN_ASYNC = settings._get_async_conn_uri_from_sync(self.url)
        settings.configure_orm()
        try:
            yield
        finally:
            settings.dispose_orm()
            settings.SQL_ALCHEMY_CONN, settings.SQL_ALCHEMY_CONN_ASYNC = saved
            settings.configure_orm()


@pytest.fixture(params=["sqlite", "postgresql"])
def metadata_db(request: pytest.FixtureRequest) -> MetadataDb:
    """Each migrated metadata database in turn, for the tests of SQL the provider writes
    itself (the "Streaming lag" page): SQLite, as the other tests, and PostgreSQL, as most
    production deployments (one database for the session, shared by these tests)."""
    if request.param == "sqlite":
        request.getfixturevalue("airflow_db")
        return MetadataDb("sqlite", os.environ[DB_VAR])
    return MetadataDb("postgresql", request.getfixturevalue("airflow_postgres"))
