"""Lag of REAL Spark queries on the REAL broker, checked exactly against ground truth.

Every checkpoint here is written by a PySpark query reading the test-bed Kafka. The numbers of
`monitor.check_checkpoint` are compared with truth obtained independently of the package:

- committed offsets: parsed by hand from the newest ``commits/N`` and its ``offsets/N`` on disk;
- log end / start: the broker's own ListOffsets (``kafka.end_offsets``);
- lag of a stopped query: the records a plain confluent_kafka consumer reads from the committed
  offsets to the end of each partition (``jobs.count_from``), or the rows Spark itself reads when
  the query is restarted on the same checkpoint.

Checkpoints are local here; ``test_lag_storage.py`` runs the core scenarios on S3 and HDFS.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.monitor import CheckResult, check_checkpoint, check_checkpoints
from airflow_sparklag.monitor import check as monitor_check
from airflow_sparklag.session import Session
from airflow_sparklag.storage import open_storage
from testbed import jobs
from tests.first_check import status_at_defaults

pytestmark = pytest.mark.testbed

Offsets = dict[str, dict[int, int]]  # topic -> partition -> offset


# -- ground truth, independent of the package -----------------------------------------------------


def _ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def disk_offsets(checkpoint: Path, batch_id: int) -> dict[str, Offsets | None]:
    """source id -> Kafka offsets (None for a non-Kafka source) of offsets/<batch_id>."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().split("\n")
    result: dict[str, Offsets | None] = {}
    for index, line in enumerate(lines[2:]):
        if lines[0] == "v2":
            source_id, _, raw = line.partition(":")
        else:
            source_id, raw = str(index), line
        value = json.loads(raw) if raw != "-" else None
        if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            result[source_id] = {t: {int(p): o for p, o in ps.items()} for t, ps in value.items()}
        else:
            result[source_id] = None
    return result


def disk_committed(checkpoint: Path) -> tuple[int, dict[str, Offsets | None]]:
    """(C, offsets of batch C) for C = the newest commits/N."""
    newest = _ids(checkpoint / "commits")[-1]
    return newest, disk_offsets(checkpoint, newest)


def merged(sources: dict[str, Offsets | None]) -> Offsets:
    out: Offsets = {}
    for offsets in sources.values():
        for topic, parts in (offsets or {}).items():
            out.setdefault(topic, {}).update(parts)
    return out


def ends(kafka: Any, *topics: str) -> Offsets:
    return {t: kafka.end_offsets(t) for t in topics}


# -- helpers --------------------------------------------------------------------------------------


def check(kafka: Any, location: str | Path, **kwargs: Any) -> CheckResult:
    return check_checkpoint(
        str(location), kafka_config={"bootstrap.servers": kafka.bootstrap}, **kwargs
    )


def by_partition(result: CheckResult) -> dict[tuple[str, int], Any]:
    assert result.report is not None
    return {(p.topic, p.partition): p for p in result.report.partitions()}


def assert_exact(
    result: CheckResult, kafka: Any, committed: Offsets, *, read_committed: bool = False
) -> dict[tuple[str, int], int]:
    """Every partition: committed offset as on disk, log end as the broker says, and lag equal
    to what a plain consumer reads from the committed offset. Returns the consumer counts."""
    parts = by_partition(result)
    truth_end = ends(kafka, *committed)
    counted = jobs.count_from(kafka.bootstrap, committed, read_committed=read_committed)
    for topic, offsets in committed.items():
        assert {p for t, p in parts if t == topic} == set(truth_end[topic]), topic
        for partition, offset in offsets.items():
            p = parts[(topic, partition)]
            assert p.committed_offset == offset, (topic, partition)
            assert p.log_end_offset == truth_end[topic][partition], (topic, partition)
            assert not (p.new_partition or p.data_loss or p.ahead_of_log), (topic, partition)
            assert p.lag == truth_end[topic][partition] - offset, (topic, partition)
            assert p.lag == counted[(topic, partition)], (topic, partition)
    assert result.report is not None
    assert result.report.total_lag == sum(counted.values())
    return counted


@contextlib.contextmanager
def sql_conf(spark: Any, **settings: str) -> Iterator[None]:
    """Set SQL confs on the shared session; restore the previous values afterwards."""
    keys = {k.replace("__", "."): v for k, v in settings.items()}
    previous = {k: spark.conf.get(k, None) for k in keys}
    try:
        for key, value in keys.items():
            spark.conf.set(key, value)
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def uid() -> str:
    return uuid.uuid4().hex[:8]


