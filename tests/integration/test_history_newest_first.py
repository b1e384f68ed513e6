"""A check reads a REAL Spark checkpoint newest batch first, and judges it as a full read does.

``monitor.check`` reads offsets/C, then offsets/C-1 when the job lags, and the rest of the
history window only when a rule's declaration says it could still depend on it
(``health.reads_needed``).
Every test here builds a real PySpark query on the test-bed broker (checkpoint on local disk),
then compares the lazy check with the EAGER way (the whole window read, then judged), both at
the same instant and against the same Kafka answer: same verdict, and the same report but for
what is measured over the batches read (``history``, the rates, ``catch_up_seconds`` and each
partition's ``offset_history``). The length of the lazy report's ``history`` says which path
was taken: 2 batches (offsets/C-1 settled it) or as many as the eager report (the window).

The same Kafka answer: the time-lag estimate places a waiting record between the newest batch
and the snapshot's ``fetched_at``, so two snapshots a few milliseconds apart give (slightly)
different ages. Both checks therefore use one real snapshot, taken once from the broker
(``OneSnapshot``); record timestamps and offsets by time are asked of the broker each time.
Nothing is produced between the two checks.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_lag_scenarios import _ids, disk_offsets, ends, merged, uid

from airflow_sparklag.kafka import KafkaOffsetsClient, KafkaSnapshot
from airflow_sparklag.model.verdict import Health, Thresholds
from airflow_sparklag.monitor import CheckOptions, CheckResult, check, judge_states
from airflow_sparklag.session import Session
from testbed import jobs
from tests.unit.test_check_requests import _without_window, judged

pytestmark = pytest.mark.testbed

TRIGGER = {"processingTime": "500 milliseconds"}
PARTITIONS = 3


# -- the comparison ------------------------------------------------------------------------------


class OneSnapshot:
    """The real Kafka client, its first snapshot of each topic list kept and given again: the
    lazy and the eager check judge the same log ends at the same ``fetched_at``."""

    def __init__(self, client: KafkaOffsetsClient) -> None:
        self.client = client
        self.taken: dict[tuple[tuple[str, ...], bool], KafkaSnapshot] = {}

    def snapshot(self, topics: Any, *, read_committed: bool = False) -> KafkaSnapshot:
        key = (tuple(topics), read_committed)
        if key not in self.taken:
            self.taken[key] = self.client.snapshot(list(topics), read_committed=read_committed)
        return self.taken[key]

    def forget(self) -> None:
        """Kafka changed on purpose (records produced): the next check takes a new snapshot."""
        self.taken.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


@pytest.fixture
def pinned(kafka: Any) -> Iterator[OneSnapshot]:
    client = KafkaOffsetsClient({"bootstrap.servers": kafka.bootstrap})
    try:
        yield OneSnapshot(client)
    finally:
        client.close()


def lazy_and_eager(
    pinned: OneSnapshot, location: Path, topic: str, options: CheckOptions
) -> tuple[CheckResult, CheckResult]:
    """The default (lazy) check and the eager one, at the snapshot's instant."""
    loc = str(location)
    now = pinned.snapshot([topic], read_committed=True).fetched_at
    with Session(kafka_client=pinned) as session:  # type: ignore[arg-type]
        lazy = check(session, loc, options, now=now)
        requests = session.storage_requests
    with Session(kafka_client=pinned) as session:  # type: ignore[arg-type]
        state = session.read(loc, history=options.history_to_read)
        assert not state.unread_history
        eager = judge_states(session, {loc: state}, options, now=now)[loc]
    assert list(pinned.taken) == [((topic,), True)], "both checks judged one snapshot"
    assert lazy.report is not None and eager.report is not None
    # Local disk: LIST commits/ and offsets/, GET metadata, offsets/C, commits/C (and the
    # in-flight offsets/L), then one GET per older offsets file read.
    flight = eager.report.in_flight is not None
    assert requests == 5 + flight + len(lazy.report.history) - 1, requests
    return lazy, eager


