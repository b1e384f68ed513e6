"""KafkaOffsetsClient against the real broker of the test bed."""

from __future__ import annotations

import socket
import time
import uuid

import pytest

from airflow_sparklag.errors import KafkaError, KafkaUnavailable
from airflow_sparklag.kafka import KafkaOffsetsClient
from testbed.jobs import delete_records

pytestmark = pytest.mark.testbed


def _topic(kafka, partitions: int = 1) -> str:  # type: ignore[no-untyped-def]
    return kafka.create_topic(f"kc-{uuid.uuid4().hex[:10]}", partitions=partitions)


@pytest.fixture()
def client(kafka):  # type: ignore[no-untyped-def]
    with KafkaOffsetsClient({"bootstrap.servers": kafka.bootstrap}, timeout=15) as c:
        yield c


def test_snapshot_earliest_latest_and_missing_topic(kafka, client) -> None:  # type: ignore[no-untyped-def]
    topic = _topic(kafka, partitions=3)
    kafka.produce(topic, 7, partition=0)
    kafka.produce(topic, 2, partition=2)
    absent = f"absent-{uuid.uuid4().hex[:8]}"
    snap = client.snapshot([topic, absent])
    assert snap.missing_topics == frozenset({absent})
    assert {p: (o.log_start, o.log_end) for p, o in snap.partitions[topic].items()} == {
        0: (0, 7),
        1: (0, 0),
        2: (0, 2),
    }
    assert snap.partitions[topic][0].last_stable is None
    assert snap.cluster_id
    assert abs(snap.fetched_at - time.time()) < 30
    # The monitor must not have created the topic it asked about.
    assert absent not in kafka.admin().list_topics(timeout=10).topics


def test_last_stable_offset_stays_below_open_transaction(kafka, client) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import Producer

    topic = _topic(kafka)
    kafka.produce(topic, 3, partition=0)
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=f"tx-{i}".encode(), partition=0)
    producer.flush(30)
    try:
        open_tx = client.snapshot([topic], read_committed=True).partitions[topic][0]
        assert open_tx.log_end == 7
        assert open_tx.last_stable == 3  # the open transaction holds the LSO at its first record
        assert client.snapshot([topic]).partitions[topic][0].last_stable is None
    finally:
        producer.commit_transaction(30)
    # The coordinator writes the commit marker after commit_transaction() returns: poll for it.
    deadline = time.monotonic() + 20
    while True:
        committed = client.snapshot([topic], read_committed=True).partitions[topic][0]
        if committed.log_end == 8 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert committed.log_end == 8  # 3 + 4 records + the commit marker
    assert committed.last_stable == committed.log_end


def test_delete_records_raises_log_start(kafka, client) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import TopicPartition

    topic = _topic(kafka)
    kafka.produce(topic, 10, partition=0)
    futures = kafka.admin().delete_records([TopicPartition(topic, 0, 6)], request_timeout=20)
    for fut in futures.values():
        fut.result(timeout=30)
    offsets = client.snapshot([topic]).partitions[topic][0]
    assert (offsets.log_start, offsets.log_end) == (6, 10)


def test_offsets_for_time(kafka, client) -> None:  # type: ignore[no-untyped-def]
    topic = _topic(kafka, partitions=2)
    kafka.produce(topic, 5, partition=0)
    time.sleep(0.05)
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    kafka.produce(topic, 3, partition=0)
    kafka.produce(topic, 2, partition=1)
    result = client.offsets_for_time([topic], middle_ms)
    assert result[topic][0] == 5  # the first record produced after `middle_ms`
    assert result[topic][1] == 0
    # After every record: Kafka answers -1, we answer the log end.
    future_ms = int(time.time() * 1000) + 60_000
    assert client.offsets_for_time([topic], future_ms)[topic] == {0: 8, 1: 2}
    with pytest.raises(KafkaError, match="absent-topic"):
        client.offsets_for_time(["absent-topic"], middle_ms)