def values(df: Any) -> Any:
    return df.selectExpr("CAST(value AS STRING) AS v")


# -- one topic, many partitions; stopped query ----------------------------------------------------


@pytest.fixture(scope="module")
def many(spark, kafka, tmp_path_factory):  # type: ignore[no-untyped-def]
    """8 partitions, consumed with availableNow; then 40 more records while the query is down."""
    topic = kafka.create_topic(f"many-{uid()}", partitions=8)
    kafka.produce(topic, 80)
    ck = tmp_path_factory.mktemp("many") / "ck"
    jobs.run_available_now(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]), str(ck))
    at_stop = ends(kafka, topic)
    caught_up = check(kafka, ck)
    kafka.produce(topic, 40, start=80)
    return {"topic": topic, "ck": ck, "at_stop": at_stop, "caught_up": caught_up}


def test_many_partitions_exact(many, kafka):
    topic, ck = many["topic"], many["ck"]
    batch_id, on_disk = disk_committed(ck)
    assert merged(on_disk) == many["at_stop"]
    # Caught up right after the run: lag 0 everywhere, healthy.
    caught_up = many["caught_up"]
    assert caught_up.report.total_lag == 0
    assert caught_up.verdict.health is Health.OK
    assert len(list(caught_up.report.partitions())) == 8

    result = check(kafka, ck)
    counted = assert_exact(result, kafka, merged(on_disk))
    report = result.report
    assert report.total_lag == 40 == sum(counted.values())
    assert report.committed_batch_id == batch_id
    assert report.in_flight is None
    assert [s.source_id for s in report.sources] == ["0"]
    (topic_lag,) = report.sources[0].topics
    assert topic_lag.topic == topic and topic_lag.lag == 40
    worst = max(counted.values())
    assert report.max_lag == worst == topic_lag.max_lag
    assert counted[(topic, report.max_lag_partition)] == worst

    # The reader, used directly, agrees with the files.
    state = CheckpointReader(open_storage(str(ck)), str(ck)).read()
    assert state.committed_batch_id == batch_id
    assert state.offsets_ids == tuple(_ids(ck / "offsets"))
    assert state.commit_ids == tuple(_ids(ck / "commits"))
    assert state.committed.sources[0].kafka == many["at_stop"]


def test_exact_time_lag_is_the_age_of_the_first_unread_record(many, kafka):
    result = check(kafka, many["ck"], exact_time_lag=True)
    report = result.report
    assert report.time_lag_mode == "exact"
    lagging = {(p.topic, p.partition): p.committed_offset for p in report.partitions() if p.lag > 0}
    assert lagging
    positions: Offsets = {}
    for (topic, partition), offset in lagging.items():
        positions.setdefault(topic, {})[partition] = offset
    truth = jobs.timestamps_at(kafka.bootstrap, positions)
    for p in report.partitions():
        if p.lag == 0:
            assert p.lag_seconds == 0.0
        else:
            expected = report.generated_at - truth[(p.topic, p.partition)] / 1000.0
            assert p.lag_seconds == pytest.approx(expected, abs=1e-3)
    assert report.max_lag_seconds == max(p.lag_seconds for p in report.partitions())

    # Estimate mode: the first unread record was written after the batch that reached the
    # committed offset and before the live fetch. A number only when that pins it down to within
    # 2 s / 10 % of its age (and then it is that close to the truth); else unknown, with why.
    # (The imminent-loss warning off: at defaults it reads the timestamps of records the
    # estimate cannot date, to give their time to data loss.)
    estimate = check(kafka, many["ck"], thresholds={"min_time_to_loss_ratio": 0}).report
    assert estimate.time_lag_mode == "estimate"
    for p in estimate.partitions():
        if p.lag == 0:
            continue
        age = estimate.generated_at - truth[(p.topic, p.partition)] / 1000.0
        if p.lag_seconds is None:
            assert p.lag_seconds_unknown, p
        else:
            assert abs(p.lag_seconds - age) <= max(2.0, 0.1 * age), (p, age)