def assert_same(lazy: CheckResult, eager: CheckResult, path: str) -> None:
    """Same verdict and numbers; ``path``: "C-1" (2 batches read) or "window" (all)."""
    assert lazy.error is None and eager.error is None
    assert lazy.report is not None and eager.report is not None
    assert lazy.verdict == eager.verdict, (lazy.verdict, eager.verdict)
    assert _without_window(lazy) == _without_window(eager)
    lazy_ids = [h.batch_id for h in lazy.report.history]
    eager_ids = [h.batch_id for h in eager.report.history]
    assert len(eager_ids) > 2, eager_ids
    if path == "C-1":
        assert lazy_ids == eager_ids[-2:], (lazy_ids, eager_ids)
    else:
        assert judged(lazy) == judged(eager)
        assert lazy_ids == eager_ids


# -- the jobs ------------------------------------------------------------------------------------


def committed_ids(ck: Path) -> list[int]:
    return _ids(ck / "commits")


def committed(ck: Path, batch_id: int | None = None) -> dict[int, int]:
    """Partition -> offset of offsets/<batch_id> (default: the newest committed batch)."""
    ids = committed_ids(ck)
    (offsets,) = merged(disk_offsets(ck, ids[-1] if batch_id is None else batch_id)).values()
    return offsets


def last_read(ck: Path) -> dict[int, int]:
    """Records the newest committed batch read, per partition (offsets/C - offsets/C-1)."""
    ids = committed_ids(ck)
    newest, before = committed(ck, ids[-1]), committed(ck, ids[-2])
    return {p: newest[p] - before.get(p, 0) for p in newest}


def wait_caught_up(ck: Path, kafka: Any, topic: str, timeout: float = 90) -> None:
    target = ends(kafka, topic)[topic]
    jobs.wait_until(
        lambda: bool(committed_ids(ck)) and committed(ck) == target,
        timeout,
        f"{ck} committed up to {target}",
    )


def steady_job(spark: Any, kafka: Any, ck: Path, topic: str, bursts: int = 6) -> None:
    """A streaming query (0.5 s trigger) fed ``bursts`` bursts of 24, 27, 30, ... records,
    each consumed before the next (bursts of one size would look capped by a rate limit);
    stopped caught up (nothing in flight)."""
    query = jobs.start_query(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]),
                             str(ck), trigger=TRIGGER)  # fmt: skip
    try:
        produced = 0
        for burst in range(bursts):
            produced += kafka.produce(topic, 24 + 3 * burst, start=produced)
            wait_caught_up(ck, kafka, topic)
    finally:
        jobs.stop_quietly(query)
    assert len(committed_ids(ck)) >= bursts


def grew_at_every_batch(ck: Path, lags: dict[int, int], history: int = 10) -> list[int]:
    """Truth from the files for the trend rule: the lagging partitions whose reads (offsets/N
    - offsets/N-1 over the newest ``history`` committed batches, at least 3 of them, as
    ``Thresholds.min_window``) rose at every batch and on to the live lag."""
    offsets = [committed(ck, b) for b in committed_ids(ck)[-history:]]
    grew = []
    for p, lag in sorted(lags.items()):
        reads = [b[p] - a[p] for a, b in itertools.pairwise(offsets) if p in a and p in b]
        if lag > 0 and len(reads) >= 3 and all(y > x for x, y in itertools.pairwise([*reads, lag])):
            grew.append(p)
    return grew


def assert_verdict(result: CheckResult, grew: list[int]) -> None:
    """OK, or LAGGING by the trend rule on exactly the partitions ``grew`` names."""
    if not grew:
        assert result.verdict.health is Health.OK, result.verdict
        return
    assert result.verdict.health is Health.LAGGING, result.verdict
    assert "grew at every batch" in result.verdict.reason, result.verdict
    assert [ref.partition for ref in result.verdict.partitions] == grew


def produce_per_partition(kafka: Any, topic: str, counts: dict[int, int]) -> None:
    for partition, n in counts.items():
        if n > 0:
            kafka.produce(topic, n, partition=partition, prefix=f"late{partition}")


def new_topic(kafka: Any, name: str) -> str:
    return kafka.create_topic(f"{name}-{uid()}", partitions=PARTITIONS)


# -- 1. a steady stream, a few records waiting ---------------------------------------------------


