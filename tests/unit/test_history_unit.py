"""history.reconstruct / plan_history: the lag history rebuilt from what was read.

Hand-made states and Kafka answers: the real-query check of the same numbers is
tests/integration/test_history.py.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from airflow_sparklag.checkpoint_files import BatchOffsets, CheckpointState, SourceOffset
from airflow_sparklag.history import LagHistory, PartitionPoint, plan_history, reconstruct
from airflow_sparklag.kafka import KafkaSnapshot, PartitionOffsets
from airflow_sparklag.lag import compute_lag
from airflow_sparklag.model.report import PartitionLag
from airflow_sparklag.timelag import estimate_age, history_points

T0 = 1_700_000_000_000  # ms


def batch(batch_id: int, offsets: dict[str, dict[int, int]], ts_ms: int | None) -> BatchOffsets:
    source = SourceOffset("0", "kafka", offsets, json.dumps(offsets))
    return BatchOffsets(batch_id, 1, ts_ms, 0, {}, (source,), None)


def state(committed: list[BatchOffsets], in_flight: BatchOffsets | None = None) -> CheckpointState:
    ids = tuple(b.batch_id for b in committed)
    return CheckpointState(
        location="/ck",
        query_id=None,
        committed_batch_id=ids[-1] if ids else None,
        committed=committed[-1] if committed else None,
        commit_modified=None,
        in_flight=in_flight,
        history=tuple(committed),
        offsets_ids=ids + ((in_flight.batch_id,) if in_flight else ()),
        commit_ids=ids,
        continuous=False,
    )


def snapshot(ends: dict[int, int], at_ms: int, topic: str = "t") -> KafkaSnapshot:
    parts = {p: PartitionOffsets(0, end, None) for p, end in ends.items()}
    return KafkaSnapshot({topic: parts}, frozenset(), at_ms / 1000.0, None)


# -- the age of the first unread record is status's ------------------------------------------


def now_and_status(
    committed: list[BatchOffsets], in_flight: BatchOffsets | None, live: int, at_ms: int
) -> tuple[PartitionPoint, PartitionLag]:
    """History's ``now`` partition and status's, from one checkpoint, Kafka and instant: Kafka's
    answer at each batch time is that batch's planned offset (a batch plans up to the log end)."""
    st = state(committed, in_flight)
    observed = [*committed, *([in_flight] if in_flight else [])]
    ends = {b.batch_timestamp_ms: b.sources[0].kafka for b in observed}
    snap = snapshot({0: live}, at_ms)
    past = reconstruct(st, ends, snap, batches=len(committed))  # type: ignore[arg-type]
    now = past.points[-1]
    assert now.kind == "now"
    return now.partitions[0], next(compute_lag(st, snap).partitions())


@pytest.mark.parametrize(
    ("case", "offsets", "times", "in_flight", "live", "at_ms", "expected"),
    [
        # Committed up to 20 at 2 s, batch 3 planned up to 30 at 3 s: the first unread record
        # (20) is the 1st of the 10 written between 2 s and 3 s, produced ~2.1 s, not at 2 s
        # when the log end was still 20 (the old history said 1.5 s).
        ("bracket position", [0, 7, 20, 30], [0, 1_000, 2_000, 3_000], True, 35, 3_500, 1.4),
        # 60 s idle after batch 2, then a burst just before the snapshot: record 7 was written
        # at an unknown moment of the 60.5 s, so its age is unknown (the old history: 60.5 s).
        ("gap then burst", [0, 3, 7], [0, 1_000, 2_000], False, 110, 62_500, None),
    ],
)
def test_history_dates_the_first_unread_record_as_status_does(
    case, offsets, times, in_flight, live, at_ms, expected
):
    batches = [
        batch(i, {"t": {0: o}}, T0 + t) for i, (o, t) in enumerate(zip(offsets, times, strict=True))
    ]
    committed, flying = (batches[:-1], batches[-1]) if in_flight else (batches, None)
    mine, status = now_and_status(committed, flying, live, T0 + at_ms)
    assert mine.processed_offset == status.committed_offset
    seconds, unknown = estimate_age(
        history_points(batches)[("t", 0)], live, T0 + at_ms, offsets[2], T0 + at_ms
    )
    assert (mine.lag_seconds, mine.unknown) == (status.lag_seconds, unknown), case
    assert status.lag_seconds_unknown == unknown
    assert mine.lag_seconds == seconds == (None if expected is None else pytest.approx(expected))
    # The bracket stays known either way: where the record can have been written.
    assert mine.lag_seconds_min is not None and mine.lag_seconds_max is not None