def test_stopped_query_is_stopped_past_commit_age(many, kafka):
    time.sleep(1.1)
    result = check(kafka, many["ck"], thresholds={"max_commit_age_seconds": 1})
    assert result.report.commit_age_seconds > 1
    assert result.verdict.health is Health.STOPPED, result.verdict
    # Without the threshold a single batch never decides STOPPED by itself; once its records
    # waited past STOPPED_MIN_IDLE_SECONDS it is not OK either (issue 25): UNKNOWN, and why.
    later = check(kafka, many["ck"], now=time.time() + 3600).verdict
    assert (later.health, later.rule) == (Health.UNKNOWN, "short_history"), later
    # Same age but nothing to read: not stopped (the caught-up report of the fixture).
    from airflow_sparklag.health import evaluate
    from airflow_sparklag.model.verdict import Thresholds

    caught_up = many["caught_up"].report
    verdict = evaluate(caught_up, Thresholds(max_commit_age_seconds=1), now=time.time())
    assert verdict.health is Health.OK


# -- several topics in one subscribe; subscribePattern --------------------------------------------


@pytest.fixture(scope="module")
def multi(spark, kafka, tmp_path_factory):  # type: ignore[no-untyped-def]
    tag = uid()
    a = kafka.create_topic(f"multi-{tag}-a", partitions=2)
    b = kafka.create_topic(f"multi-{tag}-b", partitions=3)
    c = kafka.create_topic(f"multi-{tag}-c", partitions=1)
    for name, n in ((a, 20), (b, 30), (c, 5)):
        kafka.produce(name, n)
    ck = tmp_path_factory.mktemp("multi") / "ck"
    jobs.run_available_now(jobs.kafka_stream(spark, kafka.bootstrap, topics=[a, b, c]), str(ck))
    at_stop = ends(kafka, a, b, c)
    kafka.produce(a, 11, start=100)
    kafka.produce(c, 4, partition=0, start=100)
    return {"topics": (a, b, c), "ck": ck, "at_stop": at_stop}


def test_several_topics_in_one_subscribe(multi, kafka):
    a, b, c = multi["topics"]
    _, on_disk = disk_committed(multi["ck"])
    assert merged(on_disk) == multi["at_stop"]
    result = check(kafka, multi["ck"])
    assert_exact(result, kafka, merged(on_disk))
    (source,) = result.report.sources
    lags = {t.topic: t.lag for t in source.topics}
    assert lags == {a: 11, b: 0, c: 4}
    assert source.lag == 15 == result.report.total_lag


@pytest.fixture(scope="module")
def pattern(spark, kafka, tmp_path_factory):  # type: ignore[no-untyped-def]
    tag = uid()
    x = kafka.create_topic(f"pat-{tag}-x", partitions=2)
    y = kafka.create_topic(f"pat-{tag}-y", partitions=1)
    kafka.create_topic(f"other-{tag}-z", partitions=1)  # must not be matched
    kafka.produce(x, 10)
    kafka.produce(y, 3)
    ck = tmp_path_factory.mktemp("pattern") / "ck"
    df = jobs.kafka_stream(spark, kafka.bootstrap, pattern=f"pat-{tag}-.*")
    jobs.run_available_now(df, str(ck))
    kafka.produce(x, 6, start=10)
    kafka.produce(y, 2, start=10)
    return {"topics": (x, y), "ck": ck}


def test_subscribe_pattern(pattern, kafka):
    x, y = pattern["topics"]
    _, on_disk = disk_committed(pattern["ck"])
    assert set(merged(on_disk)) == {x, y}
    result = check(kafka, pattern["ck"])
    assert_exact(result, kafka, merged(on_disk))
    assert {t.topic: t.lag for t in result.report.sources[0].topics} == {x: 6, y: 2}


# -- two Kafka sources; Kafka + a non-Kafka source ------------------------------------------------


@pytest.fixture(scope="module")
def two_sources(spark, kafka, tmp_path_factory):  # type: ignore[no-untyped-def]
    tag = uid()
    x = kafka.create_topic(f"union-{tag}-x", partitions=2)
    y = kafka.create_topic(f"union-{tag}-y", partitions=3)
    kafka.produce(x, 12)
    kafka.produce(y, 9)
    ck = tmp_path_factory.mktemp("union") / "ck"
    left = values(jobs.kafka_stream(spark, kafka.bootstrap, topics=[x]))
    right = values(jobs.kafka_stream(spark, kafka.bootstrap, topics=[y]))
    jobs.run_available_now(left.union(right), str(ck))
    kafka.produce(x, 5, start=50)
    kafka.produce(y, 7, start=50)
    return {"topics": (x, y), "ck": ck}