def test_steady_stream_with_a_few_records_waiting_is_settled_by_offsets_c_minus_1(
    spark, kafka, pinned, tmp_path
):
    """A 0.5 s-trigger stream of 6+ batches, stopped; then fewer records per partition than
    its newest batch read (only on partitions it read). No offset went back, no rate limit
    possible, lag not above the newest batch's read, not idle: offsets/C-1 settles it, for
    the default options, a records threshold, a seconds threshold, exact time lag, a commit
    age limit, a 2-batch trend window and a 3-batch history; the verdict and every
    partition's numbers are those of the full read."""
    topic, ck = new_topic(kafka, "steady-few"), tmp_path / "ck"
    steady_job(spark, kafka, ck, topic)
    read = last_read(ck)
    waiting = {p: min(n, 2) for p, n in read.items()}
    assert sum(waiting.values()) > 0, read
    produce_per_partition(kafka, topic, waiting)

    cases = [
        (CheckOptions(), Health.OK),
        (CheckOptions(Thresholds(max_lag_records_total=1)), Health.LAGGING),
        (CheckOptions(Thresholds(max_lag_seconds=3600)), Health.OK),
        (CheckOptions(exact_time_lag=True), Health.OK),
        (CheckOptions(Thresholds(max_commit_age_seconds=0.001)), Health.STOPPED),
        (CheckOptions(Thresholds(window=2, min_window=2), exact_time_lag=True), Health.OK),
        (CheckOptions(history=3), Health.OK),
    ]
    for options, expected in cases:
        lazy, eager = lazy_and_eager(pinned, ck, topic, options)
        assert_same(lazy, eager, "C-1")
        assert lazy.verdict.health is expected, (options, lazy.verdict)
        assert lazy.report.total_lag == sum(waiting.values())
        lags = {p.partition: p.lag for p in lazy.report.partitions()}
        assert lags == {p: waiting.get(p, 0) for p in range(PARTITIONS)}


# -- 2. maxOffsetsPerTrigger with a backlog ------------------------------------------------------


def test_rate_limited_job_with_a_backlog_reads_the_whole_window(spark, kafka, pinned, tmp_path):
    """maxOffsetsPerTrigger=20 over a backlog of 300 records (100 per partition), stopped
    after 5+ batches with most of the backlog left. Every batch read the same number of
    records with more waiting: a rate limit is possible, so the whole window is read; eager
    and lazy both find the batches capped (``rate_limited``) and leave the estimated time lag
    of the lagging partitions unknown; same verdict and report, also with a records or a
    seconds threshold (records then dated exactly) and in exact mode."""
    topic, ck = new_topic(kafka, "capped"), tmp_path / "ck"
    for partition in range(PARTITIONS):
        kafka.produce(topic, 100, partition=partition, start=100 * partition)
    stream = jobs.kafka_stream(
        spark, kafka.bootstrap, topics=[topic], options={"maxOffsetsPerTrigger": "20"}
    )
    query = jobs.start_query(stream, str(ck), trigger=TRIGGER)
    try:
        jobs.wait_until(lambda: len(committed_ids(ck)) >= 5, 90, f"{ck}: 5 batches")
    finally:
        jobs.stop_quietly(query)
    assert sum(ends(kafka, topic)[topic].values()) - sum(committed(ck).values()) > 100

    options = [
        (CheckOptions(), Health.OK),
        (CheckOptions(Thresholds(max_lag_records_total=10)), Health.LAGGING),
        (CheckOptions(Thresholds(max_lag_seconds=3600)), Health.OK),
        (CheckOptions(exact_time_lag=True), Health.OK),
    ]
    for option, expected in options:
        lazy, eager = lazy_and_eager(pinned, ck, topic, option)
        assert_same(lazy, eager, "window")
        assert lazy.verdict.health is expected, lazy.verdict
        assert eager.report.rate_limited is True and lazy.report.rate_limited is True
        lagging = [p for p in eager.report.partitions() if p.lag > 0]
        assert len(lagging) == PARTITIONS
        if eager.report.time_lag_mode == "estimate":
            assert option.thresholds.max_lag_seconds is None and not option.exact_time_lag
            assert all(p.lag_seconds is None for p in lagging), lagging
        else:
            assert all(p.lag_seconds is not None for p in lagging), lagging


# -- 3. more waiting than the newest batch read --------------------------------------------------


