"""pace.py: batch time against the trigger's interval from the listing's times (one table),
its trend, and the rule batch_time (one table)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from test_health_support import NOW, part, report

from airflow_sparklag.health import evaluate
from airflow_sparklag.model.report import LagReport
from airflow_sparklag.model.verdict import Health, Thresholds
from airflow_sparklag.pace import pace_of, pace_text, rule_batch_time

Listed = list[tuple[int, float, float | None]]


def on_trigger(took: list[float], interval: float = 10.0, start: float = 1000.0) -> Listed:
    """Batches planned every ``interval`` (or at once after a batch that overran it), each
    taking ``took[i]`` seconds from its plan to its commit."""
    listed: Listed = []
    at = start
    for i, seconds in enumerate(took):
        listed.append((i, at, at + seconds))
        at = at + interval if seconds < interval else at + seconds + 0.2
    return listed


def back_to_back(took: list[float], start: float = 1000.0) -> Listed:
    """The default trigger: each batch planned 0.2 s after the one before committed."""
    listed: Listed = []
    at = start
    for i, seconds in enumerate(took):
        listed.append((i, at, at + seconds))
        at += seconds + 0.2
    return listed


# name: (listed, batch_seconds, interval, ratio, trend)
CASES: dict[str, tuple[Listed, float | None, float | None, float | None, str | None]] = {
    "steady 2 s on a 10 s interval": (on_trigger([2.0] * 6), 2.0, 10.0, 0.2, "steady"),
    "rising to 9 s on 10 s": (
        on_trigger([2.0, 3.0, 4.5, 6.0, 7.5, 9.0]),
        7.5,
        10.0,
        0.75,
        "rising",
    ),
    "overran its interval: the waited spacings still show it": (
        on_trigger([4.0, 6.0, 8.0, 10.5, 12.0, 13.0]),
        12.0,
        10.0,
        1.2,
        "rising",
    ),
    "falling": (on_trigger([9.0, 8.0, 6.0, 4.0, 3.0, 2.0]), 3.0, 10.0, 0.3, "falling"),
    "default trigger: back to back, interval unknown": (
        back_to_back([1.0, 1.2, 0.9, 1.1, 1.0]),
        1.0,
        None,
        None,
        "steady",
    ),
    "three batches: no trend": (on_trigger([2.0, 2.0, 2.0]), 2.0, 10.0, 0.2, None),
    "one waited spacing: interval unknown": (on_trigger([2.0, 2.0]), 2.0, None, None, None),
}


@pytest.mark.parametrize("name", CASES)
def test_pace_of(name: str) -> None:
    listed, seconds, interval, ratio, trend = CASES[name]
    pace = pace_of(listed)
    assert pace is not None
    assert pace.batch_seconds == pytest.approx(seconds)
    assert pace.interval_seconds == pytest.approx(interval)
    assert pace.ratio == pytest.approx(ratio)
    assert pace.trend == trend
    assert (pace.unknown is None) == (interval is not None)


def test_the_batch_in_flight_and_a_gap_in_the_ids() -> None:
    listed = [*on_trigger([2.0] * 3), (3, 1030.0, None)]  # batch 3 planned, not committed
    pace = pace_of(listed)
    assert pace is not None and pace.batch_ids == (0, 1, 2)
    assert pace.batch_starts == (1000.0, 1010.0, 1020.0)  # offsets/N written: the chart's x
    assert pace.interval_seconds == pytest.approx(10.0)  # 2 -> 3 counts: it waited
    purged = [(0, 1000.0, 1002.0), (5, 1050.0, 1052.0), (6, 1060.0, 1062.0)]
    assert pace_of(purged).interval_seconds is None  # type: ignore[union-attr]


def test_nothing_committed_no_pace() -> None:
    assert pace_of([]) is None
    assert pace_of([(0, 1000.0, None)]) is None
    assert pace_of([(0, 1000.0, 999.0)]) is None  # a commit listed before its plan: no time


def test_pace_text() -> None:
    rising = pace_of(on_trigger([2.0, 3.0, 4.5, 6.0, 7.5, 9.0]))
    assert rising is not None
    assert pace_text(rising) == "batches take 7.5 s on a 10.0 s interval (75%), rising"
    unknown = pace_of(back_to_back([1.0, 1.0]))
    assert unknown is not None
    assert pace_text(unknown).startswith("batches take 1.0 s; interval unknown: fewer than 2")


def _with_pace(listed: Listed) -> LagReport:
    return dataclasses.replace(report(part(5, lag_seconds=3.0)), pace=pace_of(listed))


# name: (listed, thresholds, fires)
RULE_CASES: dict[str, tuple[Listed, dict[str, Any], bool]] = {
    "75 % of the interval, bound 70 %: fires": (
        on_trigger([2.0, 3.0, 4.5, 6.0, 7.5, 9.0]),
        {"max_batch_time_ratio": 0.7},
        True,
    ),
    "75 %, bound 80 %: silent": (
        on_trigger([2.0, 3.0, 4.5, 6.0, 7.5, 9.0]),
        {"max_batch_time_ratio": 0.8},
        False,
    ),
    "no bound: silent": (on_trigger([9.0] * 6), {}, False),
    "interval unknown (back to back): silent": (
        back_to_back([9.0] * 6),
        {"max_batch_time_ratio": 0.1},
        False,
    ),
}


@pytest.mark.parametrize("name", RULE_CASES)
def test_rule_batch_time(name: str) -> None:
    listed, limits, fires = RULE_CASES[name]
    found = rule_batch_time(_with_pace(listed), Thresholds(**limits), NOW)
    assert (found is not None) == fires
    if found is not None:
        assert found.health is Health.LAGGING and found.rule == "batch_time"
        assert found.reason.startswith(
            "batches take 7.5 s on a 10.0 s interval (75%), rising, more than 70% of it: "
        )
        assert "maxOffsetsPerTrigger" in found.reason


def test_the_verdict_is_lagging_while_lag_is_within_its_thresholds() -> None:
    thresholds = Thresholds(max_lag_records_total=1000, max_batch_time_ratio=0.7)
    made = _with_pace(on_trigger([2.0, 3.0, 4.5, 6.0, 7.5, 9.0]))
    verdict = evaluate(made, thresholds, now=NOW)
    assert (verdict.health, verdict.rule) == (Health.LAGGING, "batch_time")