# -- plan_history ---------------------------------------------------------------------------------


def test_plan_shows_the_last_batches_and_keeps_the_one_before_as_a_base():
    committed = [batch(i, {"t": {0: i * 10}}, T0 + i * 1000) for i in range(3, 8)]
    plan = plan_history(state(committed, batch(8, {"t": {0: 90}}, T0 + 8000)), 3)
    assert [(kind, b.batch_id) for kind, b in plan.shown] == [
        ("committed", 5),
        ("committed", 6),
        ("committed", 7),
        ("in_flight", 8),
    ]
    assert 4 in plan.by_id  # the base of batch 5
    # batch 4's time too: it brackets the records batch 5 has not read yet
    assert plan.times == (T0 + 4000, T0 + 5000, T0 + 6000, T0 + 7000, T0 + 8000)
    assert plan.topics == frozenset({"t"}) and plan.start_sources == ()


def test_plan_asks_for_sources_only_when_batch_zero_is_shown_and_says_why_it_is_empty():
    plan = plan_history(state([batch(0, {"t": {0: 5}}, T0)]), 10)
    assert plan.start_sources == ("0",)
    continuous = plan_history(state([batch(0, {"t": {0: 5}}, None)]), 10)
    assert continuous.shown == () and "continuous" in (continuous.unknown or "")
    nothing = plan_history(state([]), 10)
    assert "no batch is retained" in (nothing.unknown or "")


# -- reconstruct ----------------------------------------------------------------------------------


def test_lag_at_each_batch_is_log_end_then_minus_the_previous_batch_end():
    # Batches 4..7 every second; the log end grows by 30 per second on partition 0 and
    # 10 per second on partition 1, the query reads at most 20 records per batch.
    committed = [batch(i, {"t": {0: 20 * i, 1: 10 * i}}, T0 + i * 1000) for i in range(4, 8)]
    ends = {T0 + i * 1000: {"t": {0: 30 * i, 1: 10 * i}} for i in range(4, 8)}
    live = snapshot({0: 230, 1: 75}, T0 + 7500)
    result = reconstruct(state(committed), ends, live, batches=3, kafka_calls=3)

    assert [(p.kind, p.batch_id) for p in result.points] == [
        ("committed", 5),
        ("committed", 6),
        ("committed", 7),
        ("now", None),
    ]
    first = {x.partition: x for x in result.points[0].partitions}
    # at batch 5: log end 150 / 50, processed = batch 4's end 80 / 40
    assert (first[0].log_end_offset, first[0].processed_offset, first[0].lag) == (150, 80, 70)
    assert (first[1].log_end_offset, first[1].processed_offset, first[1].lag) == (50, 40, 10)
    assert first[0].planned_offset == 100
    assert result.points[0].total_lag == 80
    now = {x.partition: x for x in result.points[-1].partitions}
    assert (now[0].processed_offset, now[0].lag) == (140, 90)
    assert result.series("t", 0) == [
        (T0 + 5000, 70),
        (T0 + 6000, 80),
        (T0 + 7000, 90),
        (T0 + 7500, 90),
    ]
    # The record at 80 was written between the answers at 4 s (log end 120 > 80 ...) - it
    # is older than the oldest answer (log end 120 at 4 s): unknown, not extrapolated.
    assert first[0].lag_seconds is None and first[0].lag_seconds_min == pytest.approx(1.0)
    # At batch 7 the first unread record (120) is exactly the level seen last at 4 s.
    seventh = {x.partition: x for x in result.points[2].partitions}
    assert seventh[0].processed_offset == 120
    assert seventh[0].lag_seconds_max == pytest.approx(3.0)
    assert seventh[0].lag_seconds_min == pytest.approx(2.0)
    json.dumps(result.to_dict())