def test_record_timestamps(kafka, client) -> None:  # type: ignore[no-untyped-def]
    topic = _topic(kafka, partitions=2)
    before = int(time.time() * 1000)
    kafka.produce(topic, 4, partition=0)
    after = int(time.time() * 1000)
    stamps = client.record_timestamps({(topic, 0): 2, (topic, 1): 0})
    assert before - 1000 <= (stamps[(topic, 0)] or 0) <= after + 1000
    assert stamps[(topic, 1)] is None  # empty partition: offset 0 is the log end

    past_end = client.record_timestamps({(topic, 0): 4})
    assert past_end == {(topic, 0): None}
    far_past_end = client.record_timestamps({(topic, 0): 1000})
    assert far_past_end == {(topic, 0): None}


def test_unreachable_broker_fails_fast() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nobody listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "sasl.password": "hunter2-secret",
        "ssl.key.password": "another-secret",
    }
    client = KafkaOffsetsClient(config, timeout=3)
    start = time.monotonic()
    with pytest.raises(KafkaUnavailable) as info:
        client.snapshot(["anything"])
    elapsed = time.monotonic() - start
    assert elapsed < 3 + 2
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message and "3 s" in message
    assert "hunter2" not in message and "another-secret" not in message


def _leader_moving_once(client, code: str):  # type: ignore[no-untyped-def]
    """Fault injection (a leader election cannot be timed for real): the first ListOffsets
    answers ``code`` for partition 1; later ones go to the real broker."""
    from confluent_kafka import KafkaError as RdKafkaError
    from confluent_kafka import KafkaException

    admin = client.admin()
    real = admin.list_offsets
    calls = []

    def list_offsets(query, **kwargs):  # type: ignore[no-untyped-def]
        futures = real(query, **kwargs)
        calls.append(sorted(tp.partition for tp in query))
        if len(calls) == 1:
            for tp in list(futures):
                if tp.partition == 1:
                    import concurrent.futures

                    failed: concurrent.futures.Future = concurrent.futures.Future()
                    failed.set_exception(KafkaException(RdKafkaError(getattr(RdKafkaError, code))))
                    futures[tp] = failed
        return futures

    admin.list_offsets = list_offsets
    return calls


def test_a_moving_leader_is_asked_again_and_other_errors_are_not(kafka, client) -> None:  # type: ignore[no-untyped-def]
    """NOT_LEADER_FOR_PARTITION (seen for real on a partition just added) is asked again
    within the timeout and the numbers are exact; an authorization error fails at once."""
    topic = _topic(kafka, partitions=2)
    kafka.produce(topic, 5, partition=1)
    calls = _leader_moving_once(client, "NOT_LEADER_FOR_PARTITION")
    snap = client.snapshot([topic])
    assert {p: o.log_end for p, o in snap.partitions[topic].items()} == {0: 0, 1: 5}
    assert calls[0] == [0, 1] and calls[-1] == [1], calls

    with KafkaOffsetsClient({"bootstrap.servers": kafka.bootstrap}, timeout=15) as other:
        _leader_moving_once(other, "TOPIC_AUTHORIZATION_FAILED")
        started = time.monotonic()
        with pytest.raises(KafkaError):
            other.snapshot([topic])
        assert time.monotonic() - started < 5


def test_a_record_time_is_read_once_and_a_record_not_there_yet_again(kafka, client) -> None:  # type: ignore[no-untyped-def]
    """Polls of a job that has not moved read no record time again (a record's time never
    changes): once read, it stands even after Kafka deleted the record (a fresh client answers
    None there); an offset at the log end is asked again and timed once its record exists."""
    topic = _topic(kafka, partitions=2)
    kafka.produce(topic, 2, partition=0)
    first = client.record_timestamps({(topic, 0): 1, (topic, 1): 0})
    assert first[(topic, 0)] is not None and first[(topic, 1)] is None
    delete_records(kafka.admin(), topic, {0: 2})
    with KafkaOffsetsClient({"bootstrap.servers": kafka.bootstrap}, timeout=15) as fresh:
        assert fresh.record_timestamps({(topic, 0): 1}) == {(topic, 0): None}
    assert client.record_timestamps({(topic, 0): 1, (topic, 1): 0}) == first
    kafka.produce(topic, 1, partition=1)
    timed = client.record_timestamps({(topic, 0): 1, (topic, 1): 0})
    assert timed[(topic, 0)] == first[(topic, 0)] and timed[(topic, 1)] is not None
