"""Real faults between the package and the test bed, made by toxiproxy: hangs, resets, answers
cut short and slow links, in front of S3 (moto), WebHDFS and a Kafka broker of its own.

Every fault must end as a typed error (StorageError, KafkaUnavailable) within the documented
bound, never as a traceback or a wrong answer. Small timeouts keep the module fast; the bounds
scale with them (docs/connections.md).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.consumer_group import export_offsets
from airflow_sparklag.errors import KafkaError, KafkaUnavailable, StorageError
from airflow_sparklag.kafka import KafkaOffsetsClient
from airflow_sparklag.storage.s3 import S3Options, S3Storage, worst_case_seconds
from airflow_sparklag.storage.webhdfs import WebHDFSOptions, WebHDFSStorage
from testbed.kafka_broker import KafkaBroker
from testbed.process import free_port
from testbed.s3_server import S3Server
from testbed.toxiproxy import Proxy, Toxiproxy

pytestmark = pytest.mark.testbed

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
BUCKET = "checkpoints"
SASL_USER, SASL_PASSWORD = "monitor", "sasl-canary-7f3a"
SLACK = 1.0  # seconds of scheduling slack on a loaded 2-core machine


def _timed(call: Any) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        call()
    except Exception as exc:
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


# -- S3 behind toxiproxy ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_proxy(toxiproxy: Toxiproxy, s3: S3Server) -> Proxy:
    return toxiproxy.proxy(f"s3-{uuid.uuid4().hex[:6]}", f"127.0.0.1:{s3.port}")


@pytest.fixture(scope="module")
def s3_checkpoint(s3: S3Server) -> str:
    """ck35 uploaded, plus a 64 KiB object (a body long enough to cut short)."""
    client = s3.client()
    prefix = f"faults-{uuid.uuid4().hex[:8]}"
    for path in (DATA / "ck35").rglob("*"):
        if path.is_file():
            key = f"{prefix}/ck35/{path.relative_to(DATA / 'ck35').as_posix()}"
            client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/big", Body=b"x" * 65536)
    return f"s3a://{BUCKET}/{prefix}"


@pytest.fixture(autouse=True)
def _no_toxics_left(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    for name in ("s3_proxy", "hdfs_proxy", "proxied_kafka"):
        if name in request.fixturenames:
            fixture = request.getfixturevalue(name)
            (fixture if isinstance(fixture, Proxy) else fixture[1]).clear()


def _s3(proxy: Proxy, s3: S3Server, **bounds: Any) -> S3Storage:
    options = {**s3.options, "endpoint_url": proxy.url}
    return S3Storage(S3Options(**options, **bounds))


def _attempts(storage: S3Storage) -> list[str]:
    """Every HTTP attempt botocore sends (retries included); obstore's are not seen here
    (its tests bound the time instead)."""
    sent: list[str] = []
    storage.client.meta.events.register(
        "before-send.s3", lambda request, **_: sent.append(request.method)
    )
    return sent


# Both readers (obstore, the default on Python >= 3.11, and boto3) meet the same faults.
READERS = pytest.mark.parametrize("reader", ["obstore", "boto3"])


@READERS
def test_s3_through_the_proxy(
    s3_proxy: Proxy, s3: S3Server, s3_checkpoint: str, reader: str
) -> None:
    storage = _s3(s3_proxy, s3, reader=reader)
    state = CheckpointReader(storage, f"{s3_checkpoint}/ck35").read(history=1)
    assert state.committed_batch_id == 6


@READERS
def test_s3_hang_fails_within_attempts_times_timeouts(
    s3_proxy: Proxy, s3: S3Server, s3_checkpoint: str, reader: str
) -> None:
    bounds = {"connect_timeout": 1.0, "read_timeout": 1.5, "max_attempts": 2}
    storage = _s3(s3_proxy, s3, **bounds, reader=reader)
    sent = _attempts(storage)
    reader_ = CheckpointReader(storage, f"{s3_checkpoint}/ck35")
    # The connection opens, the request never arrives, no answer ever comes.
    with s3_proxy.toxic("timeout", "upstream", timeout=0):
        elapsed, error = _timed(lambda: reader_.read(history=1))
        read_elapsed, read_error = _timed(lambda: storage.read(f"{s3_checkpoint}/big"))
    bound = worst_case_seconds(**bounds)  # (1 + 1.5) x 2 = 5 s
    for took, failure, what in [(elapsed, error, "ck35: list"), (read_elapsed, read_error, "big")]:
        assert isinstance(failure, StorageError), failure
        message = str(failure)
        assert message.startswith(f"{s3_checkpoint}/{what}"), message
        assert f"could not talk to {s3_proxy.url}" in message, message
        # Each attempt waits its read timeout (the connect succeeds at once through the
        # proxy): two attempts take at least 2 x 1.5 s.
        assert 2 * 1.5 <= took <= bound + SLACK, took
    if reader == "boto3":
        assert "Read timeout" in str(error)
        assert len(sent) == 4  # max_attempts counts the first attempt: 2 per request
    print(f"S3 hang ({reader}): {elapsed:.2f} s / {read_elapsed:.2f} s (bound {bound:g} s)")


@READERS
def test_s3_reset_peer_is_a_storage_error(
    s3_proxy: Proxy, s3: S3Server, s3_checkpoint: str, reader: str
) -> None:
    storage = _s3(
        s3_proxy, s3, connect_timeout=1.0, read_timeout=1.5, max_attempts=2, reader=reader
    )
    sent = _attempts(storage)
    with s3_proxy.toxic("reset_peer", timeout=0):
        elapsed, error = _timed(lambda: CheckpointReader(storage, f"{s3_checkpoint}/ck35").read())
    assert isinstance(error, StorageError), error
    assert f"{s3_checkpoint}/ck35: list failed" in str(error)
    assert elapsed < worst_case_seconds(1.0, 1.5, 2)
    assert len(sent) == (2 if reader == "boto3" else 0)


@READERS
def test_s3_answers_cut_short_are_storage_errors(
    s3_proxy: Proxy, s3: S3Server, s3_checkpoint: str, reader: str
) -> None:
    storage = _s3(
        s3_proxy, s3, connect_timeout=1.0, read_timeout=1.5, max_attempts=2, reader=reader
    )
    # Headers (~400 bytes) get through; the listing (~4 KB) and the object (64 KiB) do not.
    with s3_proxy.toxic("limit_data", bytes=1200):
        _, listing_error = _timed(lambda: CheckpointReader(storage, f"{s3_checkpoint}/ck35").read())
        _, read_error = _timed(lambda: storage.read(f"{s3_checkpoint}/big"))
    assert isinstance(listing_error, StorageError), listing_error
    assert str(listing_error).startswith(f"{s3_checkpoint}/ck35: list failed")
    assert isinstance(read_error, StorageError), read_error
    assert str(read_error).startswith(f"{s3_checkpoint}/big: ")


@READERS
def test_s3_slow_link_within_the_read_timeout_works(
    s3_proxy: Proxy, s3: S3Server, s3_checkpoint: str, reader: str
) -> None:
    storage = _s3(
        s3_proxy, s3, connect_timeout=1.0, read_timeout=1.5, max_attempts=1, reader=reader
    )
    with s3_proxy.toxic("latency", latency=400):
        state = CheckpointReader(storage, f"{s3_checkpoint}/ck35").read(history=1)
    assert state.committed_batch_id == 6


# -- WebHDFS behind toxiproxy -------------------------------------------------------------------


@pytest.fixture(scope="module")
def hdfs_proxy(toxiproxy: Toxiproxy, hdfs: Any) -> Proxy:
    return toxiproxy.proxy(f"webhdfs-{uuid.uuid4().hex[:6]}", f"127.0.0.1:{hdfs.http_port}")


@pytest.fixture(scope="module")
def hdfs_checkpoint(hdfs: Any) -> str:
    """A checkpoint with 40 commit files: a LISTSTATUS answer of ~10 KB."""
    storage = WebHDFSStorage(hdfs.webhdfs_url, WebHDFSOptions(user="root"))
    root = f"{hdfs.namenode_uri}/faults/{uuid.uuid4().hex[:8]}"
    commit = (DATA / "ck35" / "commits" / "0").read_bytes()
    for batch in range(40):
        storage.write_atomic(f"{root}/commits/{batch}", commit)
    return root


def test_webhdfs_listing_cut_short_is_a_storage_error(
    hdfs_proxy: Proxy, hdfs_checkpoint: str
) -> None:
    storage = WebHDFSStorage(
        hdfs_proxy.url, WebHDFSOptions(user="root", connect_timeout=1, read_timeout=2)
    )
    assert len(storage.list_dir(f"{hdfs_checkpoint}/commits")) == 40  # whole through the proxy
    storage = WebHDFSStorage(
        hdfs_proxy.url, WebHDFSOptions(user="root", connect_timeout=1, read_timeout=2)
    )
    with hdfs_proxy.toxic("limit_data", bytes=2000):
        _, error = _timed(lambda: storage.list_dir(f"{hdfs_checkpoint}/commits"))
    assert isinstance(error, StorageError), error
    assert str(error).startswith(
        f"{hdfs_checkpoint}/commits: LISTSTATUS failed at {hdfs_proxy.url}"
    )
    assert "the answer was cut short" in str(error)


def test_webhdfs_hang_fails_within_connect_plus_read_timeout(
    hdfs_proxy: Proxy, hdfs_checkpoint: str
) -> None:
    storage = WebHDFSStorage(
        hdfs_proxy.url, WebHDFSOptions(user="root", connect_timeout=1, read_timeout=1.5)
    )
    with hdfs_proxy.toxic("timeout", "upstream", timeout=0):
        elapsed, error = _timed(lambda: CheckpointReader(storage, hdfs_checkpoint).read())
    assert isinstance(error, StorageError), error
    assert "failed on every NameNode" in str(error) and "ReadTimeout" in str(error)
    assert 1.5 <= elapsed <= 1 + 1.5 + SLACK, elapsed


# -- Kafka behind toxiproxy (a broker of its own, advertising the proxy) -----------------------


@pytest.fixture(scope="module")
def proxied_kafka(testbed_dir: Path, toxiproxy: Toxiproxy) -> Iterator[tuple[KafkaBroker, Proxy]]:
    """A broker whose PLAINTEXT listener is reached only through a proxy (it advertises the
    proxy's port), with a SASL/PLAIN listener too; it has never had a consumer group."""
    port = free_port()
    proxy = toxiproxy.proxy(f"kafka-{uuid.uuid4().hex[:6]}", f"127.0.0.1:{port}")
    broker = KafkaBroker(
        testbed_dir / f"kafka-proxied-{uuid.uuid4().hex[:6]}",
        port=port,
        advertised_port=proxy.port,
        sasl_users={SASL_USER: SASL_PASSWORD},
    ).start()
    broker.create_topic("orders", partitions=3)
    broker.produce("orders", 30)
    yield broker, proxy
    broker.stop()


def _sasl(broker: KafkaBroker, password: str) -> dict[str, str]:
    assert broker.sasl_bootstrap is not None
    return {
        "bootstrap.servers": broker.sasl_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": SASL_USER,
        "sasl.password": password,
    }


def test_consumer_group_export_on_a_broker_that_never_had_a_group(
    proxied_kafka: tuple[KafkaBroker, Proxy],
) -> None:
    # First group request of this broker: the coordinator answers NOT_COORDINATOR (with an
    # empty reason) until __consumer_offsets is ready; the export retries within its timeout.
    broker, _ = proxied_kafka
    export = export_offsets(
        {"bootstrap.servers": broker.bootstrap}, "spark-orders", {"orders": {0: 3, 1: 2, 2: 1}}
    )
    assert export.offsets == {"orders": {0: 3, 1: 2, 2: 1}}


def test_kafka_two_second_latency_works_with_timeout_10(
    proxied_kafka: tuple[KafkaBroker, Proxy],
) -> None:
    broker, proxy = proxied_kafka
    client = KafkaOffsetsClient({"bootstrap.servers": broker.bootstrap}, timeout=10)
    with proxy.toxic("latency", latency=2000), client:  # every answer 2 s late
        elapsed, error = _timed(lambda: client.snapshot(["orders"]))
    assert error is None, error
    assert elapsed <= 2 * 10, elapsed  # two rounds: metadata, then ListOffsets
    print(f"Kafka with 2 s latency: snapshot in {elapsed:.2f} s (timeout 10)")


def test_kafka_hang_is_unavailable_within_the_timeout(
    proxied_kafka: tuple[KafkaBroker, Proxy],
) -> None:
    broker, proxy = proxied_kafka
    client = KafkaOffsetsClient({"bootstrap.servers": broker.bootstrap}, timeout=3)
    with proxy.toxic("timeout", "upstream", timeout=0), client:
        elapsed, error = _timed(lambda: client.snapshot(["orders"]))
    assert isinstance(error, KafkaUnavailable), error
    assert f"{broker.bootstrap} did not answer a metadata request within 3 s" in str(error)
    assert elapsed <= 3 + SLACK, elapsed
    print(f"Kafka hang: KafkaUnavailable after {elapsed:.2f} s (timeout 3)")


def test_kafka_reset_peer_is_unavailable(proxied_kafka: tuple[KafkaBroker, Proxy]) -> None:
    broker, proxy = proxied_kafka
    client = KafkaOffsetsClient({"bootstrap.servers": broker.bootstrap}, timeout=3)
    with proxy.toxic("reset_peer", timeout=0), client:
        elapsed, error = _timed(lambda: client.snapshot(["orders"]))
    assert isinstance(error, KafkaUnavailable), error
    assert elapsed <= 3 + SLACK, elapsed


# -- Kafka SASL/PLAIN ---------------------------------------------------------------------------


def test_sasl_good_password_reads_offsets(proxied_kafka: tuple[KafkaBroker, Proxy]) -> None:
    broker, _ = proxied_kafka
    with KafkaOffsetsClient(_sasl(broker, SASL_PASSWORD), timeout=10) as client:
        snapshot = client.snapshot(["orders"])
    assert sum(p.log_end for p in snapshot.partitions["orders"].values()) == 30


@pytest.mark.parametrize("call", ["snapshot", "record_timestamps", "export_offsets"])
def test_sasl_bad_password_is_reported_as_refused_credentials(
    proxied_kafka: tuple[KafkaBroker, Proxy], call: str
) -> None:
    broker, _ = proxied_kafka
    config = _sasl(broker, "wrong-canary-91c2")
    timeout = 10.0

    def run() -> None:
        if call == "export_offsets":
            export_offsets(config, "spark-bad-password", {"orders": {0: 1}}, timeout=timeout)
            return
        with KafkaOffsetsClient(config, timeout=timeout) as client:
            if call == "snapshot":
                client.snapshot(["orders"])
            else:
                client.record_timestamps({("orders", 0): 0})

    elapsed, error = _timed(run)
    assert type(error) is KafkaError, error
    message = str(error)
    assert message.startswith(f"Kafka refused the credentials for {broker.sasl_bootstrap}")
    assert "(SASL authentication failed)" in message
    assert "Invalid username or password" in message
    assert "did not answer" not in message and "transport failure" not in message
    assert "wrong-canary-91c2" not in message and SASL_PASSWORD not in message
    assert elapsed < timeout / 2, elapsed  # reported as soon as the broker refuses
