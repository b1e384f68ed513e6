"""Clients shared by the hooks of a process (SHARED_CLIENTS): one S3 and one Kafka client per
connection, a new one when the connection is edited, closing a hook never closes them, and no
secret in any key. Real moto S3 and Kafka broker; the S3 checkpoint is a real one (ck35)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest

from airflow_sparklag.hooks.sparklag import (
    SHARED_CLIENTS,
    SharedClientKey,
    SparkLagHook,
)
from airflow_sparklag.kafka import KafkaOffsetsClient
from airflow_sparklag.session import ClientCache
from tests.airflow import test_hook_amazon as amazon_tests
from tests.airflow.conftest import airflow_env, conn_env, kafka_connection, kept_reader
from tests.airflow.test_hook_amazon import FALLBACK_SCRIPT, REPO, keys_extra

# The amazon tests' fixture: ck35 (committed batch 6) copied to the moto bucket.
s3_checkpoint = amazon_tests.s3_checkpoint

KAFKA_SECRET = "sasl-secret-marker-4f1e"
AWS_SECRET = "aws-secret-marker-9c2d"


def unique(name: str) -> str:
    return f"shared_{name}_{uuid.uuid4().hex[:8]}"


def set_aws(monkeypatch: pytest.MonkeyPatch, conn_id: str, s3: Any, **more: Any) -> str:
    fields = {
        "conn_type": "aws",
        "login": s3.options["aws_access_key_id"],
        "password": AWS_SECRET,  # moto checks no signature: any secret works
        "extra": keys_extra(s3),
    }
    fields.update(more)
    monkeypatch.setenv(conn_env(conn_id), json.dumps(fields))
    return conn_id


def set_kafka(monkeypatch: pytest.MonkeyPatch, conn_id: str, kafka: Any, **extra: Any) -> str:
    # sasl.password is only a marker: without sasl.mechanism librdkafka never sends it.
    config = {"sasl.password": KAFKA_SECRET, **extra}
    monkeypatch.setenv(conn_env(conn_id), kafka_connection(kafka.bootstrap, **config))
    return conn_id


@pytest.fixture
def conn_ids(kafka, s3, monkeypatch) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """A fresh kafka and aws connection on the test bed (fresh ids: clients of their own)."""
    return set_kafka(monkeypatch, unique("kafka"), kafka), set_aws(monkeypatch, unique("aws"), s3)


def s3_client_of(hook: SparkLagHook, location: str) -> Any:
    """The boto3 client the hook's reader of ``location`` really sends its requests with."""
    return kept_reader(hook, location).storage.client


@pytest.mark.testbed
def test_hooks_on_one_connection_share_one_client_each(kafka, topic, s3_checkpoint, conn_ids):
    kafka_id, aws_id = conn_ids
    kafka.produce(topic, 6)
    first, second = (SparkLagHook(kafka_id, aws_conn_id=aws_id) for _ in range(2))

    recorded = [h.committed_offsets(s3_checkpoint) for h in (first, second)]
    assert recorded[0]["committed_batch_id"] == 6 and recorded[0]["query_id"]
    assert recorded[1] == recorded[0]
    client = s3_client_of(first, s3_checkpoint)
    assert s3_client_of(second, s3_checkpoint) is client
    assert first.s3_client().options["client"] is client

    assert second.session.kafka is first.session.kafka
    snapshots = [h.session.kafka.snapshot([topic]) for h in (first, second)]
    assert [sum(p.log_end for p in s.partitions[topic].values()) for s in snapshots] == [6, 6]

    # The Kafka timeout shapes the client: another timeout, another client; S3 is still shared.
    slower = SparkLagHook(kafka_id, aws_conn_id=aws_id, kafka_timeout=20.0)
    assert slower.session.kafka is not first.session.kafka
    assert slower.s3_client().options["client"] is client
    assert [k.conn_id for k in SHARED_CLIENTS.cached_keys()].count(kafka_id) == 2
    assert [k.conn_id for k in SHARED_CLIENTS.cached_keys()].count(aws_id) == 1


