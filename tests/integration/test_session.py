"""The Session on the test bed: one S3 client for a whole fleet, however many threads read.

A first fleet check used to build its boto3 client lazily in every worker thread (16 clients,
~2.8x slower). The session builds one backend per store under a lock; this test counts the S3
clients boto3 actually creates during a first check of 200 checkpoints on a real S3 API.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.fleet import FleetChecker
from airflow_sparklag.session import Session

pytestmark = pytest.mark.testbed

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "checkpoints" / "ckm4.3.0"
JOBS = 200


@pytest.fixture(scope="module")
def fleet_prefix(s3: Any) -> str:
    client = s3.client()
    run = f"session-{uuid.uuid4().hex[:8]}"
    files = [
        p
        for p in SAMPLE.rglob("*")
        if p.is_file() and not p.name.endswith(".crc") and "state" not in p.parts
    ]

    def upload(job: int) -> None:
        for path in files:
            key = f"{run}/job{job}/{path.relative_to(SAMPLE).as_posix()}"
            client.put_object(Bucket="checkpoints", Key=key, Body=path.read_bytes())

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(upload, range(JOBS)))
    return f"s3a://checkpoints/{run}"


def _count_s3_clients(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import boto3.session

    built: list[str] = []
    original = boto3.session.Session.client

    def counting(self: Any, service_name: str, *args: Any, **kwargs: Any) -> Any:
        built.append(service_name)
        return original(self, service_name, *args, **kwargs)

    monkeypatch.setattr(boto3.session.Session, "client", counting)
    return built


def test_first_fleet_check_of_200_jobs_builds_one_s3_client(
    s3: Any, fleet_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = _count_s3_clients(monkeypatch)
    with Session(s3_options=s3.options) as session:
        # Locations, not a prefix: discovery would build the client in one thread first.
        locations = [f"{fleet_prefix}/job{i}" for i in range(JOBS)]
        checker = FleetChecker(locations, session=session, history=1, max_workers=16)
        results = checker.check()
    assert len(results) == JOBS
    assert all(r.error is None for r in results), [r.error for r in results if r.error][:3]
    assert built == ["s3"]


def test_threads_asking_together_get_one_backend_and_one_reader(s3: Any, fleet_prefix: str) -> None:
    with Session(s3_options=s3.options) as session, ThreadPoolExecutor(16) as pool:
        backends = set(pool.map(lambda _: id(session.storage(fleet_prefix)), range(64)))
        readers = set(pool.map(lambda _: id(session.reader(f"{fleet_prefix}/job1")), range(64)))
    assert len(backends) == 1 and len(readers) == 1


def test_session_closes_only_what_it_built(kafka: Any) -> None:
    config = {"bootstrap.servers": kafka.bootstrap}
    with Session(kafka_config=config) as lender:
        given = lender.kafka
        with Session(kafka_client=given) as borrower:
            assert borrower.kafka is given
        assert given.snapshot([]).cluster_id  # still open after the borrower closed
    with Session() as empty:
        assert not empty.has_kafka
        with pytest.raises(Exception, match="no Kafka configured"):
            _ = empty.kafka
