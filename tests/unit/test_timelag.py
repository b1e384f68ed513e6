"""timelag: the staircase of a partition's log end, the age of a record and their edge cases,
one behaviour per test; estimate_age over a checkpoint's history and the live log end."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_sparklag.timelag import (
    IN_A_GAP,
    MAX_UNCERTAINTY_SECONDS,
    NO_POINTS,
    NOT_PRODUCED,
    OLDER_THAN_HISTORY,
    estimate_age,
    history_points,
    record_age,
    staircase,
)


def age_of(points: list[tuple[int, float]], offset: int, now_ms: float) -> tuple[Any, Any]:
    """``(seconds, unknown)`` over ``points`` alone (no live point)."""
    return estimate_age(points, None, 0.0, offset, now_ms)


# -- the staircase -------------------------------------------------------------------------------


def test_empty_history_knows_nothing() -> None:
    assert staircase([]) == ([], [], [])
    assert age_of([], 0, 1_000) == (None, NO_POINTS)


def test_points_in_any_order() -> None:
    ordered = staircase([(100, 1_000), (200, 2_000), (300, 3_000)])
    shuffled = staircase([(300, 3_000), (100, 1_000), (200, 2_000)])
    assert shuffled == ordered == ([100, 200, 300], [1_000, 2_000, 3_000],
                                   [1_000, 2_000, 3_000])  # fmt: skip


def test_flat_segment_keeps_first_and_last_time_seen() -> None:
    # Idle topic: the log end sat at 100 from t=1000 to t=3000.
    stairs = staircase([(100, 1_000), (100, 2_000), (100, 3_000), (200, 4_000)])
    assert stairs == ([100, 200], [1_000, 4_000], [3_000, 4_000])


def test_flat_segment_dates_records_from_last_time_seen() -> None:
    # The log end left 100 only after t=3000, so record 149 is placed between 3000 and 4000.
    seconds, _ = age_of([(100, 1_000), (100, 3_000), (200, 4_000)], 149, 5_000)
    assert seconds == pytest.approx(1.5)


def test_rewind_in_input_is_ignored() -> None:
    # A consumer position that went back (100 at t=3000) does not make the log younger.
    stairs = staircase([(100, 1_000), (200, 2_000), (100, 3_000), (300, 4_000)])
    assert stairs == ([100, 200, 300], [1_000, 2_000, 4_000], [1_000, 2_000, 4_000])


def test_lower_offset_at_same_time_is_dominated() -> None:
    points = [(100, 1_000), (150, 1_000), (200, 2_000)]
    assert staircase(points)[0] == [150, 200]
    assert age_of(points, 120, 3_000) == (None, OLDER_THAN_HISTORY)


# -- the age of the first unread record --------------------------------------------------------

# A job planning every second: the log end was 100 at t=1 s, 200 at t=2 s, 300 at t=3 s.
STEADY = [(100, 1_000), (200, 2_000), (300, 3_000)]


@pytest.mark.parametrize(
    ("case", "points", "offset", "now_ms", "seconds", "unknown"),
    [
        # The record AT offset 100 is the first written after the log end left 100: between
        # t=1 s and t=2 s, the 1st of those 100 records, so at ~1.01 s.
        ("at a level: the next record", STEADY, 100, 4_000, 2.99, None),
        ("inside a segment", STEADY, 149, 4_000, 2.5, None),
        ("last record before a level", STEADY, 199, 4_000, 2.0, None),
        ("against the live point", STEADY, 250, 3_000, 0.49, None),
        ("never negative (clock skew)", STEADY, 150, 500, 0.0, None),
        # Idle 16 min, then a burst: the log end sat at 300 until t=3 s and is 3,300 at
        # t=963 s (now). The 3,000 records came at an unknown moment of that gap: no number,
        # where the old table said ~16 min for records 10 s old.
        ("idle gap then a burst", [*STEADY, (3_300, 963_000)], 300, 963_000, None, "gap"),
        # A wide gap is fine when it is small next to the age: 5 s of uncertainty at >= 100 s.
        ("a gap within 10 % of the age", [(0, 0), (100, 5_000)], 50, 105_000, 102.45, None),
        ("a gap over 10 % of the age", [(0, 0), (100, 5_000)], 50, 40_000, None, "gap"),
        ("older than the oldest point", STEADY, 99, 4_000, None, "older than"),
        ("not produced yet", STEADY, 300, 4_000, None, "no record"),
        ("empty history", [], 0, 4_000, None, "no batch"),
    ],
)  # fmt: skip
def test_record_age(
    case: str,
    points: list[tuple[int, float]],
    offset: int,
    now_ms: float,
    seconds: float | None,
    unknown: str | None,
) -> None:
    found, why = age_of(points, offset, now_ms)
    if seconds is None:
        assert found is None
    else:
        assert found == pytest.approx(seconds, abs=0.01)
    if unknown is None:
        assert why is None
    else:
        assert why is not None and unknown in why


BRACKETED = staircase([(0, 0), (0, 500), (10, 1_000), (20, 2_000)])


@pytest.mark.parametrize(
    ("offset", "now_ms", "expected"),
    [
        # between levels 10 (seen at 1 s) and 20 (first seen at 2 s): the 6th of 10, ~1.6 s
        (15, 3_000, (1.4, 1.0, 2.0, None)),
        # a level's first record: written after the LAST time the log end was there (0.5 s)
        (0, 3_000, (2.45, 2.0, 2.5, None)),
        # the bracket lies after `now`: clamped at 0, never negative
        (15, 1_200, (0.0, 0.0, 0.2, None)),
        # below the oldest level: at least as old as that level's first time, no upper edge
        (-5, 3_000, (None, 3.0, None, OLDER_THAN_HISTORY)),
        (20, 3_000, (None, None, None, NOT_PRODUCED)),
    ],
)
def test_record_age_gives_the_bracket_it_interpolates_in(
    offset: int, now_ms: float, expected: tuple[Any, ...]
) -> None:
    assert record_age(BRACKETED, offset, now_ms) == pytest.approx(expected)


def test_an_age_unknown_in_a_gap_keeps_its_bracket() -> None:
    age = record_age(staircase([(0, 0), (10, 60_000)]), 3, 61_000)
    assert age == pytest.approx((None, 1.0, 61.0, IN_A_GAP.format(gap=60)))


def test_record_age_never_leaves_its_bracket() -> None:
    # Whatever the offset, a known age lies between the two observations that bound it, so it
    # is never more than their distance (at most MAX_UNCERTAINTY_SECONDS here) above the truth.
    points = [(0, 0), (10, 1_000), (10, 1_500), (50, 3_000), (51, 4_000)]
    offsets, first, last = staircase(points)
    for offset in range(0, 51):
        seconds, _ = age_of(points, offset, 5_000)
        i = bisect_right(offsets, offset)
        youngest, oldest = (5_000 - first[i]) / 1000, (5_000 - last[i - 1]) / 1000
        assert seconds is not None, offset
        assert youngest <= seconds <= oldest
        assert oldest - youngest <= MAX_UNCERTAINTY_SECONDS


def test_record_ages_fall_with_the_offset() -> None:
    points = [(0, 0), (10, 100), (10, 500), (50, 600), (51, 1_000)]
    ages = [age_of(points, o, 2_000)[0] for o in range(0, 51)]
    assert all(a is not None for a in ages)
    assert ages == sorted(ages, reverse=True)  # type: ignore[type-var]


def test_large_offsets_keep_precision() -> None:
    base = 2**53 // 4
    points = [(base, 1_700_000_000_000), (base + 1_000, 1_700_000_001_000)]
    assert age_of(points, base + 499, 1_700_000_001_000)[0] == pytest.approx(0.5)


# -- history_points and estimate_age: a checkpoint's history plus the live log end -----------


@dataclass(frozen=True)
class _Source:
    source_id: str
    kind: str
    kafka: dict[str, dict[int, int]] | None
    raw: str = ""


@dataclass(frozen=True)
class _Batch:
    batch_id: int
    batch_timestamp_ms: int | None
    sources: tuple[_Source, ...]
    version: int = 1
    watermark_ms: int | None = 0
    conf: dict[str, str] = field(default_factory=dict)
    modified: float | None = None


def _batch(batch_id: int, ts: int | None, offsets: dict[str, dict[int, int]]) -> Any:
    return _Batch(batch_id, ts, (_Source("0", "kafka", offsets),))


def test_history_points_per_partition_in_batch_order() -> None:
    history = [
        _batch(0, 1_000, {"t": {0: 10, 1: 5}}),
        _batch(1, 2_000, {"t": {0: 20, 1: 5}}),
    ]
    assert history_points(history) == {
        ("t", 0): [(10, 1_000.0), (20, 2_000.0)],
        ("t", 1): [(5, 1_000.0), (5, 2_000.0)],
    }


def test_continuous_batches_without_timestamp_are_skipped() -> None:
    assert history_points([_batch(0, None, {"t": {0: 10}})]) == {}


def test_non_kafka_sources_are_ignored() -> None:
    batch = _Batch(0, 1_000, (_Source("0", "other", None), _Source("1", "none", None)))
    assert history_points([batch]) == {}


def test_estimate_age_dates_against_history_and_the_live_point() -> None:
    points = [(10, 1_000.0), (20, 2_000.0)]
    # Record 24 was produced between the last batch (log end 20 at t=2 s) and the live
    # answer (log end 40 at t=4 s): at ~2.5 s.
    assert estimate_age(points, 40, 4_000.0, 24, 5_000.0) == pytest.approx((2.5, None))
    assert estimate_age(points, 40, 4_000.0, 5, 5_000.0) == (None, OLDER_THAN_HISTORY)
    assert estimate_age(points, 40, 4_000.0, 40, 5_000.0) == (None, NOT_PRODUCED)
    assert estimate_age(points, None, 4_000.0, 20, 5_000.0) == (None, NOT_PRODUCED)


def test_the_live_point_is_one_more_point_of_the_history() -> None:
    points = [(0, 0.0), (10, 100.0), (10, 500.0), (50, 600.0)]
    for offset in range(0, 52):
        with_live = age_of([*points, (51, 1_000.0)], offset, 2_000.0)
        assert estimate_age(points, 51, 1_000.0, offset, 2_000.0) == with_live


def test_history_above_live_log_end_is_dropped() -> None:
    # Topic recreated: the checkpoint remembers offsets the new log never had. Record 10 of
    # the new log is not dated from the old one's history (0 at t=0.5 s, 500 at t=1 s).
    points = [(0, 500.0), (500, 1_000.0)]
    assert estimate_age(points, 30, 4_000.0, 10, 5_000.0) == (None, OLDER_THAN_HISTORY)
