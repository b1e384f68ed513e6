"""compute_lag(): per-partition lag, flags, in-flight batch, rates and JSON safety."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from airflow_sparklag.health import evaluate
from airflow_sparklag.kafka import KafkaSnapshot, PartitionOffsets
from airflow_sparklag.lag import UNREAD_TOPICS, compute_lag
from airflow_sparklag.model.report import LagReport
from airflow_sparklag.model.verdict import Health, Thresholds

try:
    from airflow_sparklag.checkpoint_files import BatchOffsets, CheckpointState, SourceOffset
except ImportError:  # checkpoint.py is written in parallel; same fields as the contract

    @dataclass(frozen=True)
    class SourceOffset:  # type: ignore[no-redef]
        source_id: str
        kind: str
        kafka: Mapping[str, Mapping[int, int]] | None
        raw: str

    @dataclass(frozen=True)
    class BatchOffsets:  # type: ignore[no-redef]
        batch_id: int
        version: int
        batch_timestamp_ms: int | None
        watermark_ms: int | None
        conf: Mapping[str, str]
        sources: tuple[SourceOffset, ...]
        modified: float | None

    @dataclass(frozen=True)
    class CheckpointState:  # type: ignore[no-redef]
        location: str
        query_id: str | None
        committed_batch_id: int | None
        committed: BatchOffsets | None
        commit_modified: float | None
        in_flight: BatchOffsets | None
        history: tuple[BatchOffsets, ...]
        offsets_ids: tuple[int, ...]
        commit_ids: tuple[int, ...]
        continuous: bool


NOW = 1_700_000_100.0  # epoch seconds


def kafka_source(offsets: dict[str, dict[int, int]], source_id: str = "0") -> SourceOffset:
    return SourceOffset(source_id, "kafka", offsets, json.dumps(offsets))


def batch(
    batch_id: int,
    offsets: dict[str, dict[int, int]] | None,
    ts: float | None,
    *,
    extra: tuple[SourceOffset, ...] = (),
    modified: float | None = None,
) -> BatchOffsets:
    sources = (kafka_source(offsets),) if offsets is not None else ()
    ts_ms = None if ts is None else int(ts * 1000)
    return BatchOffsets(batch_id, 1, ts_ms, 0, {}, sources + extra, modified)


def state(
    history: list[BatchOffsets],
    *,
    in_flight: BatchOffsets | None = None,
    commit_modified: float | None = None,
    continuous: bool = False,
) -> CheckpointState:
    committed = history[-1] if history else None
    ids = [b.batch_id for b in history]
    return CheckpointState(
        location="s3://bucket/ckpt",
        query_id="q-1",
        committed_batch_id=committed.batch_id if committed else None,
        committed=committed,
        commit_modified=commit_modified,
        in_flight=in_flight,
        history=tuple(history),
        offsets_ids=tuple(ids + ([in_flight.batch_id] if in_flight else [])),
        commit_ids=tuple(ids),
        continuous=continuous,
    )


def snapshot(
    parts: dict[str, dict[int, tuple[int, int] | tuple[int, int, int]]],
    *,
    missing: frozenset[str] = frozenset(),
    fetched_at: float = NOW,
) -> KafkaSnapshot:
    return KafkaSnapshot(
        partitions={
            topic: {
                p: PartitionOffsets(v[0], v[1], v[2] if len(v) == 3 else None)  # type: ignore[misc]
                for p, v in ps.items()
            }
            for topic, ps in parts.items()
        },
        missing_topics=missing,
        fetched_at=fetched_at,
        cluster_id="cluster-1",
    )


def only_partition(report: LagReport, topic: str = "t", partition: int = 0) -> Any:
    return next(p for p in report.partitions() if (p.topic, p.partition) == (topic, partition))


def assert_json_safe(report: LagReport) -> dict[str, Any]:
    text = json.dumps(report.to_dict(), allow_nan=False)
    return json.loads(text)  # type: ignore[no-any-return]


# -- records -----------------------------------------------------------------------------------


def test_lag_is_log_end_minus_committed() -> None:
    st = state([batch(0, {"t": {0: 90, 1: 40}}, NOW - 10)])
    report = compute_lag(st, snapshot({"t": {0: (0, 100), 1: (0, 40)}}), now=NOW)
    assert only_partition(report, "t", 0).lag == 10
    assert only_partition(report, "t", 1).lag == 0
    assert report.total_lag == 10
    assert (report.max_lag, report.max_lag_topic, report.max_lag_partition) == (10, "t", 0)
    topic = report.sources[0].topics[0]
    assert (topic.lag, topic.max_lag, topic.max_lag_partition) == (10, 10, 0)


def test_read_committed_measures_against_last_stable_offset() -> None:
    st = state([batch(0, {"t": {0: 95}}, NOW - 10)])
    snap = snapshot({"t": {0: (0, 100, 95)}})  # open transaction: LSO 95, HWM 100
    assert compute_lag(st, snap, now=NOW, read_committed=True).total_lag == 0
    assert compute_lag(st, snap, now=NOW, read_committed=False).total_lag == 5
    p = only_partition(compute_lag(st, snap, now=NOW, read_committed=True))
    assert (p.last_stable_offset, p.log_end_offset) == (95, 100)


def test_ahead_of_log_is_flagged_not_negative() -> None:
    st = state([batch(0, {"t": {0: 500}}, NOW - 10)])
    report = compute_lag(st, snapshot({"t": {0: (0, 30)}}), now=NOW)
    p = only_partition(report)
    assert p.ahead_of_log and p.lag == 0
    assert report.total_lag == 0


def test_data_loss_counts_records_lost() -> None:
    st = state([batch(0, {"t": {0: 10}}, NOW - 10)])
    p = only_partition(compute_lag(st, snapshot({"t": {0: (25, 100)}}), now=NOW))
    assert p.data_loss and p.records_lost == 15
    assert p.lag == 90


def test_committed_equal_to_log_start_is_not_data_loss() -> None:
    st = state([batch(0, {"t": {0: 25}}, NOW - 10)])
    p = only_partition(compute_lag(st, snapshot({"t": {0: (25, 100)}}), now=NOW))
    assert not p.data_loss and p.records_lost == 0


def test_new_partition_lag_counts_from_log_start() -> None:
    st = state([batch(0, {"t": {0: 100}}, NOW - 10)])
    report = compute_lag(st, snapshot({"t": {0: (0, 100), 1: (20, 70)}}), now=NOW)
    p = only_partition(report, "t", 1)
    assert p.new_partition and p.committed_offset is None
    assert p.lag == 50
    assert report.total_lag == 50


def test_removed_partition_is_flagged_with_zero_lag() -> None:
    st = state([batch(0, {"t": {0: 100, 5: 7}}, NOW - 10)])
    p = only_partition(compute_lag(st, snapshot({"t": {0: (0, 100)}}), now=NOW), "t", 5)
    assert p.removed_partition and p.lag == 0 and p.log_end_offset is None


def test_missing_topic() -> None:
    st = state([batch(0, {"t": {0: 100}, "gone": {0: 3}}, NOW - 10)])
    snap = snapshot({"t": {0: (0, 100)}}, missing=frozenset({"gone"}))
    report = compute_lag(st, snap, now=NOW)
    assert report.missing_topics == ("gone",)
    gone = next(t for t in report.sources[0].topics if t.topic == "gone")
    # Unknown, never 0: no partition is measured, the checkpoint's offsets are kept.
    assert gone.missing and gone.lag is None and gone.partitions == ()
    assert gone.lag_unknown == "topic gone not found in the cluster"
    assert gone.checkpoint_offsets == {0: 3}
    source = report.sources[0]
    assert source.lag is None and source.lag_unknown == gone.lag_unknown
    assert report.total_lag == 0  # the measured topic "t" is caught up
    data = report.to_dict()["sources"][0]
    assert data["lag"] is None and data["topics"][0]["lag"] is None
    assert_json_safe(report)


def test_non_kafka_sources_are_reported_and_skipped() -> None:
    other = SourceOffset("1", "other", None, '{"logOffset":3}')
    st = state([batch(0, {"t": {0: 90}}, NOW - 10, extra=(other,))])
    report = compute_lag(st, snapshot({"t": {0: (0, 100)}}), now=NOW)
    assert [(s.source_id, s.is_kafka) for s in report.sources] == [("0", True), ("1", False)]
    assert len(report.kafka_sources) == 1
    assert report.total_lag == 10


def test_two_sources_reading_the_same_topic_both_count() -> None:
    second = kafka_source({"t": {0: 50}}, source_id="1")
    st = state([batch(0, {"t": {0: 90}}, NOW - 10, extra=(second,))])
    report = compute_lag(st, snapshot({"t": {0: (0, 100)}}), now=NOW)
    assert [s.lag for s in report.sources] == [10, 50]
    assert report.total_lag == 60


def test_no_committed_batch() -> None:
    report = compute_lag(state([]), snapshot({}), now=NOW)
    assert report.committed_batch_id is None
    assert report.sources == () and report.total_lag == 0
    assert report.commit_age_seconds is None
    assert report.catch_up_seconds is None
    assert_json_safe(report)


# -- time --------------------------------------------------------------------------------------


def test_lag_seconds_interpolated_from_history() -> None:
    history = [
        batch(0, {"t": {0: 100}}, NOW - 3),
        batch(1, {"t": {0: 200}}, NOW - 2),
    ]
    report = compute_lag(state(history), snapshot({"t": {0: (0, 300)}}), now=NOW)
    # The record at 200 was written after NOW-2 (the log end was 200 then) and before NOW (the
    # log end is 300 now): the 1st of those 100 records, so at NOW-1.98.
    p = only_partition(report)
    assert p.lag_seconds == pytest.approx(1.98)
    assert p.lag_seconds_unknown is None
    assert report.time_lag_mode == "estimate"
    assert report.max_lag_seconds == pytest.approx(1.98)


def test_in_flight_batch_dates_records_too() -> None:
    # Committed 200 at NOW-60; batch 2 planned up to 250 at NOW-59.5: the record at 200 was
    # written within those 0.5 s, although the live log end is a minute later.
    history = [batch(0, {"t": {0: 100}}, NOW - 61), batch(1, {"t": {0: 200}}, NOW - 60)]
    running = batch(2, {"t": {0: 250}}, NOW - 59.5)
    report = compute_lag(state(history, in_flight=running), snapshot({"t": {0: (0, 300)}}), now=NOW)
    assert only_partition(report).lag_seconds == pytest.approx(59.99, abs=0.01)


def test_idle_then_burst_is_unknown_not_the_idle_time() -> None:
    # Committed 200 at NOW-1000, then nothing, then 3,000 records: they were written at an
    # unknown moment of those 1,000 s. Never report "1,000 s" for records seconds old.
    history = [batch(0, {"t": {0: 100}}, NOW - 1001), batch(1, {"t": {0: 200}}, NOW - 1000)]
    report = compute_lag(state(history), snapshot({"t": {0: (0, 3200)}}), now=NOW)
    p = only_partition(report)
    assert p.lag == 3000 and p.lag_seconds is None
    assert "1000 s gap" in (p.lag_seconds_unknown or "")
    assert report.max_lag_seconds is None


def test_one_instant_for_the_whole_report() -> None:
    history = [batch(0, {"t": {0: 90}}, NOW - 100)]
    report = compute_lag(
        state(history, commit_modified=NOW - 30),
        snapshot({"t": {0: (0, 100)}}, fetched_at=NOW - 5),
        record_timestamps={("t", 0): int((NOW - 45) * 1000)},
    )
    assert report.generated_at == NOW - 5 == report.kafka_fetched_at
    assert report.commit_age_seconds == pytest.approx(25.0)
    assert only_partition(report).lag_seconds == pytest.approx(40.0)


def test_lag_seconds_zero_when_no_lag_even_if_log_end_is_old() -> None:
    history = [batch(0, {"t": {0: 100}}, NOW - 3600)]
    report = compute_lag(state(history), snapshot({"t": {0: (0, 100)}}), now=NOW)
    assert only_partition(report).lag_seconds == 0.0


def test_lag_seconds_unknown_for_offset_older_than_history() -> None:
    # New partition: log start 0 predates every point we have.
    history = [batch(0, {"t": {0: 100}}, NOW - 100)]
    report = compute_lag(state(history), snapshot({"t": {0: (0, 100), 1: (0, 10)}}), now=NOW)
    assert only_partition(report, "t", 1).lag_seconds is None
    assert report.max_lag_seconds == 0.0  # the known one


def test_exact_mode_uses_record_timestamps() -> None:
    history = [batch(0, {"t": {0: 100, 1: 5}}, NOW - 100)]
    stamps = {("t", 0): int((NOW - 42) * 1000), ("t", 1): None}
    report = compute_lag(
        state(history),
        snapshot({"t": {0: (0, 300), 1: (0, 9)}}),
        now=NOW,
        record_timestamps=stamps,
    )
    assert report.time_lag_mode == "exact"
    assert only_partition(report, "t", 0).lag_seconds == pytest.approx(42.0)
    assert only_partition(report, "t", 1).lag_seconds is None


def test_commit_age_prefers_commit_file_time() -> None:
    history = [batch(0, {"t": {0: 1}}, NOW - 100)]
    snap = snapshot({"t": {0: (0, 1)}})
    with_commit = compute_lag(state(history, commit_modified=NOW - 30), snap, now=NOW)
    without = compute_lag(state(history), snap, now=NOW)
    assert with_commit.commit_age_seconds == pytest.approx(30.0)
    assert without.commit_age_seconds == pytest.approx(100.0)


def test_in_flight_batch() -> None:
    history = [batch(4, {"t": {0: 100, 1: 10}}, NOW - 100)]
    running = batch(5, {"t": {0: 150, 1: 12}}, NOW - 20, modified=NOW - 19)
    report = compute_lag(
        state(history, in_flight=running), snapshot({"t": {0: (0, 160), 1: (0, 12)}}), now=NOW
    )
    assert report.in_flight is not None
    assert report.in_flight.batch_id == 5
    assert report.in_flight.age_seconds == pytest.approx(19.0)
    assert report.in_flight.planned_records == 52
    assert only_partition(report, "t", 0).planned_offset == 150
    assert only_partition(report, "t", 0).committed_offset == 100  # lag from the COMMITTED batch
    data = assert_json_safe(report)
    assert data["in_flight"]["planned_offsets"] == {"0": {"t": {"0": 150, "1": 12}}}


# -- rates and history -------------------------------------------------------------------------


def test_consumption_and_production_rates_and_catch_up() -> None:
    history = [
        batch(0, {"t": {0: 0}}, NOW - 100),
        batch(1, {"t": {0: 1000}}, NOW - 50),
        batch(2, {"t": {0: 2000}}, NOW),
    ]
    report = compute_lag(state(history), snapshot({"t": {0: (0, 2500)}}), now=NOW)
    assert report.consumption_rate == pytest.approx(20.0)
    assert report.production_rate == pytest.approx(25.0)
    assert report.catch_up_seconds is None  # producing faster than consuming

    faster = [batch(0, {"t": {0: 0}}, NOW - 100), batch(1, {"t": {0: 4000}}, NOW)]
    report = compute_lag(state(faster), snapshot({"t": {0: (0, 4500)}}), now=NOW)
    assert report.consumption_rate == pytest.approx(40.0)
    assert report.production_rate == pytest.approx(45.0)
    assert report.catch_up_seconds is None

    catching = [batch(0, {"t": {0: 0}}, NOW - 100), batch(1, {"t": {0: 4000}}, NOW - 50)]
    report = compute_lag(state(catching), snapshot({"t": {0: (0, 5000)}}), now=NOW)
    assert report.consumption_rate == pytest.approx(80.0)
    assert report.production_rate == pytest.approx(50.0)
    assert report.catch_up_seconds == pytest.approx(1000 / 30)


def test_single_batch_has_no_consumption_rate() -> None:
    report = compute_lag(
        state([batch(0, {"t": {0: 5}}, NOW - 10)]), snapshot({"t": {0: (0, 9)}}), now=NOW
    )
    assert report.consumption_rate is None and report.catch_up_seconds is None


def test_caught_up_catch_up_is_zero() -> None:
    report = compute_lag(
        state([batch(0, {"t": {0: 9}}, NOW - 10)]), snapshot({"t": {0: (0, 9)}}), now=NOW
    )
    assert report.catch_up_seconds == 0.0


def test_offset_history_is_aligned_with_report_history() -> None:
    history = [
        batch(3, {"t": {0: 10}}, NOW - 30),
        batch(7, {"t": {0: 20, 1: 1}}, NOW - 20),
        batch(9, {"t": {0: 30, 1: 2}}, NOW - 10),
    ]
    report = compute_lag(state(history), snapshot({"t": {0: (0, 30), 1: (0, 2)}}), now=NOW)
    assert [h.batch_id for h in report.history] == [3, 7, 9]
    assert only_partition(report, "t", 0).offset_history == (10, 20, 30)
    assert only_partition(report, "t", 1).offset_history == (None, 1, 2)


def test_committed_batch_is_appended_to_history_when_missing() -> None:
    committed = batch(9, {"t": {0: 30}}, NOW - 10)
    st = CheckpointState(
        "loc", None, 9, committed, None, None, (batch(8, {"t": {0: 20}}, NOW - 20),), (8, 9),
        (8, 9), False,
    )  # fmt: skip
    report = compute_lag(st, snapshot({"t": {0: (0, 30)}}), now=NOW)
    assert [h.batch_id for h in report.history] == [8, 9]


def test_continuous_mode_without_timestamps() -> None:
    history = [batch(0, {"t": {0: 5}}, None), batch(1, {"t": {0: 8}}, None)]
    report = compute_lag(
        state(history, continuous=True, commit_modified=NOW - 1),
        snapshot({"t": {0: (0, 9)}}),
        now=NOW,
    )
    assert report.continuous
    assert only_partition(report).lag_seconds is None
    assert report.consumption_rate is None
    assert_json_safe(report)


def test_to_dict_is_json_safe_and_complete() -> None:
    history = [batch(0, {"t": {0: 90}}, NOW - 10)]
    report = compute_lag(
        state(history, in_flight=batch(1, {"t": {0: 95}}, NOW - 5)),
        snapshot({"t": {0: (0, 100, 100)}}),
        now=NOW,
        read_committed=True,
    )
    data = assert_json_safe(report)
    assert data["sources"][0]["topics"][0]["partitions"][0]["lag"] == 10
    assert data["read_committed"] is True
    assert data["kafka_cluster_id"] == "cluster-1"


# -- rate-limited jobs (maxOffsetsPerTrigger) ---------------------------------------------------


def test_rate_limited_history_makes_estimate_unknown() -> None:
    # Every batch read exactly 100 records while thousands waited: the offsets trail the log end
    # and say nothing about when records were produced.
    history = [
        batch(0, {"t": {0: 50, 1: 50}}, NOW - 3),
        batch(1, {"t": {0: 100, 1: 100}}, NOW - 2),
        batch(2, {"t": {0: 150, 1: 150}}, NOW - 1),
    ]
    snap = snapshot({"t": {0: (0, 2000), 1: (0, 2000)}})
    report = compute_lag(state(history), snap, now=NOW)
    assert report.rate_limited
    assert only_partition(report).lag_seconds is None
    assert report.max_lag_seconds is None
    # Exact mode still answers.
    exact = compute_lag(state(history), snap, now=NOW, record_timestamps={("t", 0): 0, ("t", 1): 0})
    assert only_partition(exact).lag_seconds == pytest.approx(NOW)


def test_in_flight_batch_counts_as_an_observed_batch() -> None:
    history = [batch(0, {"t": {0: 50}}, NOW - 2), batch(1, {"t": {0: 100}}, NOW - 1)]
    in_flight = batch(2, {"t": {0: 150}}, NOW)
    report = compute_lag(
        state(history, in_flight=in_flight), snapshot({"t": {0: (0, 900)}}), now=NOW
    )
    assert report.rate_limited


@pytest.mark.parametrize(
    ("offsets", "log_end"),
    [
        ([50, 100], 2000),  # a single batch delta: cannot tell
        ([50, 100, 160], 2000),  # batches of different sizes: free-running
        ([50, 100, 150], 180),  # equal batches but no backlog beyond one batch
    ],
)
def test_not_rate_limited(offsets: list[int], log_end: int) -> None:
    times = [NOW - 1.5 * (len(offsets) - i) for i in range(len(offsets))]  # 1.5 s apart
    pairs = enumerate(zip(offsets, times, strict=True))
    history = [batch(i, {"t": {0: o}}, t) for i, (o, t) in pairs]
    report = compute_lag(state(history), snapshot({"t": {0: (0, log_end)}}), now=NOW)
    assert not report.rate_limited
    assert only_partition(report).lag_seconds is not None


# -- before the first commit: lag from the starting offsets -------------------------------------


def test_first_batch_in_flight_counts_from_the_starting_offsets() -> None:
    # A new query started at 0/0, batch 0 planned up to 2000/2000, 4000 records wait in all.
    first = batch(0, {"t": {0: 2000, 1: 2000}}, NOW - 5, modified=NOW - 5)
    st = state([], in_flight=first)
    snap = snapshot({"t": {0: (0, 2000), 1: (0, 2000)}})
    report = compute_lag(st, snap, now=NOW, source_starts={"0": {"t": {0: 0, 1: 0}}})
    assert report.committed_batch_id is None
    assert report.total_lag == 4000
    p = only_partition(report)
    assert (p.committed_offset, p.start_offset, p.planned_offset) == (None, 0, 2000)
    assert not p.new_partition and p.lag == 2000
    assert report.in_flight is not None and report.in_flight.planned_records == 4000
    assert any("no batch committed yet" in note for note in report.notes)
    assert_json_safe(report)


def test_first_batch_in_flight_without_starting_offsets_is_not_measured() -> None:
    st = state([], in_flight=batch(0, {"t": {0: 2000}}, NOW - 5))
    report = compute_lag(st, snapshot({"t": {0: (0, 2000)}}), now=NOW)
    assert [(s.source_id, s.is_kafka, s.topics) for s in report.sources] == [("0", True, ())]
    assert any("starting offsets were not read" in note for note in report.notes)


@pytest.mark.parametrize("starts", [None, {}])  # {}: the check read no sources/0/0 (missing)
def test_first_batch_in_flight_without_its_start_file_has_no_lag_rather_than_0(
    starts: dict[str, Any] | None,
) -> None:
    # Was: lag 0 and "UNKNOWN: ...; lag 0 record(s) from the offsets it started at" while
    # 2000 records waited (sources/0/0 missing: a hand-damaged or half-copied checkpoint).
    st = state([], in_flight=batch(2, {"t": {0: 2000}}, NOW - 5))
    report = compute_lag(st, snapshot({"t": {0: (0, 2000)}}), now=NOW, source_starts=starts)
    (source,) = report.sources
    assert source.lag is None and source.lag_unknown == (
        "no batch committed yet and sources/0/0 (where it started) not found"
    )
    assert any("starting offsets were not read" in note for note in report.notes)
    verdict = evaluate(report, Thresholds())
    assert verdict.health is Health.UNKNOWN and "lag unknown: source 0: no batch" in verdict.reason
    assert assert_json_safe(report)["sources"][0]["lag"] is None


# -- what the numbers mean ------------------------------------------------------------------------


def test_read_committed_report_says_lag_counts_offsets() -> None:
    st = state([batch(0, {"t": {0: 95}}, NOW - 10)])
    report = compute_lag(st, snapshot({"t": {0: (0, 100, 100)}}), now=NOW, read_committed=True)
    (note,) = report.notes  # one topic: nothing hints at a pattern (no UNREAD_TOPICS)
    assert note.startswith("read_committed") and "marker" in note
    assert assert_json_safe(report)["notes"] == [note]


def test_open_transaction_is_noted_with_the_last_stable_offset() -> None:
    st = state([batch(0, {"t": {0: 90}}, NOW - 10)])
    report = compute_lag(st, snapshot({"t": {0: (0, 100, 95)}}), now=NOW)
    p = only_partition(report)
    assert (p.last_stable_offset, p.log_end_offset, p.lag) == (95, 100, 10)
    assert report.notes[0].startswith("read_uncommitted: lag measured to the high watermark")
    assert report.notes[1] == (
        "open transactions: last stable offset below the high watermark on t:0 95<100"
    )


def test_no_note_without_transactions() -> None:
    st = state([batch(0, {"t": {0: 90}}, NOW - 10)])
    # nor the note of topics not read: one topic shares its name with no other (lag.py)
    assert compute_lag(st, snapshot({"t": {0: (0, 100, 100)}}), now=NOW).notes == ()
    assert UNREAD_TOPICS


def test_history_counts_the_records_each_batch_read() -> None:
    history = [
        batch(3, {"t": {0: 10, 1: 0}}, NOW - 30),
        batch(4, {"t": {0: 20, 1: 5}}, NOW - 20),
        batch(5, {"t": {0: 20, 1: 5}}, NOW - 10),
    ]
    report = compute_lag(state(history), snapshot({"t": {0: (0, 20), 1: (0, 5)}}), now=NOW)
    assert [(h.batch_id, h.records) for h in report.history] == [(3, None), (4, 15), (5, 0)]


def test_declared_schedule_is_in_the_report() -> None:
    history = [
        batch(0, {"t": {0: 10}}, NOW - 7200),
        batch(1, {"t": {0: 20}}, NOW - 7199),
        batch(2, {"t": {0: 30}}, NOW - 3600),
    ]
    report = compute_lag(state(history), snapshot({"t": {0: (0, 40)}}), now=NOW, runs_every=3600)
    assert report.schedule is not None
    assert (report.schedule.runs_every, report.schedule.grace) == (3600, 900)
    assert report.schedule.runs_seen == 2
    run = report.schedule.last_run
    assert run is not None and (run.first_batch_id, run.batches) == (2, 1)
    assert assert_json_safe(report)["schedule"]["last_run"]["first_batch_id"] == 2
    assert compute_lag(state(history), snapshot({"t": {0: (0, 40)}}), now=NOW).schedule is None


def test_an_unknown_time_to_loss_says_why() -> None:
    """``report.unknown["min_time_to_loss_seconds"]``: retention not read, deleted by size,
    or the waiting record's age unknown; absent when it is known."""
    from airflow_sparklag.kafka import TopicRetention
    from airflow_sparklag.lag import (
        AGE_UNKNOWN,
        DELETED_BY_SIZE,
        RETENTION_NOT_READ,
        Answers,
    )

    st = state([batch(0, {"t": {0: 90}}, NOW - 10)])
    ends = snapshot({"t": {0: (0, 100)}})
    stamps = {("t", 0): int((NOW - 5) * 1000)}

    def why(retention: TopicRetention | None, **kwargs: Any) -> str | None:
        answers = Answers(None if retention is None else {"0": {"t": retention}})
        report = compute_lag(st, ends, now=NOW, answers=answers, **kwargs)
        return report.unknown.get("min_time_to_loss_seconds")

    week = TopicRetention(604_800_000, None, deletes=True)
    assert why(None, record_timestamps=stamps) == RETENTION_NOT_READ
    assert why(TopicRetention(604_800_000, 10**9, deletes=True)) == DELETED_BY_SIZE
    assert why(week, record_timestamps={("t", 0): None}) == AGE_UNKNOWN
    assert why(week, record_timestamps=stamps) is None
    assert why(TopicRetention(None, None, deletes=False)) is None  # never deleted: known
