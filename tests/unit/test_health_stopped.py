"""rule_stopped: lag above allowed_lag and no progress.

Three ways, one table each: the user's `max_commit_age_seconds` (it alone decides when set); a
declared scheduled job (no run within runs_every + grace while records waited that long); any
other job (no batch for STOPPED_BUSY_INTERVALS of its own busy-batch intervals, at least
STOPPED_MIN_IDLE_SECONDS, while records waited that long).
"""

from __future__ import annotations

import pytest
from test_health_support import NOW, part, report

from airflow_sparklag.health import evaluate, needs_record_ages, rule_stopped
from airflow_sparklag.model.report import Schedule
from airflow_sparklag.model.verdict import (
    STOPPED_BUSY_INTERVALS,
    STOPPED_MIN_IDLE_SECONDS,
    Health,
    Thresholds,
)

BUSY = (100.0, 99.0, 98.0)  # three batches 1 s apart, the newest 98 s ago

COMMIT_AGE_CASES = [
    # id, lag, batch ages, thresholds, fires
    ("commit age exactly at the limit", 5, (60.0,), {"max_commit_age_seconds": 60}, False),
    ("commit age just over the limit", 5, (60.5,), {"max_commit_age_seconds": 60}, True),
    ("old commit but no lag", 0, (3600.0,), {"max_commit_age_seconds": 60}, False),
    (
        "old commit, lag within allowed_lag",
        1,
        (3600.0,),
        {"max_commit_age_seconds": 60, "allowed_lag": 1},
        False,
    ),
    (
        "old commit, lag one over allowed_lag",
        2,
        (3600.0,),
        {"max_commit_age_seconds": 60, "allowed_lag": 1},
        True,
    ),
    # The idle rule would fire (98 s idle, records 90 s old); the user's limit outranks it.
    (
        "commit age within the user's limit outranks the idle rule",
        5,
        BUSY,
        {"max_commit_age_seconds": 3600},
        False,
    ),
]


@pytest.mark.parametrize(
    ("case", "lag", "ages", "limits", "fires"),
    COMMIT_AGE_CASES,
    ids=[c[0] for c in COMMIT_AGE_CASES],
)
def test_commit_age_threshold(
    case: str, lag: int, ages: tuple[float, ...], limits: dict, fires: bool
) -> None:
    r = report(part(lag, lag_seconds=90.0), batch_ages=ages)
    result = rule_stopped(r, Thresholds(**limits), NOW)
    assert (result is not None) == fires
    if result:
        assert (result.health, result.rule) == (Health.STOPPED, "stopped")
        assert [str(r) for r in result.partitions] == ["t:0"]


def test_commit_file_time_is_used_for_age() -> None:
    # The batch started 100 s ago but its commit was written 30 s ago.
    r = report(part(5), batch_ages=(100.0,), committed_at_age=30.0)
    assert rule_stopped(r, Thresholds(max_commit_age_seconds=60), NOW) is None
    assert rule_stopped(r, Thresholds(max_commit_age_seconds=20), NOW) is not None


def test_before_the_first_commit_the_age_runs_from_the_first_plan() -> None:
    r = report(part(5), committed=False, in_flight_age=120.0)
    assert rule_stopped(r, Thresholds(max_commit_age_seconds=60), NOW) is not None
    assert rule_stopped(r, Thresholds(max_commit_age_seconds=180), NOW) is None