def test_two_kafka_sources_in_one_query(two_sources, kafka):
    x, y = two_sources["topics"]
    _, on_disk = disk_committed(two_sources["ck"])
    assert set(on_disk) == {"0", "1"} and set(on_disk["0"]) == {x} and set(on_disk["1"]) == {y}
    result = check(kafka, two_sources["ck"])
    assert_exact(result, kafka, merged(on_disk))
    report = result.report
    assert [(s.source_id, s.is_kafka, s.lag) for s in report.sources] == [
        ("0", True, 5),
        ("1", True, 7),
    ]
    assert [t.topic for t in report.sources[0].topics] == [x]
    assert report.total_lag == 12


def test_kafka_and_rate_source(spark, kafka, tmp_path):
    topic = kafka.create_topic(f"rate-{uid()}", partitions=2)
    kafka.produce(topic, 14)
    target = ends(kafka, topic)
    ck = tmp_path / "ck"
    kafka_df = values(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]))
    rate_df = spark.readStream.format("rate").option("rowsPerSecond", "5").load()
    query = jobs.start_query(kafka_df.union(values(rate_df)), str(ck))
    try:

        def kafka_done() -> bool:
            commits = _ids(ck / "commits")
            return bool(commits) and disk_offsets(ck, commits[-1]).get("0") == target

        jobs.wait_until(kafka_done, 90, "Kafka source committed to the end")
    finally:
        query.stop()
    kafka.produce(topic, 9, start=14)
    _, on_disk = disk_committed(ck)
    assert on_disk["0"] == target and on_disk["1"] is None  # the rate offset is a number
    result = check(kafka, ck)
    assert_exact(result, kafka, on_disk["0"])
    sources = {s.source_id: s for s in result.report.sources}
    assert sources["1"].is_kafka is False and sources["1"].kind == "other"
    assert sources["1"].topics == () and sources["1"].lag == 0
    assert sources["0"].lag == 9 == result.report.total_lag
    assert result.verdict.health is not Health.UNKNOWN  # Kafka source judged; rate skipped


# -- continuous trigger ---------------------------------------------------------------------------


def test_continuous_trigger(spark, kafka, tmp_path):
    topic = kafka.create_topic(f"cont-{uid()}", partitions=2)
    kafka.produce(topic, 16)
    target = ends(kafka, topic)
    ck = tmp_path / "ck"
    df = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
    query = jobs.start_query(df, str(ck), trigger={"continuous": "1 second"})
    try:

        def reached() -> bool:
            commits = _ids(ck / "commits")
            return bool(commits) and merged(disk_offsets(ck, commits[-1])) == target

        jobs.wait_until(reached, 90, "continuous epochs reached the end")
    finally:
        query.stop()
    _, on_disk = disk_committed(ck)
    kafka.produce(topic, 10, start=16)
    # Continuous mode writes an empty metadata line.
    assert (ck / "offsets" / str(_ids(ck / "offsets")[-1])).read_text().split("\n")[1] == ""
    result = check(kafka, ck)
    assert result.report.continuous is True
    counted = assert_exact(result, kafka, merged(on_disk))
    assert result.report.total_lag == 10
    assert result.report.committed_at is not None  # from the commit file, no batch timestamp
    first = status_at_defaults(str(ck), kafka.bootstrap)  # the first check, at defaults
    assert first.lags() == counted and first.asks_for() == set(), first.messages()


# Async progress tracking (ids with gaps, offsets ahead of commits): test_async_progress.py.


# -- offsets v2 with named sources ----------------------------------------------------------------


