"""The core lag scenarios on every storage: local disk, S3 (moto, via s3a) and HDFS (WebHDFS).

Real PySpark queries write the checkpoints to each store; the numbers read back through
`monitor.check_checkpoint` must be the same everywhere and equal to Kafka's ground truth.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.monitor import check_checkpoint, check_checkpoints
from airflow_sparklag.session import Session
from testbed import jobs

pytestmark = pytest.mark.testbed

STORAGES = ("local", "s3", "hdfs")


class Location:
    """Where Spark writes (`spark_url`) and how the package reads it back (`options`)."""

    def __init__(self, spark_url: str, options: dict[str, Any]) -> None:
        self.url = spark_url
        self.options = options

    def check(self, kafka: Any, **kwargs: Any):  # type: ignore[no-untyped-def]
        return check_checkpoint(
            self.url, kafka_config={"bootstrap.servers": kafka.bootstrap}, **self.options, **kwargs
        )

    def state(self):  # type: ignore[no-untyped-def]
        return CheckpointReader(Session(**self.options).storage(self.url), self.url).read()


def make_location(kind: str, request: pytest.FixtureRequest, name: str) -> Location:
    tag = f"{name}-{uuid.uuid4().hex[:8]}"
    if kind == "local":
        base = request.getfixturevalue("tmp_path_factory").mktemp("storage")
        return Location(str(base / tag), {})
    if kind == "s3":
        s3 = request.getfixturevalue("s3")
        return Location(f"s3a://checkpoints/lag/{tag}", {"s3_options": s3.options})
    hdfs = request.getfixturevalue("hdfs")
    return Location(
        f"{hdfs.namenode_uri}/checkpoints/lag/{tag}",
        {"webhdfs_options": {"url": hdfs.webhdfs_url}},
    )


def partition_rows(result: Any) -> list[tuple]:
    return [
        (p.topic, p.partition, p.committed_offset, p.log_start_offset, p.log_end_offset, p.lag)
        for p in result.report.partitions()
    ]


# -- stopped query with history, the same topic on every storage ------------------------------


@pytest.fixture(scope="module")
def stopped(spark, kafka, request):  # type: ignore[no-untyped-def]
    """One topic; one availableNow query per storage, at most 20 records per batch;
    then 12 more records while every query is down."""
    topic = kafka.create_topic(f"storage-{uuid.uuid4().hex[:8]}", partitions=4)
    for p in range(4):
        kafka.produce(topic, 10, partition=p, start=p * 100)
    locations = {kind: make_location(kind, request, "stopped") for kind in STORAGES}
    for location in locations.values():
        df = jobs.kafka_stream(
            spark, kafka.bootstrap, topics=[topic], options={"maxOffsetsPerTrigger": "20"}
        )
        jobs.run_available_now(df, location.url)
    at_stop = kafka.end_offsets(topic)
    kafka.produce(topic, 5, partition=0, start=1000)
    kafka.produce(topic, 7, partition=3, start=1000)
    return {"topic": topic, "locations": locations, "at_stop": at_stop}


@pytest.mark.parametrize("kind", STORAGES)
def test_stopped_query_exact_on_storage(stopped, kafka, kind):
    topic, location = stopped["topic"], stopped["locations"][kind]
    at_stop = stopped["at_stop"]
    assert at_stop == {0: 10, 1: 10, 2: 10, 3: 10}
    result = location.check(kafka)
    report = result.report
    truth_end = kafka.end_offsets(topic)
    readable = jobs.count_from(kafka.bootstrap, {topic: at_stop})
    assert partition_rows(result) == [
        (topic, p, at_stop[p], 0, truth_end[p], readable[(topic, p)]) for p in range(4)
    ]
    assert [readable[(topic, p)] for p in range(4)] == [5, 0, 0, 7]
    assert report.total_lag == 12
    assert (report.max_lag, report.max_lag_topic, report.max_lag_partition) == (7, topic, 3)
    # 40 records, at most 20 per batch: every batch retained, in order, each within the limit.
    state = location.state()
    assert [h.batch_id for h in report.history] == list(state.commit_ids)
    assert len(report.history) >= 2 and report.in_flight is None
    assert report.committed_batch_id == state.commit_ids[-1]
    totals = [
        sum(p.offset_history[i] for p in report.partitions()) for i in range(len(report.history))
    ]
    assert totals[-1] == 40
    assert all(0 <= b - a <= 20 for a, b in zip([0, *totals], totals, strict=False)), totals
    for p in report.partitions():
        assert p.offset_history[-1] == at_stop[p.partition]
    assert report.query_id == state.query_id is not None
    # Two batches: UNKNOWN (short history) once the records waited STOPPED_MIN_IDLE_SECONDS.
    assert result.verdict.health in (Health.OK, Health.STOPPED, Health.LAGGING, Health.UNKNOWN)
    time.sleep(0.2)
    stopped_verdict = location.check(kafka, thresholds={"max_commit_age_seconds": 0.1}).verdict
    assert stopped_verdict.health is Health.STOPPED


def test_same_numbers_on_every_storage_in_one_call(stopped, kafka, s3, hdfs):
    locations = stopped["locations"]
    urls = [locations[k].url for k in STORAGES]
    results = check_checkpoints(
        urls,
        kafka_config={"bootstrap.servers": kafka.bootstrap},
        s3_options=s3.options,
        webhdfs_options={"url": hdfs.webhdfs_url},
    )
    assert [r.error for r in results] == [None, None, None]
    rows = [partition_rows(r) for r in results]
    assert rows[0] == rows[1] == rows[2]
    assert [r.report.total_lag for r in results] == [12, 12, 12]
    # Three queries (three ids) that planned the same batches.
    assert len({r.report.query_id for r in results}) == 3
    assert len({r.report.committed_batch_id for r in results}) == 1
    assert len({tuple(h.batch_id for h in r.report.history) for r in results}) == 1


@pytest.mark.parametrize("kind", STORAGES)
def test_a_copied_checkpoint_is_the_same_micro_batch_job(stopped, kafka, kind):
    """A copy on the same store (as `aws s3 sync`, `distcp` or `cp -r` make: every file written
    at copy time, each offsets file long after its batch time and its commit right after it)
    is the same micro-batch job with the same numbers, never taken for a real-time query
    (whose files have that shape: a stopped copy then read OK)."""
    original = stopped["locations"][kind]
    storage = Session(**original.options).storage(original.url)
    copy = Location(f"{original.url}-copy", original.options)
    for relative, _size in sorted(storage.walk(original.url).items()):
        if relative and not relative.endswith("/"):
            storage.write_atomic(
                f"{copy.url}/{relative}", storage.read(f"{original.url}/{relative}"), overwrite=True
            )
    first, second = original.check(kafka), copy.check(kafka)
    assert second.report is not None and first.report is not None
    assert (first.report.trigger, second.report.trigger) == ("micro-batch", "micro-batch")
    assert second.report.real_time is None
    assert partition_rows(second) == partition_rows(first)
    aged = {"max_commit_age_seconds": 0.1}
    assert copy.check(kafka, thresholds=aged).verdict.health is Health.STOPPED


# -- a slow batch in flight on every storage -------------------------------------------------


@pytest.mark.parametrize("kind", STORAGES)
def test_in_flight_batch_on_storage(spark, kafka, request, kind):
    topic = kafka.create_topic(f"flight-{kind}-{uuid.uuid4().hex[:6]}", partitions=2)
    kafka.produce(topic, 8)
    first = kafka.end_offsets(topic)
    location = make_location(kind, request, "flight")
    release = threading.Event()

    def slow(_df: Any, batch_id: int) -> None:
        if batch_id >= 1:
            release.wait(90)

    df = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
    query = jobs.start_query(
        df,
        location.url,
        sink="foreachBatch",
        foreach_batch=slow,
        trigger={"processingTime": "1 second"},
    )
    try:
        jobs.wait_until(lambda: 0 in location.state().commit_ids, 90, "batch 0 committed")
        kafka.produce(topic, 6, start=8)
        planned = kafka.end_offsets(topic)
        jobs.wait_until(lambda: 1 in location.state().offsets_ids, 60, "batch 1 planned")
        time.sleep(1.2)
        result = location.check(kafka, thresholds={"max_in_flight_seconds": 1})
        report = result.report
        assert report.committed_batch_id == 0
        assert report.in_flight is not None and report.in_flight.batch_id == 1
        assert report.in_flight.planned_offsets == {"0": {topic: planned}}
        assert report.in_flight.planned_records == 6
        assert report.in_flight.age_seconds >= 1.0
        assert result.verdict.health is Health.STALLED, result.verdict
        assert [(p.partition, p.committed_offset, p.planned_offset, p.lag) for p in
                report.partitions()] == [
            (p, first[p], planned[p], planned[p] - first[p]) for p in (0, 1)
        ]  # fmt: skip
        assert report.total_lag == 6
        release.set()
        jobs.wait_until(lambda: 1 in location.state().commit_ids, 60, "batch 1 committed")
        done = location.check(kafka)
        assert done.report.total_lag == 0 and done.verdict.health is Health.OK
    finally:
        release.set()
        query.stop()