def test_a_batch_in_flight_past_the_commit_age_is_stopped_first_or_later() -> None:
    """The first batch in flight for 120 s and a later one in flight for 120 s (its previous
    commit 130 s ago), with max_commit_age_seconds=60: both STOPPED, each reason naming the
    batch in flight (the first: that nothing was committed yet), the verdict's once."""
    limit = Thresholds(max_commit_age_seconds=60)
    first = evaluate(report(part(5), committed=False, in_flight_age=120.0), limit, now=NOW)
    assert (first.health, first.rule) == (Health.STOPPED, "stopped")
    assert first.reason == (
        "no commit yet: batch 1, the query's first, in flight for 120 s (> 60 s) while 5 "
        "record(s) wait"
    )
    later = evaluate(
        report(part(5), batch_ages=(140.0, 130.0), in_flight_age=120.0), limit, now=NOW
    )
    assert (later.health, later.rule) == (Health.STOPPED, "stopped")
    assert later.reason == (
        "no commit for 130 s (> 60 s) while 5 record(s) wait; batch 2 in flight for 120 s"
    )
    # Under the limit neither is: the first batch's age is its own, the later one's the commit's.
    relaxed = Thresholds(max_commit_age_seconds=125)
    assert evaluate(report(part(5), committed=False, in_flight_age=120.0), relaxed).health is (
        Health.UNKNOWN
    )
    assert (
        evaluate(report(part(5), batch_ages=(140.0, 130.0), in_flight_age=120.0), relaxed).health
        is Health.STOPPED
    )


IDLE_CASES = [
    # id, lag, batch ages, records per batch (None: default), first unread record's age,
    # in-flight (age, planned records) or None, thresholds, fires
    ("idle past 5 busy intervals and the floor, records waited", 5, BUSY, None, 90.0, None, {},
     True),
    ("a record that arrived a moment ago after a quiet spell", 5, BUSY, None, 0.5, None, {},
     False),
    ("records' age unknown: cannot tell", 5, BUSY, None, None, None, {}, False),
    ("no lag", 0, BUSY, None, 90.0, None, {}, False),
    ("idle under the floor", 5, (25.0, 24.5, 24.0), None, 24.0, None, {}, False),
    ("idle just over the floor", 5, (31.0, 30.8, 30.6), None, 30.6, None, {}, True),
    ("idle under 5 busy intervals", 5, (300.0, 200.0, 100.0), None, 100.0, None, {}, False),
    ("idle over 5 busy intervals", 5, (900.0, 800.0, 700.0, 501.0), None, 501.0, None, {},
     True),
    # Bursts with idle stretches: the window spans ~1 hour, the busy batches are 1 s apart.
    ("idle stretches in the window do not hide a stopped bursty job", 5,
     (4000.0, 3999.0, 3998.0, 2000.0, 1999.0, 1998.0, 100.0, 99.0, 98.0), None, 98.0, None,
     {}, True),
    # Burrow's trap: one commit, lag > 0. Without a threshold it must NOT decide.
    ("single old commit", 5, (3600.0,), None, 3600.0, None, {}, False),
    ("two batches, below min_window", 5, (3700.0, 3600.0), None, 3600.0, None, {}, False),
    ("batches that read nothing set no pace", 5, BUSY, (None, 0, 0), 90.0, None, {}, False),
    ("a recent in-flight batch is activity", 5, BUSY, None, 90.0, (5.0, 10), {}, False),
    ("an old in-flight batch of usual size", 5, BUSY, None, 90.0, (90.0, 10), {}, True),
    ("an old in-flight batch planned 100x the usual records", 5, BUSY, None, 90.0,
     (90.0, 1000), {}, False),
    ("records younger than the user's max_lag_seconds", 5, BUSY, None, 90.0, None,
     {"max_lag_seconds": 600}, False),
    ("records older than the user's max_lag_seconds", 5, BUSY, None, 90.0, None,
     {"max_lag_seconds": 60}, True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "lag", "ages", "records", "waited", "flight", "limits", "fires"),
    IDLE_CASES,
    ids=[c[0] for c in IDLE_CASES],
)
def test_idle_against_busy_batch_intervals(
    case: str,
    lag: int,
    ages: tuple[float, ...],
    records: tuple[int | None, ...] | None,
    waited: float | None,
    flight: tuple[float, int] | None,
    limits: dict,
    fires: bool,
) -> None:
    r = report(
        part(lag, lag_seconds=waited),
        batch_ages=ages,
        batch_records=records,
        in_flight_age=flight[0] if flight else None,
        in_flight_records=flight[1] if flight else 0,
    )
    result = rule_stopped(r, Thresholds(**limits), NOW)
    assert (result is not None) == fires
    if result:
        assert (result.health, result.rule) == (Health.STOPPED, "stopped_idle")
        assert "usually takes between batches" in result.reason
        assert "runs_every" not in result.reason