def test_lag_above_what_the_newest_batch_read_reads_the_whole_window(
    spark, kafka, pinned, tmp_path
):
    """A 0.5 s-trigger stream of 4+ batches, stopped. First, on the partition the newest batch
    read least, one record more than it read (fewer in all than that batch read: no rate
    limit possible): a lag above the newest batch's read could be a trend ("lag grew at every
    batch") only the older batches show, so the whole window is read (default options, a
    records threshold not breached, a 3-batch history); with an ``allowed_lag`` the lag is
    within, offsets/C-1 settles it. Then, on every partition, more than any batch read: the
    whole window again (estimate, exact, a records threshold breached). Same verdict and
    report each time; the verdict is also the trend rule's truth from the files."""
    topic, ck = new_topic(kafka, "steady-many"), tmp_path / "ck"
    steady_job(spark, kafka, ck, topic, bursts=4)
    read = last_read(ck)
    least = min(read, key=lambda p: read[p])
    assert read[least] + 1 <= sum(read.values()), read
    produce_per_partition(kafka, topic, {least: read[least] + 1})
    first = {least: read[least] + 1}
    options = [
        (CheckOptions(), "window", grew_at_every_batch(ck, first)),
        (CheckOptions(Thresholds(max_lag_records_total=10_000)), "window",
         grew_at_every_batch(ck, first)),
        (CheckOptions(history=3), "window", grew_at_every_batch(ck, first, history=3)),
        (CheckOptions(Thresholds(allowed_lag=read[least] + 1)), "C-1", []),
    ]  # fmt: skip
    for option, path, grew in options:
        lazy, eager = lazy_and_eager(pinned, ck, topic, option)
        assert_same(lazy, eager, path)
        assert eager.report.rate_limited is False
        assert lazy.report.total_lag == read[least] + 1
        assert_verdict(lazy, grew)

    ids = committed_ids(ck)
    most = max(
        committed(ck, b)[p] - committed(ck, a).get(p, 0)
        for a, b in itertools.pairwise(ids)
        for p in range(PARTITIONS)
    )
    produce_per_partition(kafka, topic, dict.fromkeys(range(PARTITIONS), most + 15))
    pinned.forget()
    lags = {p: first.get(p, 0) + most + 15 for p in range(PARTITIONS)}
    for option in (CheckOptions(), CheckOptions(exact_time_lag=True)):
        lazy, eager = lazy_and_eager(pinned, ck, topic, option)
        assert_same(lazy, eager, "window")
        assert_verdict(lazy, grew_at_every_batch(ck, lags))
    lazy, eager = lazy_and_eager(
        pinned, ck, topic, CheckOptions(Thresholds(max_lag_records_total=10))
    )
    assert_same(lazy, eager, "window")
    assert lazy.verdict.health is Health.LAGGING, lazy.verdict


# -- 4. AvailableNow, run twice ------------------------------------------------------------------


def test_available_now_job_run_twice_is_judged_as_a_full_read(spark, kafka, pinned, tmp_path):
    """An AvailableNow job (maxOffsetsPerTrigger 30: several batches a run) run twice, records
    produced before, between and after the runs: on every partition as many as the newest
    batch read (lag equal to the read: the boundary of the rule). Offsets/C-1 settles the
    check (estimate or exact); a declared schedule (runs_every) reads the whole window.
    Same verdict and numbers either way, and not STOPPED (the last run just ended)."""
    topic, ck = new_topic(kafka, "avail"), tmp_path / "ck"
    stream = jobs.kafka_stream(
        spark, kafka.bootstrap, topics=[topic], options={"maxOffsetsPerTrigger": "30"}
    )
    kafka.produce(topic, 90)
    jobs.run_available_now(stream, str(ck))
    first_run = committed_ids(ck)
    kafka.produce(topic, 60, start=90)
    jobs.run_available_now(stream, str(ck))
    assert len(first_run) >= 2 and len(committed_ids(ck)) > len(first_run) + 1
    assert committed(ck) == ends(kafka, topic)[topic]
    waiting = last_read(ck)
    assert sum(waiting.values()) > 0, waiting
    produce_per_partition(kafka, topic, waiting)

    for option in (CheckOptions(), CheckOptions(exact_time_lag=True)):
        lazy, eager = lazy_and_eager(pinned, ck, topic, option)
        assert_same(lazy, eager, "C-1")
        assert lazy.verdict.health is not Health.STOPPED, lazy.verdict
        assert lazy.report.total_lag == sum(waiting.values())

    for options in (CheckOptions(runs_every=3600), CheckOptions(runs_every=60)):
        lazy, eager = lazy_and_eager(pinned, ck, topic, options)
        assert_same(lazy, eager, "window")
        assert lazy.verdict.health is not Health.STOPPED, lazy.verdict
        assert lazy.report.schedule is not None