@pytest.mark.testbed
def test_an_edited_connection_gets_new_clients(kafka, s3, s3_checkpoint, conn_ids, monkeypatch):
    kafka_id, aws_id = conn_ids
    before = SparkLagHook(kafka_id, aws_conn_id=aws_id)
    before.committed_offsets(s3_checkpoint)
    old_s3, old_kafka = s3_client_of(before, s3_checkpoint), before.session.kafka

    # A different extra on the same connection ids.
    set_aws(monkeypatch, aws_id, s3, extra=keys_extra(s3, config_kwargs={"read_timeout": 19}))
    set_kafka(monkeypatch, kafka_id, kafka, **{"client.id": "sparklag-edited"})
    after = SparkLagHook(kafka_id, aws_conn_id=aws_id)
    after.committed_offsets(s3_checkpoint)
    new_s3 = s3_client_of(after, s3_checkpoint)
    assert new_s3 is not old_s3
    assert new_s3.meta.config.read_timeout == 19  # built from the edited connection
    assert old_s3.meta.config.read_timeout == 15.0  # our default (storage.s3.DEFAULT_READ_TIMEOUT)
    assert after.session.kafka is not old_kafka
    assert after.session.kafka._config["client.id"] == "sparklag-edited"

    # Only the password changed: a new S3 client too (it is in the fingerprint, hashed).
    set_aws(
        monkeypatch,
        aws_id,
        s3,
        password=AWS_SECRET + "-rotated",
        extra=keys_extra(s3, config_kwargs={"read_timeout": 19}),
    )
    rotated = SparkLagHook(kafka_id, aws_conn_id=aws_id)
    assert rotated.s3_client().options["client"] not in (old_s3, new_s3)

    # The hook made before the edits keeps its clients, and they still work.
    assert before.committed_offsets(s3_checkpoint)["committed_batch_id"] is not None
    assert s3_client_of(before, s3_checkpoint) is old_s3
    assert before.session.kafka is old_kafka
    assert old_kafka.snapshot([]).cluster_id


@pytest.mark.testbed
def test_closing_one_hook_leaves_the_others_working(
    kafka, s3, kafka_conn, lagging_job, s3_checkpoint, monkeypatch
):
    aws_id = set_aws(monkeypatch, unique("aws"), s3)
    first, second = (SparkLagHook(kafka_conn, aws_conn_id=aws_id) for _ in range(2))
    for hook in (first, second):
        assert hook.check(lagging_job.location).report.total_lag == 45
        hook.committed_offsets(s3_checkpoint)
    kafka_client = second.session.kafka
    assert kafka_client is first.session.kafka
    admin = kafka_client._admin
    assert admin is not None
    s3_client = s3_client_of(second, s3_checkpoint)

    session = first.session
    first.close()
    # The hook dropped its session, which dropped its readers and backends ...
    assert first._session is None and session.closed
    assert session._readers == {} and session.backends == []
    # The shared clients were not closed: same client, same librdkafka handle.
    assert second.session.kafka is kafka_client and kafka_client._admin is admin
    assert second.check(lagging_job.location).report.total_lag == 45
    assert second.committed_offsets(s3_checkpoint)["committed_batch_id"] is not None
    assert s3_client_of(second, s3_checkpoint) is s3_client
    assert kafka_client._admin is admin

    # A closed hook can be used again: it borrows the same shared clients.
    assert first.check(lagging_job.location).report.total_lag == 45
    assert first.session.kafka is kafka_client
    first.committed_offsets(s3_checkpoint)
    assert s3_client_of(first, s3_checkpoint) is s3_client


@pytest.mark.testbed
def test_no_secret_in_the_cache_keys(s3_checkpoint, conn_ids):
    kafka_id, aws_id = conn_ids
    hook = SparkLagHook(kafka_id, aws_conn_id=aws_id)
    hook.committed_offsets(s3_checkpoint)
    assert hook.session.kafka is not None  # the Kafka client is built and cached
    keys = [k for k in SHARED_CLIENTS.cached_keys() if k.conn_id in (kafka_id, aws_id)]
    assert sorted(k.kind for k in keys) == ["kafka", "s3"]
    texts = [repr(keys), str(keys), repr(hook.__dict__), repr(hook.get_conn())]
    texts += [repr(hook.session), repr(hook.session.storage_options)]
    texts += [repr(SHARED_CLIENTS._clients.get(k)) for k in keys]
    for key in keys:
        assert len(key.fingerprint) == 64 and int(key.fingerprint, 16) >= 0  # a hash, no more
        texts += [str(field) for field in (key.kind, key.conn_id, key.fingerprint, key.settings)]
    for text in texts:
        assert KAFKA_SECRET not in text
        assert AWS_SECRET not in text


