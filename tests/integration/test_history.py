"""Lag history rebuilt from a REAL query's checkpoint and the REAL broker, against the truth of a
production schedule this test controls.

Records go to a 2-partition topic in bursts, each burst stamped with an explicit timestamp (the
time it is sent). A throttled query (maxOffsetsPerTrigger, 1 s trigger) reads them, so it falls
behind and catches up. Truth, computed without the package: at each batch's batchTimestampMs T
(read from offsets/N by hand), the records produced before T (from the schedule) minus the
offsets the previous batch ended at (read from offsets/N-1 by hand); the age of the first unread
record is T minus its burst's timestamp.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.cli import main
from airflow_sparklag.history import LagHistory, history
from airflow_sparklag.session import Session
from airflow_sparklag.timelag import OLDER_THAN_HISTORY
from testbed import jobs

pytestmark = pytest.mark.testbed

SCHEDULE = [(60, 30), (0, 45), (80, 10), (25, 25)]  # records per partition, one burst each
AFTER_STOP = (7, 3)  # one more burst while the query is stopped: the "now" point's lag
GAP = 2.5  # seconds between bursts
PER_BATCH = 40  # maxOffsetsPerTrigger


@dataclass
class Bursts:
    topic: str
    checkpoint: Path
    stamps: list[tuple[int, tuple[int, ...]]]  # (timestamp ms, records per partition)

    def produced_before(self, time_ms: int, partition: int) -> int:
        """Records of ``partition`` stamped before ``time_ms`` (what Kafka held by then)."""
        return sum(sizes[partition] for ts, sizes in self.stamps if ts < time_ms)

    def stamp_of(self, partition: int, offset: int) -> int:
        """Timestamp of the record at ``offset`` (the topic is fresh: offsets count records)."""
        seen = 0
        for ts, sizes in self.stamps:
            seen += sizes[partition]
            if offset < seen:
                return ts
        raise AssertionError(f"no record at {partition}:{offset}")


def produce_burst(producer: Any, topic: str, sizes: tuple[int, ...], tag: int) -> int:
    stamp = int(time.time() * 1000)
    for partition, count in enumerate(sizes):
        for i in range(count):
            value = f"burst{tag}-p{partition}-{i}".encode()
            producer.produce(topic, value=value, partition=partition, timestamp=stamp)
    assert producer.flush(30) == 0
    return stamp


@pytest.fixture(scope="module")
def bursts(spark, kafka, tmp_path_factory) -> Bursts:  # type: ignore[no-untyped-def]
    from confluent_kafka import Producer

    topic = kafka.create_topic(f"history-{uuid.uuid4().hex[:8]}", partitions=2)
    checkpoint = tmp_path_factory.mktemp("history") / "ck"
    stream = jobs.kafka_stream(
        spark, kafka.bootstrap, topics=[topic], options={"maxOffsetsPerTrigger": str(PER_BATCH)}
    )
    query = jobs.start_query(stream, str(checkpoint), trigger={"processingTime": "1 second"})
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0})
    stamps = []
    try:
        jobs.wait_until(lambda: (checkpoint / "commits" / "0").exists(), 60, "batch 0 committed")
        for tag, sizes in enumerate(SCHEDULE):
            stamps.append((produce_burst(producer, topic, sizes, tag), sizes))
            time.sleep(GAP)
        total = sum(sum(sizes) for sizes in SCHEDULE)
        jobs.wait_until(lambda: jobs.stream_rows(query) >= total, 90, f"{total} rows read")
    finally:
        jobs.stop_quietly(query)
    stamps.append((produce_burst(producer, topic, AFTER_STOP, len(SCHEDULE)), AFTER_STOP))
    return Bursts(topic, checkpoint, stamps)


def disk_batch(checkpoint: Path, batch_id: int) -> tuple[int, dict[int, int]]:
    """(batchTimestampMs, partition -> end offset) of offsets/<batch_id>, parsed by hand."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().split("\n")
    offsets = next(iter(json.loads(lines[2]).values()))
    return json.loads(lines[1])["batchTimestampMs"], {int(p): o for p, o in offsets.items()}


def ids(directory: Path) -> list[int]:
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def assert_truth(past: LagHistory, truth: Bursts) -> None:
    """Every batch point: lag = produced before its time - previous batch's end, exactly; the
    first unread record's true age inside the bracket; the estimate inside it too."""
    checkpoint = truth.checkpoint
    for point in past.points:
        if point.kind == "now":
            continue
        stamp, _ = disk_batch(checkpoint, point.batch_id)
        assert point.time_ms == stamp
        previous = disk_batch(checkpoint, point.batch_id - 1)[1] if point.batch_id else {0: 0, 1: 0}
        for part in point.partitions:
            where = f"batch {point.batch_id} partition {part.partition}"
            expected = truth.produced_before(stamp, part.partition) - previous[part.partition]
            assert part.processed_offset == previous[part.partition], where
            assert part.lag == expected, where
            assert_age(part, truth, stamp, where)
        assert point.total_lag == sum(p.lag or 0 for p in point.partitions)