# -- 5. a stateful aggregation with a watermark (no-data batches) -------------------------------


def test_watermarked_aggregation_after_a_no_data_batch_reads_the_whole_window(
    spark, kafka, pinned, tmp_path
):
    """A windowed count with a 1 s watermark (append mode): each data batch that moves the
    watermark is followed by a no-data batch (same offsets). Stopped right after a no-data
    batch committed, then 1 record per partition: the newest batch read nothing, so a waiting
    record could be a stalled partition or a growing lag only the window tells: the whole
    window is read; same verdict and report, in estimate and exact time-lag mode, with the
    default trend window and a 2-batch one."""
    from pyspark.sql import functions as F

    topic, ck = new_topic(kafka, "watermark"), tmp_path / "ck"
    stream = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
    counts = (
        stream.withWatermark("timestamp", "1 second")
        .groupBy(F.window("timestamp", "1 second"))
        .count()
    )
    query = jobs.start_query(counts, str(ck), trigger=TRIGGER)
    try:
        for burst in range(2):
            kafka.produce(topic, 30, start=30 * burst)
            wait_caught_up(ck, kafka, topic)
        jobs.wait_until(lambda: last_read(ck) == dict.fromkeys(range(PARTITIONS), 0), 60,
                        f"{ck}: a no-data batch committed")  # fmt: skip
    finally:
        jobs.stop_quietly(query)
    assert last_read(ck) == dict.fromkeys(range(PARTITIONS), 0)
    produce_per_partition(kafka, topic, dict.fromkeys(range(PARTITIONS), 1))

    short = Thresholds(window=2, min_window=2)
    for options in (CheckOptions(), CheckOptions(exact_time_lag=True), CheckOptions(short),
                    CheckOptions(short, exact_time_lag=True)):  # fmt: skip
        lazy, eager = lazy_and_eager(pinned, ck, topic, options)
        assert_same(lazy, eager, "window")
        assert lazy.report.total_lag == PARTITIONS


# -- 6. a batch in flight ------------------------------------------------------------------------


def test_batch_in_flight_with_a_few_records_waiting_is_judged_as_a_full_read(
    spark, kafka, pinned, tmp_path
):
    """A foreachBatch stream (0.5 s trigger) of 4+ batches; then a few records (at most what
    the newest committed batch read, per partition) that a batch plans and holds (its function
    waits): offsets/L is written, commits/L is not. Checked while it is held, nothing produced
    meanwhile: same verdict and numbers as a full read, in estimate and exact mode and with an
    in-flight limit the held batch exceeds; offsets/C-1 settles the estimate."""
    topic, ck = new_topic(kafka, "in-flight"), tmp_path / "ck"
    hold, held, release = threading.Event(), threading.Event(), threading.Event()

    def consume(_df: Any, _batch_id: int) -> None:
        if hold.is_set():
            held.set()
            release.wait(120)

    stream = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
    query = jobs.start_query(stream, str(ck), sink="foreachBatch", foreach_batch=consume,
                             trigger=TRIGGER)  # fmt: skip
    try:
        produced = 0
        for burst in range(4):
            produced += kafka.produce(topic, 24 + 3 * burst, start=produced)
            wait_caught_up(ck, kafka, topic)
        read = last_read(ck)
        hold.set()
        produce_per_partition(kafka, topic, {p: min(n, 3) for p, n in read.items()})
        jobs.wait_until(held.is_set, 60, "a batch planned and held")
        options = [
            (CheckOptions(), "C-1"),
            (CheckOptions(exact_time_lag=True), "C-1"),
            (CheckOptions(Thresholds(max_in_flight_seconds=0.001)), "C-1"),
        ]
        for option, path in options:
            lazy, eager = lazy_and_eager(pinned, ck, topic, option)
            assert eager.report.in_flight is not None
            assert_same(lazy, eager, path)
    finally:
        release.set()
        jobs.stop_quietly(query)
    assert lazy.verdict.health is Health.STALLED, lazy.verdict


