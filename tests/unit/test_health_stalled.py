"""rule_stalled: batch running too long, or offsets flat while commits keep coming."""

from __future__ import annotations

import pytest
from test_health_support import NOW, part, report

from airflow_sparklag.health import rule_stalled
from airflow_sparklag.model.verdict import Health, Thresholds

IN_FLIGHT_CASES = [
    # id, in-flight age, limit, fires
    ("at the limit", 300.0, 300, False),
    ("just over the limit", 300.5, 300, True),
    ("no in-flight batch", None, 300, False),
    ("rule off", 10_000.0, None, False),
]


@pytest.mark.parametrize(
    ("case", "age", "limit", "fires"), IN_FLIGHT_CASES, ids=[c[0] for c in IN_FLIGHT_CASES]
)
def test_in_flight_batch_age(
    case: str, age: float | None, limit: float | None, fires: bool
) -> None:
    r = report(part(0, history=(1, 2, 3), committed=3), in_flight_age=age)
    result = rule_stalled(r, Thresholds(max_in_flight_seconds=limit), NOW)
    assert (result is not None) == fires
    if result:
        assert result.health is Health.STALLED
        assert "running for" in result.reason


FLAT_CASES = [
    # id, lag, offset history, allowed_lag, min_window, fires
    ("flat for min_window batches with lag", 5, (7, 7, 7), 0, 3, True),
    ("flat for fewer than min_window", 5, (7, 7), 0, 3, False),
    ("flat only in the last two", 5, (6, 7, 7), 0, 3, False),
    ("moving", 5, (5, 6, 7), 0, 3, False),
    ("flat and caught up", 0, (7, 7, 7), 0, 3, False),
    ("flat, lag equal to allowed_lag", 1, (7, 7, 7), 1, 3, False),
    ("flat, lag one over allowed_lag", 2, (7, 7, 7), 1, 3, True),
    ("flat with gaps in history", 5, (7, None, 7, 7), 0, 3, True),
]


@pytest.mark.parametrize(
    ("case", "lag", "history", "allowed", "min_window", "fires"),
    FLAT_CASES,
    ids=[c[0] for c in FLAT_CASES],
)
def test_offsets_not_moving(
    case: str,
    lag: int,
    history: tuple[int | None, ...],
    allowed: int,
    min_window: int,
    fires: bool,
) -> None:
    p = part(lag, committed=7, history=history, lag_seconds=100.0)
    ages = tuple(float(10 * (len(history) - i)) for i in range(len(history)))
    thresholds = Thresholds(allowed_lag=allowed, min_window=min_window)
    result = rule_stalled(report(p, batch_ages=ages), thresholds, NOW)
    assert (result is not None) == fires
    if result:
        assert result.health is Health.STALLED
        assert [str(r) for r in result.partitions] == ["t:0"]


AGE_CASES = [
    # id, time-lag mode, lag_seconds of the first unread record, fires
    # (the newest batch started 10 s ago)
    ("record older than the newest batch", "exact", 10.5, True),
    ("record as old as the newest batch", "exact", 10.0, False),
    ("record arrived after the newest batch", "exact", 3.0, False),
    ("record time unknown", "exact", None, False),
    # A quiet partition of a busy topic: a record arrived after the newest batch was planned.
    # The estimate places it after that batch (offsets flat = the log end was there), which
    # used to make 4 of 1,000 polls of a healthy 200 ms job STALLED.
    ("estimate: record after the newest batch", "estimate", 2.0, False),
    ("estimate: record time unknown", "estimate", None, False),
]


@pytest.mark.parametrize(
    ("case", "mode", "seconds", "fires"), AGE_CASES, ids=[c[0] for c in AGE_CASES]
)
def test_the_first_unread_record_must_predate_the_newest_batch(
    case: str, mode: str, seconds: float | None, fires: bool
) -> None:
    p = part(5, committed=7, history=(7, 7, 7), lag_seconds=seconds)
    r = report(p, batch_ages=(30.0, 20.0, 10.0), mode=mode)
    assert (rule_stalled(r, Thresholds(), NOW) is not None) == fires