def threads_at_once(count: int, work: Any) -> list[Any]:
    """``work()`` in ``count`` threads released together; what each returned (or raised)."""
    barrier = threading.Barrier(count)
    results: list[Any] = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(work())
        except BaseException as exc:  # returned with the results, for the test to show
            results.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up at once
    try:
        threads = [threading.Thread(target=run) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(interval)
    return results


@pytest.mark.testbed
def test_a_shared_kafka_client_serves_many_threads_at_once(kafka, topic):
    kafka.produce(topic, 9)
    client = KafkaOffsetsClient({"bootstrap.servers": kafka.bootstrap}, timeout=15)

    def poll() -> tuple[int, int]:
        admin = client.admin()
        snap = client.snapshot([topic])
        return id(admin), sum(p.log_end for p in snap.partitions[topic].values())

    try:
        for _ in range(10):
            client.close()  # each round starts without an admin handle
            results = threads_at_once(8, poll)
            assert [r[1] for r in results] == [9] * 8, results
            # One handle, however many threads arrived at once.
            assert len({r[0] for r in results}) == 1
    finally:
        client.close()


def test_shared_clients_build_once_and_stay_bounded():
    cache = ClientCache(maxsize=3)
    builds: list[str] = []

    def build(name: str) -> Any:
        builds.append(name)
        time.sleep(0.05)  # a real build takes a while (botocore loads its models): others arrive
        return object()

    key = SharedClientKey("kafka", "k", "f" * 64)
    got = threads_at_once(8, lambda: cache.get(key, lambda: build("k")))
    assert builds == ["k"] and len(got) == 8 and len({id(c) for c in got}) == 1

    # Least recently used first out, beyond maxsize.
    others = [SharedClientKey("s3", f"aws{i}", str(i) * 64) for i in range(3)]
    cache.get(others[0], lambda: build("aws0"))
    cache.get(others[1], lambda: build("aws1"))
    assert cache.get(key, lambda: build("again")) is got[0]  # a hit: now the most recent
    cache.get(others[2], lambda: build("aws2"))
    assert len(cache) == 3
    assert cache.cached_keys() == [others[1], key, others[2]]

    # A failed build caches nothing; the next call builds again.
    failing = SharedClientKey("s3", "broken", "0" * 64)

    def broken() -> Any:
        raise RuntimeError("no client")

    with pytest.raises(RuntimeError):
        cache.get(failing, broken)
    assert failing not in cache.cached_keys() and cache._building == {}
    assert cache.get(failing, lambda: "built") == "built"


def test_a_forked_child_does_not_reuse_the_parents_clients():
    key = SharedClientKey("kafka", unique("fork"), "a" * 64)
    parent_client = SHARED_CLIENTS.get(key, object)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it sees, then leave without running any cleanup
        try:
            child_client = SHARED_CLIENTS.get(key, object)
            seen = {"keys": len(SHARED_CLIENTS), "same": child_client is parent_client}
            os.write(write, json.dumps(seen).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        seen = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert seen == {"keys": 1, "same": False}  # an empty cache, then a client of its own
    assert SHARED_CLIENTS.get(key, object) is parent_client  # the parent's is untouched


SHARING_WITHOUT_PROVIDER = (
    FALLBACK_SCRIPT.split("from airflow_sparklag.hooks.sparklag import SparkLagHook")[0]
    + """
from airflow_sparklag.hooks.sparklag import SparkLagHook

kafka, keys_conn, location = sys.argv[1:4]
first, second = (SparkLagHook(kafka, aws_conn_id=keys_conn) for _ in range(2))
batches = [h.committed_offsets(location)["committed_batch_id"] for h in (first, second)]
readers = [h.session.reader(location) for h in (first, second)]
assert all(len(h.session._readers) == 1 for h in (first, second))  # the ones the reads used
clients = [r.storage.client for r in readers]
first.close()
print(json.dumps({
    "blocked": bool(blocked),
    "options": sorted(second.get_conn().s3_options),
    "batches": batches,
    "shared": clients[0] is clients[1],
    "after_close": second.committed_offsets(location)["committed_batch_id"],
}))
"""
)


@pytest.mark.testbed
def test_without_the_amazon_provider_the_direct_client_is_shared(
    s3, s3_checkpoint, monkeypatch, tmp_path
):
    assert "blocked = []" in SHARING_WITHOUT_PROVIDER
    kafka_id = unique("kafka")
    monkeypatch.setenv(conn_env(kafka_id), kafka_connection("127.0.0.1:1"))  # never used
    aws_id = set_aws(monkeypatch, unique("aws"), s3)
    out = subprocess.run(
        [sys.executable, "-c", SHARING_WITHOUT_PROVIDER, kafka_id, aws_id, s3_checkpoint],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=airflow_env(tmp_path),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["blocked"]
    # get_conn().s3_options is still the connection read directly; the readers share a client.
    assert result["options"] == [
        "aws_access_key_id",
        "aws_secret_access_key",
        "endpoint_url",
        "region_name",
    ]
    assert result["batches"] == [6, 6] and result["after_close"] == 6
    assert result["shared"] is True
    assert AWS_SECRET not in out.stdout + out.stderr
