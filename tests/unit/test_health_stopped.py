"""rule_stopped: lag above allowed_lag and no commits (explicit age limit or window ratio)."""

from __future__ import annotations

import pytest
from test_health_support import NOW, part, report

from airflow_sparklag.health import Health, Thresholds, rule_stopped

CASES = [
    # id, lag, batch ages (s before now), in-flight age, thresholds, fires
    ("commit age exactly at the limit", 5, (60.0,), None, {"max_commit_age_seconds": 60}, False),
    ("commit age just over the limit", 5, (60.5,), None, {"max_commit_age_seconds": 60}, True),
    ("old commit but no lag", 0, (3600.0,), None, {"max_commit_age_seconds": 60}, False),
    (
        "old commit, lag within allowed_lag",
        1,
        (3600.0,),
        None,
        {"max_commit_age_seconds": 60, "allowed_lag": 1},
        False,
    ),
    (
        "old commit, lag one over allowed_lag",
        2,
        (3600.0,),
        None,
        {"max_commit_age_seconds": 60, "allowed_lag": 1},
        True,
    ),
    # Burrow's trap: one commit, lag > 0. Without an explicit age limit it must NOT decide.
    ("single old commit, no age limit", 5, (3600.0,), None, {}, False),
    ("two old commits below min_window", 5, (3700.0, 3600.0), None, {}, False),
    # Window ratio: span 20 s (120 -> 100), idle 100 s > 20 s.
    ("idle longer than the window spans", 5, (120.0, 110.0, 100.0), None, {}, True),
    ("idle exactly the window span", 5, (40.0, 30.0, 20.0), None, {}, False),
    ("idle just over the window span", 5, (40.0, 30.0, 20.1), None, {}, True),
    ("idle shorter than the window span", 5, (300.0, 200.0, 100.0), None, {}, False),
    ("ratio but no lag", 0, (120.0, 110.0, 100.0), None, {}, False),
    # A freshly planned batch is activity: the query is alive.
    ("in-flight batch is recent activity", 5, (120.0, 110.0, 100.0), 5.0, {}, False),
    ("in-flight batch is old too", 5, (120.0, 110.0, 100.0), 90.0, {}, True),
    ("same batch timestamps: no span", 5, (100.0, 100.0, 100.0), None, {}, False),
]


@pytest.mark.parametrize(
    ("case", "lag", "ages", "in_flight", "limits", "fires"), CASES, ids=[c[0] for c in CASES]
)
def test_stopped(
    case: str,
    lag: int,
    ages: tuple[float, ...],
    in_flight: float | None,
    limits: dict,
    fires: bool,
) -> None:
    thresholds = Thresholds(**limits)
    result = rule_stopped(
        report(part(lag), batch_ages=ages, in_flight_age=in_flight), thresholds, NOW
    )
    assert (result is not None) == fires
    if result:
        assert result.health is Health.STOPPED
        assert [str(r) for r in result.partitions] == ["t:0"]


def test_commit_file_time_is_used_for_age() -> None:
    # The batch started 100 s ago but its commit was written 30 s ago.
    r = report(part(5), batch_ages=(100.0,), committed_at_age=30.0)
    assert rule_stopped(r, Thresholds(max_commit_age_seconds=60), NOW) is None
    assert rule_stopped(r, Thresholds(max_commit_age_seconds=20), NOW) is not None