def test_the_rule_constants_are_the_documented_ones() -> None:
    assert (STOPPED_BUSY_INTERVALS, STOPPED_MIN_IDLE_SECONDS) == (5, 30.0)


def test_a_job_that_looks_scheduled_is_told_how_to_declare_it() -> None:
    looks = Schedule(None, None, True, 2, None)
    r = report(part(5, lag_seconds=90.0), batch_ages=BUSY, schedule=looks)
    result = rule_stopped(r, Thresholds(), NOW)
    assert result is not None and result.rule == "stopped_idle"
    assert "looks scheduled" in result.reason
    assert "runs_every (--runs-every)" in result.reason


HOURLY = Schedule(3600.0, 900.0, False, 2, None)  # runs every hour, 15 min grace: 4500 s

SCHEDULE_CASES = [
    # id, batch ages, first unread record's age, in-flight age, fires
    ("idle between runs, records waiting since", (3000.0, 2999.0, 2998.0), 2000.0, None, False),
    ("no run within period + grace, records waited that long", (5000.0, 4999.0, 4998.0),
     4800.0, None, True),
    ("no run for a day but the records arrived 10 min ago", (90000.0, 89999.0, 89998.0),
     600.0, None, False),
    ("records waited long but a run just started", (90000.0, 89999.0, 89998.0), 5000.0, 10.0,
     False),
    ("age of the waiting records unknown", (5000.0, 4999.0, 4998.0), None, None, False),
    # The idle rule would fire on all these; a declared job is judged by its schedule only.
    ("one batch per run: never judged by the idle rule", (7300.0, 3700.0, 100.0), 90.0, None,
     False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "ages", "waited", "flight", "fires"),
    SCHEDULE_CASES,
    ids=[c[0] for c in SCHEDULE_CASES],
)
def test_declared_scheduled_job(
    case: str, ages: tuple[float, ...], waited: float | None, flight: float | None, fires: bool
) -> None:
    r = report(
        part(300, lag_seconds=waited), batch_ages=ages, in_flight_age=flight, schedule=HOURLY
    )
    result = rule_stopped(r, Thresholds(), NOW)
    assert (result is not None) == fires
    if result:
        assert (result.health, result.rule) == (Health.STOPPED, "stopped_schedule")
        assert "every 3600 s + 900 s grace" in result.reason


def test_declared_scheduled_job_with_a_commit_age_threshold() -> None:
    r = report(part(300, lag_seconds=4800.0), batch_ages=(5000.0,), schedule=HOURLY)
    assert rule_stopped(r, Thresholds(max_commit_age_seconds=7200), NOW) is None
    found = rule_stopped(r, Thresholds(max_commit_age_seconds=3600), NOW)
    assert found is not None and found.rule == "stopped"


NEEDS_AGES_CASES = [
    # id, batch ages, first unread record's age, thresholds, schedule, needed
    ("idle past the limit, age unknown", BUSY, None, {}, None, True),
    ("idle past the limit, age known", BUSY, 90.0, {}, None, False),
    ("idle under the floor", (25.0, 24.5, 24.0), None, {}, None, False),
    ("the user's commit age decides alone", BUSY, None, {"max_commit_age_seconds": 60}, None,
     False),
    ("declared, idle under period + grace", (3000.0, 2999.0, 2998.0), None, {}, HOURLY, False),
    ("declared, idle past period + grace", (5000.0, 4999.0, 4998.0), None, {}, HOURLY, True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "ages", "waited", "limits", "schedule", "needed"),
    NEEDS_AGES_CASES,
    ids=[c[0] for c in NEEDS_AGES_CASES],
)
def test_needs_record_ages(
    case: str,
    ages: tuple[float, ...],
    waited: float | None,
    limits: dict,
    schedule: Schedule | None,
    needed: bool,
) -> None:
    r = report(part(5, lag_seconds=waited), batch_ages=ages, schedule=schedule)
    assert needs_record_ages(r, Thresholds(**limits), NOW) is needed
