"""OffsetTimeTable: its staircase, the age of a record and their edge cases, one behaviour per
test; estimate_age (the fleet's path) over a checkpoint's history and the live log end."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_sparklag.timelag import (
    MAX_UNCERTAINTY_SECONDS,
    NOT_PRODUCED,
    OLDER_THAN_HISTORY,
    OffsetTimeTable,
    estimate_age,
    history_points,
)

# -- the staircase -------------------------------------------------------------------------------


def test_empty_table_knows_nothing() -> None:
    table = OffsetTimeTable()
    assert table.record_age(0, 1_000).seconds is None
    assert len(table) == 0


def test_points_in_any_order() -> None:
    ordered = OffsetTimeTable([(100, 1_000), (200, 2_000), (300, 3_000)])
    shuffled = OffsetTimeTable([(300, 3_000), (100, 1_000), (200, 2_000)])
    assert shuffled.stairs == ordered.stairs == ([100, 200, 300], [1_000, 2_000, 3_000],
                                                 [1_000, 2_000, 3_000])  # fmt: skip


def test_flat_segment_keeps_first_and_last_time_seen() -> None:
    # Idle topic: the log end sat at 100 from t=1000 to t=3000.
    table = OffsetTimeTable([(100, 1_000), (100, 2_000), (100, 3_000), (200, 4_000)])
    assert table.stairs == ([100, 200], [1_000, 4_000], [3_000, 4_000])
    assert len(table) == 2


def test_flat_segment_dates_records_from_last_time_seen() -> None:
    # The log end left 100 only after t=3000, so record 149 is placed between 3000 and 4000.
    table = OffsetTimeTable([(100, 1_000), (100, 3_000), (200, 4_000)])
    assert table.record_age(149, 5_000).seconds == pytest.approx(1.5)


def test_rewind_in_input_is_ignored() -> None:
    # A consumer position that went back (100 at t=3000) does not make the log younger.
    table = OffsetTimeTable([(100, 1_000), (200, 2_000), (100, 3_000), (300, 4_000)])
    assert table.stairs == ([100, 200, 300], [1_000, 2_000, 4_000], [1_000, 2_000, 4_000])


def test_lower_offset_at_same_time_is_dominated() -> None:
    table = OffsetTimeTable([(100, 1_000), (150, 1_000), (200, 2_000)])
    assert table.stairs[0] == [150, 200]
    assert table.record_age(120, 3_000).unknown == OLDER_THAN_HISTORY


def test_add_invalidates_cached_levels() -> None:
    table = OffsetTimeTable([(100, 1_000)])
    assert table.record_age(149, 3_000).unknown == NOT_PRODUCED
    table.add(200, 2_000)
    assert table.record_age(149, 3_000).seconds == pytest.approx(1.5)


# -- record_age: the age of the first unread record -------------------------------------------

# A job planning every second: the log end was 100 at t=1 s, 200 at t=2 s, 300 at t=3 s.
STEADY = [(100, 1_000), (200, 2_000), (300, 3_000)]


@pytest.mark.parametrize(
    ("case", "points", "offset", "now_ms", "seconds", "bounds", "unknown"),
    [
        # The record AT offset 100 is the first written after the log end left 100: between
        # t=1 s and t=2 s, the 1st of those 100 records, so at ~1.01 s.
        ("at a level: the next record", STEADY, 100, 4_000, 2.99, (2.0, 3.0), None),
        ("inside a segment", STEADY, 149, 4_000, 2.5, (2.0, 3.0), None),
        ("last record before a level", STEADY, 199, 4_000, 2.0, (2.0, 3.0), None),
        ("against the live point", STEADY, 250, 3_000, 0.49, (0.0, 1.0), None),
        ("never negative (clock skew)", STEADY, 150, 500, 0.0, (0.0, 0.0), None),
        # Idle 16 min, then a burst: the log end sat at 300 until t=3 s and is 3,300 at
        # t=963 s (now). The 3,000 records came at an unknown moment of that gap: no number,
        # where the old table said ~16 min for records 10 s old.
        ("idle gap then a burst", [*STEADY, (3_300, 963_000)], 300, 963_000, None, (0.0, 960.0),
         "gap"),
        # A wide gap is fine when it is small next to the age: 5 s of uncertainty at >= 100 s.
        ("a gap within 10 % of the age", [(0, 0), (100, 5_000)], 50, 105_000, 102.45,
         (100.0, 105.0), None),
        ("a gap over 10 % of the age", [(0, 0), (100, 5_000)], 50, 40_000, None, (35.0, 40.0),
         "gap"),
        ("older than the oldest point", STEADY, 99, 4_000, None, None, "older than"),
        ("not produced yet", STEADY, 300, 4_000, None, None, "no record"),
        ("empty table", [], 0, 4_000, None, None, "no batch"),
    ],
)  # fmt: skip
def test_record_age(
    case: str,
    points: list[tuple[int, float]],
    offset: int,
    now_ms: float,
    seconds: float | None,
    bounds: tuple[float, float] | None,
    unknown: str | None,
) -> None:
    age = OffsetTimeTable(points).record_age(offset, now_ms)
    if seconds is None:
        assert age.seconds is None
    else:
        assert age.seconds == pytest.approx(seconds, abs=0.01)
    if bounds is None:
        assert age.min_seconds is None and age.max_seconds is None
    else:
        assert (age.min_seconds, age.max_seconds) == pytest.approx(bounds)
    if unknown is None:
        assert age.unknown is None
    else:
        assert age.unknown is not None and unknown in age.unknown


def test_record_age_never_leaves_its_bounds() -> None:
    # Whatever the offset, a known age lies between the two observations that bound it, so it
    # is never more than their distance (at most MAX_UNCERTAINTY_SECONDS here) above the truth.
    table = OffsetTimeTable([(0, 0), (10, 1_000), (10, 1_500), (50, 3_000), (51, 4_000)])
    for offset in range(0, 51):
        age = table.record_age(offset, 5_000)
        assert age.seconds is not None, offset
        assert age.min_seconds is not None and age.max_seconds is not None
        assert age.min_seconds <= age.seconds <= age.max_seconds
        assert age.max_seconds - age.min_seconds <= MAX_UNCERTAINTY_SECONDS


def test_record_ages_fall_with_the_offset() -> None:
    table = OffsetTimeTable([(0, 0), (10, 100), (10, 500), (50, 600), (51, 1_000)])
    ages = [table.record_age(o, 2_000).seconds for o in range(0, 51)]
    assert all(a is not None for a in ages)
    assert ages == sorted(ages, reverse=True)  # type: ignore[type-var]


def test_large_offsets_keep_precision() -> None:
    base = 2**53 // 4
    table = OffsetTimeTable([(base, 1_700_000_000_000), (base + 1_000, 1_700_000_001_000)])
    assert table.record_age(base + 499, 1_700_000_001_000).seconds == pytest.approx(0.5)


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


def test_estimate_age_is_the_tables_record_age() -> None:
    points = [(0, 0.0), (10, 100.0), (10, 500.0), (50, 600.0)]
    table = OffsetTimeTable([*points, (51, 1_000.0)])
    for offset in range(0, 52):
        age = table.record_age(offset, 2_000.0)
        assert estimate_age(points, 51, 1_000.0, offset, 2_000.0) == (age.seconds, age.unknown)


def test_history_above_live_log_end_is_dropped() -> None:
    # Topic recreated: the checkpoint remembers offsets the new log never had. Record 10 of
    # the new log is not dated from the old one's history (0 at t=0.5 s, 500 at t=1 s).
    points = [(0, 500.0), (500, 1_000.0)]
    assert estimate_age(points, 30, 4_000.0, 10, 5_000.0) == (None, OLDER_THAN_HISTORY)