def test_offsets_v2_named_sources(spark, kafka, tmp_path):
    tag = uid()
    orders = kafka.create_topic(f"v2-{tag}-orders", partitions=2)
    payments = kafka.create_topic(f"v2-{tag}-payments", partitions=1)
    kafka.produce(orders, 10)
    kafka.produce(payments, 4)
    ck = tmp_path / "ck"
    with sql_conf(
        spark,
        **{
            "spark.sql.streaming.offsetLog.formatVersion": "2",
            "spark.sql.streaming.queryEvolution.enableSourceEvolution": "true",
        },
    ):
        left = values(jobs.kafka_stream(spark, kafka.bootstrap, topics=[orders], name="orders"))
        right = values(
            jobs.kafka_stream(spark, kafka.bootstrap, topics=[payments], name="payments")
        )
        jobs.run_available_now(left.union(right), str(ck))
    assert spark.conf.get("spark.sql.streaming.offsetLog.formatVersion", None) in (None, "1")
    kafka.produce(orders, 3, start=10)
    kafka.produce(payments, 6, start=10)

    newest = _ids(ck / "offsets")[-1]
    assert (ck / "offsets" / str(newest)).read_text().startswith("v2\n")
    assert sorted(p.name for p in (ck / "sources").iterdir()) == ["orders", "payments"]
    _, on_disk = disk_committed(ck)
    assert set(on_disk) == {"orders", "payments"}
    state = CheckpointReader(open_storage(str(ck)), str(ck)).read()
    assert state.committed.version == 2
    result = check(kafka, ck)
    assert_exact(result, kafka, merged(on_disk))
    lags = {s.source_id: s.lag for s in result.report.sources}
    assert lags == {"orders": 3, "payments": 6}
    # A named source is mapped to its cluster by its name (here the same broker, named apart).
    port = kafka.bootstrap.rsplit(":", 1)[1]
    with Session(
        kafka_config={"bootstrap.servers": kafka.bootstrap},
        source_kafka={"payments": {"bootstrap.servers": f"localhost:{port}"}},
    ) as session:
        mapped = monitor_check(session, str(ck))
    clusters = {s.source_id: s.cluster for s in mapped.report.sources}
    assert clusters == {"orders": None, "payments": f"localhost:{port}"}, clusters
    assert {s.source_id: s.lag for s in mapped.report.sources} == lags


# -- commit log v2: state checkpoint format 2 (state unique ids) ---------------------------------


def test_commit_log_v2_with_state_unique_ids(spark, kafka, tmp_path):
    """A stateful query (RocksDB) with stateStore.checkpointFormatVersion=2 writes commits v2
    with ``stateUniqueIds``: the committed offsets are exact and the verdict is not false."""
    topic = kafka.create_topic(f"cv2-{uid()}", partitions=2)
    kafka.produce(topic, 12)
    ck = tmp_path / "ck"
    provider = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    with sql_conf(
        spark,
        **{
            "spark.sql.streaming.stateStore.providerClass": provider,
            "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
            "spark.sql.shuffle.partitions": "2",
        },
    ):
        # streaming deduplication: a stateful operator that append mode allows
        distinct = values(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]))
        query = jobs.start_query(
            distinct.dropDuplicates(["v"]), str(ck), trigger={"availableNow": True}
        )
        try:
            assert query.awaitTermination(180), "the stateful availableNow run did not finish"
            assert query.exception() is None, query.exception()
        finally:
            jobs.stop_quietly(query)
    kafka.produce(topic, 5, start=100)
    newest = _ids(ck / "commits")[-1]
    text = (ck / "commits" / str(newest)).read_text()
    assert text.startswith("v2\n") and "stateUniqueIds" in text, text[:300]
    _, on_disk = disk_committed(ck)
    result = check(kafka, ck)
    assert_exact(result, kafka, merged(on_disk))
    assert result.report.total_lag == 5
    assert result.verdict.health is Health.OK, result.verdict


# -- short history: minBatchesToRetain=2 -----------------------------------------------------------