def assert_age(part: Any, truth: Bursts, at_ms: int, where: str) -> None:
    if part.lag == 0:
        assert (part.lag_seconds, part.lag_seconds_min, part.lag_seconds_max) == (0, 0, 0), where
        return
    age = (at_ms - truth.stamp_of(part.partition, part.processed_offset)) / 1000.0
    low, high = part.lag_seconds_min, part.lag_seconds_max
    if part.lag_seconds is None:
        assert low is not None and low - 0.001 <= age, (where, age, low)
        if part.unknown == OLDER_THAN_HISTORY:
            # Written before the oldest batch asked about: a lower bound only, never a guess.
            assert high is None, where
            return
        # Written at an unknown moment of a gap between two answers wider than 2 s and 10 % of
        # its age (status's rule): the bracket, no guess.
        assert "gap between two observations" in (part.unknown or ""), where
        assert high is not None and age <= high + 0.001, (where, age, high)
        return
    assert part.unknown is None, where
    assert low is not None and high is not None, where
    assert low - 0.001 <= age <= high + 0.001, (where, age, low, high)
    assert low <= part.lag_seconds <= high, where


def test_history_equals_the_production_schedule(bursts, kafka):
    config = {"bootstrap.servers": kafka.bootstrap}
    with Session(kafka_config=config) as session:
        past = history(session, str(bursts.checkpoint))
    committed = ids(bursts.checkpoint / "commits")
    batch_points = [p for p in past.points if p.kind != "now"]
    assert [p.batch_id for p in batch_points] == committed  # every retained batch, in order
    assert past.kafka_calls == len({p.time_ms for p in batch_points})
    assert_truth(past, bursts)
    # From batch 0 on, every record is bracketed (its estimate unknown only inside a wide gap).
    parts = [p for point in past.points for p in point.partitions if p.lag]
    assert all(p.lag_seconds_max is not None for p in parts), parts
    # The throttle made it lag: some batch started with more waiting than one batch reads.
    assert max(p.total_lag or 0 for p in batch_points) > PER_BATCH

    now = past.points[-1]
    assert now.kind == "now" and now.batch_id is None
    by_partition = {p.partition: p for p in now.partitions}
    for partition, waiting in enumerate(AFTER_STOP):
        assert by_partition[partition].lag == waiting
        assert_age(by_partition[partition], bursts, now.time_ms, f"now partition {partition}")
    json.dumps(past.to_dict())


def test_fewer_batches_keep_the_one_before_as_the_starting_point(bursts, kafka):
    config = {"bootstrap.servers": kafka.bootstrap}
    with Session(kafka_config=config) as session:
        past = history(session, str(bursts.checkpoint), batches=3, include_now=False)
    committed = ids(bursts.checkpoint / "commits")
    assert [p.batch_id for p in past.points] == committed[-3:]
    assert past.kafka_calls == 4  # the three shown batches and the one before them
    assert_truth(past, bursts)
    assert all(p.lag is not None for point in past.points for p in point.partitions)


def test_cli_and_hook_give_the_same_history(bursts, kafka, capsys, monkeypatch):
    location = str(bursts.checkpoint)
    assert main(["history", location, "-b", kafka.bootstrap, "--json", "--no-now"]) == 0
    (payload,) = json.loads(capsys.readouterr().out)["results"]
    lags = [(p["batch_id"], p["total_lag"]) for p in payload["points"]]
    assert lags and payload["approximations"]

    # Imported here: Airflow prints its configuration banner to stdout on first import.
    from airflow_sparklag.hooks.sparklag import SparkLagHook
    from tests.airflow.conftest import conn_env, kafka_connection

    monkeypatch.setenv(conn_env("k_history"), kafka_connection(kafka.bootstrap))
    hook = SparkLagHook("k_history")
    try:
        from_hook = hook.lag_history(location)
    finally:
        hook.close()
    assert [(p.batch_id, p.total_lag) for p in from_hook.points if p.kind != "now"] == lags

    assert main(["history", location, "-b", kafka.bootstrap, "--batches", "4"]) == 0
    table = capsys.readouterr().out
    assert "time (UTC)" in table and "approximate:" in table
    assert f"{bursts.topic}-0=" in table and "now" in table