# -- 7. partitions added while the job runs ------------------------------------------------------


def test_partitions_added_mid_stream_are_judged_as_a_full_read(spark, kafka, pinned, tmp_path):
    """A 0.5 s-trigger stream of 3 batches on 3 partitions; the topic grows to 4 partitions
    and a last burst reaches all of them; stopped; the topic grows to 5 (a partition the
    checkpoint lacks), then 1 record per partition. A partition missing from offsets/C-1 or
    from the checkpoint sends the check to the whole window; same verdict and report, in
    estimate and exact mode."""
    topic, ck = new_topic(kafka, "grown"), tmp_path / "ck"
    stream = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
    query = jobs.start_query(stream, str(ck), trigger=TRIGGER)
    try:
        produced = 0
        for burst in range(4):
            if burst == 3:
                kafka.add_partitions(topic, PARTITIONS + 1)
            produced += kafka.produce(topic, 24 + 3 * burst, start=produced)
            wait_caught_up(ck, kafka, topic)
    finally:
        jobs.stop_quietly(query)
    assert set(committed(ck)) == set(range(PARTITIONS + 1))
    kafka.add_partitions(topic, PARTITIONS + 2)
    produce_per_partition(kafka, topic, dict.fromkeys(range(PARTITIONS + 2), 1))
    for options in (CheckOptions(), CheckOptions(exact_time_lag=True)):
        lazy, eager = lazy_and_eager(pinned, ck, topic, options)
        assert_same(lazy, eager, "window")
        parts = {p.partition: p for p in eager.report.partitions()}
        assert sorted(parts) == list(range(PARTITIONS + 2))
        assert parts[PARTITIONS + 1].new_partition, parts[PARTITIONS + 1]
        assert eager.report.total_lag == PARTITIONS + 2


# -- 8. a lag that grew at every batch -----------------------------------------------------------


def test_lag_that_grew_at_every_batch_is_found_by_the_lazy_check_too(
    spark, kafka, pinned, tmp_path
):
    """Five AvailableNow runs of one batch each, reading 8, 9, 10, 11, 12 records per
    partition: a job falling further behind at every batch. Then 13 records on partition 0
    only (fewer in all than the newest batch read: no rate limit possible), later 20 more on
    every partition. The lag grew at every batch of the window: LAGGING, which offsets/C-1
    alone cannot show (one step); the lazy check reads the window and says the same. With a
    3-batch history the trend is too short for the rule: OK both ways."""
    topic, ck = new_topic(kafka, "growing"), tmp_path / "ck"
    stream = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
    for run in range(5):
        produce_per_partition(kafka, topic, dict.fromkeys(range(PARTITIONS), 8 + run))
        jobs.run_available_now(stream, str(ck))
    ids = committed_ids(ck)
    assert len(ids) == 5, ids
    assert committed(ck) == dict.fromkeys(range(PARTITIONS), 50)

    produce_per_partition(kafka, topic, {0: 13})
    cases = [
        (CheckOptions(), Health.LAGGING, [0]),
        (CheckOptions(exact_time_lag=True), Health.LAGGING, [0]),
        (CheckOptions(history=3), Health.OK, []),
    ]
    for option, expected, partitions in cases:
        lazy, eager = lazy_and_eager(pinned, ck, topic, option)
        assert_same(lazy, eager, "window")
        assert lazy.verdict.health is expected, lazy.verdict
        assert [ref.partition for ref in lazy.verdict.partitions] == partitions
        assert expected is Health.OK or "grew at every batch" in lazy.verdict.reason

    produce_per_partition(kafka, topic, dict.fromkeys(range(PARTITIONS), 20))
    pinned.forget()
    lazy, eager = lazy_and_eager(pinned, ck, topic, CheckOptions())
    assert_same(lazy, eager, "window")
    assert lazy.verdict.health is Health.LAGGING, lazy.verdict
    assert [ref.partition for ref in lazy.verdict.partitions] == list(range(PARTITIONS))