def test_tiny_min_batches_to_retain(spark, kafka, tmp_path):
    topic = kafka.create_topic(f"retain-{uid()}", partitions=2)
    ck = tmp_path / "ck"
    with sql_conf(spark, **{"spark.sql.streaming.minBatchesToRetain": "2"}):
        df = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
        query = jobs.start_query(df, str(ck), trigger={"processingTime": "300 milliseconds"})
    try:
        for round_ in range(6):
            kafka.produce(topic, 5, start=round_ * 5)
            target = ends(kafka, topic)

            def reached(target: Offsets = target) -> bool:
                commits = _ids(ck / "commits")
                return bool(commits) and merged(disk_offsets(ck, commits[-1])) == target

            jobs.wait_until(reached, 60, f"round {round_} committed")
    finally:
        query.stop()
    kafka.produce(topic, 7, start=100)
    offsets_ids = _ids(ck / "offsets")
    newest_commit, on_disk = disk_committed(ck)
    # At least 6 batches ran; Spark purged all but the last few (purge is asynchronous, so a
    # strict count would race).
    assert newest_commit >= 5 and offsets_ids[0] > 0, offsets_ids
    assert len(offsets_ids) < newest_commit + 1, offsets_ids
    result = check(kafka, ck, history=10)
    retained = [b for b in _ids(ck / "commits") if b in offsets_ids]
    assert [h.batch_id for h in result.report.history] == retained
    assert result.report.history[-1].batch_id == result.report.committed_batch_id
    assert_exact(result, kafka, merged(on_disk))
    assert result.report.total_lag == 7


# -- partitions added while the query runs --------------------------------------------------------


def test_partitions_added_while_running(spark, kafka, tmp_path):
    topic = kafka.create_topic(f"grow-{uid()}", partitions=2)
    kafka.produce(topic, 10)
    ck = tmp_path / "ck"
    # A long trigger: batch 0 runs at once, the next planning (which would discover the new
    # partition) is 120 s away.
    df = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
    query = jobs.start_query(df, str(ck), trigger={"processingTime": "120 seconds"})
    try:
        jobs.wait_for_batches(query, 1)
        kafka.add_partitions(topic, 3)
        kafka.produce(topic, 7, partition=2)
        jobs.delete_records(kafka.admin(), topic, {2: 2})  # log start of the new partition: 2
        result = check(kafka, ck)
        assert query.isActive
    finally:
        query.stop()
    _, on_disk = disk_committed(ck)
    assert set(merged(on_disk)[topic]) == {0, 1}
    parts = by_partition(result)
    new = parts[(topic, 2)]
    assert new.new_partition and new.committed_offset is None
    assert (new.log_start_offset, new.log_end_offset) == (2, 7)
    assert new.lag == 5 == jobs.count_from(kafka.bootstrap, {topic: {2: 0}})[(topic, 2)]
    assert result.report.total_lag == 5
    for p in (0, 1):
        assert parts[(topic, p)].lag == 0 and not parts[(topic, p)].new_partition

    # Spark, restarted on the checkpoint, reads exactly that: the new partition from its start.
    restart = jobs.kafka_stream(
        spark, kafka.bootstrap, topics=[topic], options={"failOnDataLoss": "false"}
    )
    assert jobs.run_available_now_rows(restart, str(ck)) == 5
    after = check(kafka, ck)
    assert after.report.total_lag == 0
    assert by_partition(after)[(topic, 2)].committed_offset == 7


# -- records deleted below the committed offset ---------------------------------------------------


def test_records_deleted_beyond_committed_offset(spark, kafka, tmp_path):
    topic = kafka.create_topic(f"loss-{uid()}", partitions=2)
    kafka.produce(topic, 10, partition=0)
    kafka.produce(topic, 10, partition=1)
    ck = tmp_path / "ck"
    jobs.run_available_now(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]), str(ck))
    kafka.produce(topic, 10, partition=0, start=10)
    kafka.produce(topic, 3, partition=1, start=10)
    jobs.delete_records(kafka.admin(), topic, {0: 14})  # 4 records past the committed 10
    _, on_disk = disk_committed(ck)
    assert merged(on_disk) == {topic: {0: 10, 1: 10}}

    result = check(kafka, ck)
    assert result.verdict.health is Health.DATA_LOSS, result.verdict
    parts = by_partition(result)
    lost = parts[(topic, 0)]
    assert lost.data_loss and lost.records_lost == 4
    assert (lost.committed_offset, lost.log_start_offset, lost.log_end_offset) == (10, 14, 20)
    readable = jobs.count_from(kafka.bootstrap, {topic: {0: 10, 1: 10}})
    # The core counts lag from the committed offset (20 - 10), lost records included: what is
    # still readable plus what was deleted unread.
    assert lost.lag == 10 == readable[(topic, 0)] + lost.records_lost
    ok = parts[(topic, 1)]
    assert not ok.data_loss and ok.lag == 3 == readable[(topic, 1)]
    assert [(r.topic, r.partition) for r in result.verdict.partitions] == [(topic, 0)]

    # Spark (failOnDataLoss=false) skips the lost records and reads only what is readable.
    restart = jobs.kafka_stream(
        spark, kafka.bootstrap, topics=[topic], options={"failOnDataLoss": "false"}
    )
    assert jobs.run_available_now_rows(restart, str(ck)) == sum(readable.values())
    assert check(kafka, ck).verdict.health is Health.OK