def test_batch_zero_starts_from_the_source_start_and_purged_predecessors_are_unknown():
    committed = [batch(0, {"t": {0: 10}}, T0), batch(2, {"t": {0: 30}}, T0 + 2000)]
    ends = {T0: {"t": {0: 12}}, T0 + 2000: {"t": {0: 35}}}
    result = reconstruct(
        state(committed), ends, None, start_offsets={"0": {"t": {0: 0}}}, batches=5
    )
    zero, two = result.points
    assert zero.partitions[0].lag == 12 and zero.partitions[0].processed_offset == 0
    assert two.partitions[0].lag is None and two.total_lag is None
    assert "batch 1 is not in the checkpoint" in (two.partitions[0].unknown or "")
    missing = reconstruct(state(committed[:1]), ends, None, batches=5)
    assert "sources/<id>/0" in (missing.points[0].partitions[0].unknown or "")


def test_impossible_answers_and_new_partitions_say_why():
    committed = [
        batch(3, {"t": {0: 50}}, T0),
        batch(4, {"t": {0: 60, 1: 5}}, T0 + 1000),
    ]
    # Kafka says the log end at batch 4's time was 40, below the 50 already processed.
    ends = {T0 + 1000: {"t": {0: 40, 1: 7}}}
    result = reconstruct(state(committed), ends, None, batches=1)
    parts = {x.partition: x for x in result.points[0].partitions}
    assert parts[0].lag is None and "out of append order" in (parts[0].unknown or "")
    assert parts[1].lag is None and "partition new in batch 4" in (parts[1].unknown or "")


def test_caught_up_partitions_have_zero_seconds_and_history_is_json_safe():
    committed = [batch(1, {"t": {0: 10}}, T0), batch(2, {"t": {0: 10}}, T0 + 1000)]
    ends = {T0 + 1000: {"t": {0: 10}}}
    result = reconstruct(state(committed), ends, snapshot({0: 10}, T0 + 2000), batches=1)
    assert isinstance(result, LagHistory)
    for point in result.points:
        assert point.total_lag == 0 and point.max_lag_seconds == 0.0
    payload = json.loads(json.dumps(result.to_dict()))
    assert payload["points"][0]["partitions"][0]["lag_seconds"] == 0.0
    assert payload["approximations"]


# -- real-time trigger: points at each checkpoint's write, with the offsets reached then --------


def test_real_time_points_are_the_checkpoints_with_their_own_offsets():
    from airflow_sparklag.history import REAL_TIME_APPROXIMATIONS, REAL_TIME_NOW

    # Interval N runs from its batch time to its offsets file's write 5 s later (ms, seconds).
    starts = [T0, T0 + 5_100, T0 + 10_200]
    written = [(t + 5_000) / 1000.0 for t in starts]
    batches = [
        dataclasses.replace(batch(n, {"t": {0: 250 * (n + 1)}}, starts[n]), modified=written[n])
        for n in range(3)
    ]
    # offsets/1 was written before interval 2 began (written_before: not a copy)
    st = dataclasses.replace(
        state(batches), commit_modified=written[-1] + 0.1, written_before=written[-2]
    )
    plan = plan_history(st, 10)
    assert plan.real_time and plan.times == tuple(round(w * 1000) for w in written)
    assert plan.start_sources == ()  # batch 0 processed its own offsets
    # Kafka's end at each write: 3, 5, 2 records past the offsets reached then.
    ends = {
        round(w * 1000): {"t": {0: 250 * (n + 1) + (3, 5, 2)[n]}} for n, w in enumerate(written)
    }
    past = reconstruct(st, ends, snapshot({0: 900}, T0 + 17_000))
    *points, now = past.points
    assert [p.time_ms for p in points] == list(plan.times)
    assert [p.total_lag for p in points] == [3, 5, 2]
    assert [p.partitions[0].processed_offset for p in points] == [250, 500, 750]
    assert now.kind == "now" and now.total_lag is None
    assert now.partitions[0].unknown == REAL_TIME_NOW
    assert (now.partitions[0].processed_offset, now.partitions[0].log_end_offset) == (750, 900)
    assert past.approximations == REAL_TIME_APPROXIMATIONS