# -- transactional producer + read_committed -------------------------------------------------------


def _high_watermark(kafka: Any, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"hw-{uid()}"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[1])
    finally:
        consumer.close()


def test_read_committed_against_last_stable_offset(spark, kafka, tmp_path):
    topic = kafka.create_topic(f"tx-{uid()}", partitions=2)
    producer = jobs.transactional_producer(kafka.bootstrap, f"tx-{uid()}")
    jobs.produce_in_transaction(producer, topic, 10, partition=0)
    jobs.produce_in_transaction(producer, topic, 6, partition=1)
    jobs.produce_in_transaction(producer, topic, 3, partition=1, commit=False)  # aborted
    jobs.produce_in_transaction(producer, topic, 5, partition=0, commit=None)  # stays open
    ck = tmp_path / "ck"
    options = {"kafka.isolation.level": "read_committed"}
    try:
        df = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic], options=options)
        jobs.run_available_now(df, str(ck))
        _, on_disk = disk_committed(ck)
        # p0: 10 records + commit marker = LSO 11 (the open transaction starts there), HWM 16.
        # p1: 6 records + marker, 3 aborted + marker: HWM = LSO = 11.
        assert merged(on_disk) == {topic: {0: 11, 1: 11}}
        committed = check(kafka, ck, read_committed=True)
        parts = by_partition(committed)
        p0 = parts[(topic, 0)]
        assert (p0.committed_offset, p0.last_stable_offset, p0.log_end_offset) == (11, 11, 16)
        assert p0.lag == 0 and parts[(topic, 1)].lag == 0
        assert committed.report.total_lag == 0 and committed.report.read_committed
        assert committed.verdict.health is Health.OK
        # Against the high watermark the open transaction looks like lag.
        uncommitted = check(kafka, ck, read_committed=False)
        assert by_partition(uncommitted)[(topic, 0)].lag == 5
    finally:
        producer.commit_transaction(30)
    # Committed now: 5 records + a marker = 6 offsets, 5 of them readable records. The
    # coordinator writes the marker after EndTxn has answered: wait until it is in the log.
    jobs.wait_until(lambda: _high_watermark(kafka, topic, 0) == 17, 30, "the commit marker")
    result = check(kafka, ck, read_committed=True)
    p0 = by_partition(result)[(topic, 0)]
    assert (p0.last_stable_offset, p0.log_end_offset, p0.lag) == (17, 17, 6)
    readable = jobs.count_from(kafka.bootstrap, {topic: {0: 11, 1: 11}}, read_committed=True)
    assert readable == {(topic, 0): 5, (topic, 1): 0}
    rows = jobs.run_available_now_rows(
        jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic], options=options), str(ck)
    )
    assert rows == 5
    final = check(kafka, ck, read_committed=True)
    assert final.report.total_lag == 0
    assert by_partition(final)[(topic, 0)].committed_offset == 17


# -- a slow batch: in flight, then STALLED ---------------------------------------------------------


def test_slow_foreach_batch_in_flight_and_stalled(spark, kafka, tmp_path):
    topic = kafka.create_topic(f"slow-{uid()}", partitions=2)
    kafka.produce(topic, 9)
    first = ends(kafka, topic)
    ck = tmp_path / "ck"
    release = threading.Event()

    def slow(_df: Any, batch_id: int) -> None:
        if batch_id >= 1:
            release.wait(90)

    df = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
    query = jobs.start_query(
        df, str(ck), sink="foreachBatch", foreach_batch=slow, trigger={"processingTime": "1 second"}
    )
    try:
        jobs.wait_until(lambda: 0 in _ids(ck / "commits"), 90, "batch 0 committed")
        assert merged(disk_committed(ck)[1]) == first
        kafka.produce(topic, 6, start=9)
        planned = ends(kafka, topic)
        jobs.wait_until(lambda: 1 in _ids(ck / "offsets"), 60, "batch 1 planned")
        time.sleep(1.5)
        result = check(kafka, ck, thresholds={"max_in_flight_seconds": 1})
        assert 1 not in _ids(ck / "commits")
        report = result.report
        assert report.committed_batch_id == 0
        flight = report.in_flight
        assert flight is not None and flight.batch_id == 1
        assert flight.planned_offsets == {"0": planned}
        assert flight.planned_records == 6
        assert flight.age_seconds is not None and flight.age_seconds >= 1.0
        assert result.verdict.health is Health.STALLED, result.verdict
        for (t, p), part in by_partition(result).items():
            assert part.committed_offset == first[t][p]
            assert part.planned_offset == planned[t][p]
            assert part.lag == planned[t][p] - first[t][p]
        assert report.total_lag == 6

        release.set()
        jobs.wait_until(lambda: 1 in _ids(ck / "commits"), 60, "batch 1 committed")
        done = check(kafka, ck, thresholds={"max_in_flight_seconds": 1})
        assert done.report.in_flight is None or done.report.in_flight.batch_id > 1
        assert done.report.total_lag == 0
        assert done.verdict.health is Health.OK
    finally:
        release.set()
        query.stop()


# -- many checkpoints in one call ------------------------------------------------------------------


def test_check_checkpoints_many_at_once(many, multi, pattern, two_sources, kafka, tmp_path):
    fixtures = (many, multi, pattern, two_sources)
    missing = str(tmp_path / "no-such-checkpoint")
    locations = [str(f["ck"]) for f in fixtures] + [missing]
    results = check_checkpoints(locations, kafka_config={"bootstrap.servers": kafka.bootstrap})
    assert [r.location for r in results] == locations
    for fixture, result in zip(fixtures, results, strict=False):
        single = check(kafka, fixture["ck"])
        assert result.error is None
        assert [(p.topic, p.partition, p.committed_offset, p.log_end_offset, p.lag)
                for p in result.report.partitions()] == [
            (p.topic, p.partition, p.committed_offset, p.log_end_offset, p.lag)
            for p in single.report.partitions()
        ]  # fmt: skip
        assert_exact(result, kafka, merged(disk_committed(fixture["ck"])[1]))
    failed = results[-1]
    assert failed.report is None and failed.verdict.health is Health.UNKNOWN
    assert "CheckpointNotFound" in failed.error and missing in failed.error


# -- topic deleted, then recreated ----------------------------------------------------------------


def test_topic_deleted_then_recreated(spark, kafka, tmp_path):
    topic = kafka.create_topic(f"gone-{uid()}", partitions=2)
    kafka.produce(topic, 10, partition=0)
    kafka.produce(topic, 10, partition=1)
    ck = tmp_path / "ck"
    jobs.run_available_now(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]), str(ck))
    assert merged(disk_committed(ck)[1]) == {topic: {0: 10, 1: 10}}

    kafka.admin().delete_topics([topic], operation_timeout=20)[topic].result(timeout=30)
    jobs.wait_until(
        lambda: topic not in kafka.admin().list_topics(timeout=5).topics, 30, "topic deleted"
    )
    gone = check(kafka, ck)
    assert gone.report.missing_topics == (topic,)
    (topic_lag,) = gone.report.sources[0].topics
    # Nothing to measure against: unknown with the reason, never 0.
    assert topic_lag.missing and topic_lag.lag is None and topic_lag.partitions == ()
    assert topic_lag.lag_unknown == f"topic {topic} not found in the cluster"
    assert dict(topic_lag.checkpoint_offsets) == {0: 10, 1: 10}
    assert gone.verdict.health is Health.UNKNOWN and topic in gone.verdict.reason

    def recreate() -> bool:
        try:
            kafka.create_topic(topic, partitions=2)
            return True
        except Exception:  # still being deleted
            return False

    jobs.wait_until(recreate, 60, "topic recreated")
    kafka.produce(topic, 3, partition=0)
    again = check(kafka, ck)
    parts = by_partition(again)
    assert parts[(topic, 0)].ahead_of_log and parts[(topic, 0)].lag == 0
    assert (parts[(topic, 0)].committed_offset, parts[(topic, 0)].log_end_offset) == (10, 3)
    assert parts[(topic, 1)].ahead_of_log and parts[(topic, 1)].log_end_offset == 0
    assert again.verdict.health is Health.REWIND, again.verdict
