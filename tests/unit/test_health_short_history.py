"""rule_short_history: too short a history for the threshold-free STOPPED rule is never OK.

Where ``rule_stopped`` would judge a job by its own pace but the window cannot measure one (one
batch, two, batches that read nothing), a job with nothing new for more than
STOPPED_MIN_IDLE_SECONDS whose oldest waiting record is older than that is UNKNOWN with the
reason. A threshold or schedule the user declared decides instead; a finding of any other rule
comes first. Continuous epochs keep a clock (their offsets files' times) and a pace (every
epoch counts, whether it read records or not).
"""

from __future__ import annotations

import dataclasses

import pytest
from test_health_support import NOW, part, report

from airflow_sparklag.checkpoint_files import parse_offsets
from airflow_sparklag.health import evaluate, needs_record_ages, rule_short_history, rule_stopped
from airflow_sparklag.model.report import Schedule
from airflow_sparklag.model.verdict import STOPPED_MIN_IDLE_SECONDS, Health, Thresholds
from airflow_sparklag.positions import batch_time_ms

HOURLY = Schedule(runs_every=3600.0, grace=900.0, looks_scheduled=False, runs_seen=1, last_run=None)

CASES = [
    # id, lag, batch ages, records per batch (None: default), first unread record's age,
    # in-flight age or None, thresholds, schedule, fires
    ("one batch, 11 min idle, records waited 11 min", 200, (684.0,), None, 680.0, None, {},
     None, True),
    ("one batch, records arrived a moment ago", 200, (684.0,), None, 2.0, None, {}, None,
     False),
    ("one batch, just under the bound", 5, (29.0,), None, 29.0, None, {}, None, False),
    ("one batch, just over the bound", 5, (31.0,), None, 30.5, None, {}, None, True),
    ("one batch, records' age unknown: cannot tell", 5, (684.0,), None, None, None, {}, None,
     False),
    ("one batch, nothing waits", 0, (684.0,), None, None, None, {}, None, False),
    ("two batches, below min_window", 5, (3700.0, 3600.0), None, 3600.0, None, {}, None,
     True),
    ("batches that read nothing set no pace", 5, (100.0, 99.0, 98.0), (None, 0, 0), 90.0,
     None, {}, None, True),
    ("a pace the STOPPED rule measures: not this rule's", 5, (100.0, 99.0, 98.0), None, 90.0,
     None, {}, None, False),
    ("a recent in-flight batch is activity", 5, (684.0,), None, 680.0, 5.0, {}, None, False),
    ("an in-flight batch idle past the bound", 5, (684.0,), None, 680.0, 60.0, {}, None, True),
    ("the user's commit age decides alone", 5, (684.0,), None, 680.0, None,
     {"max_commit_age_seconds": 3600}, None, False),
    ("records younger than the user's max_lag_seconds", 5, (684.0,), None, 680.0, None,
     {"max_lag_seconds": 3600}, None, False),
    ("a declared schedule decides", 5, (684.0,), None, 680.0, None, {}, HOURLY, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "lag", "ages", "records", "waited", "flight", "limits", "schedule", "fires"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_short_history(
    case: str,
    lag: int,
    ages: tuple[float, ...],
    records: tuple[int | None, ...] | None,
    waited: float | None,
    flight: float | None,
    limits: dict,
    schedule: Schedule | None,
    fires: bool,
) -> None:
    r = report(
        part(lag, lag_seconds=waited),
        batch_ages=ages,
        batch_records=records,
        in_flight_age=flight,
        schedule=schedule,
    )
    result = rule_short_history(r, Thresholds(**limits), NOW)
    assert (result is not None) == fires
    if result:
        assert (result.health, result.rule) == (Health.UNKNOWN, "short_history")
        assert result.reason.startswith("not enough history to judge")
        assert f"{lag} record(s) wait" in result.reason
        assert [str(p) for p in result.partitions] == ["t:0"]


def test_the_issue_case_reads_as_it_should() -> None:
    """One committed batch, 200 records waiting, no commit for 11.4 minutes: was OK."""
    r = report(part(200, lag_seconds=680.0), batch_ages=(684.0,))
    verdict = evaluate(r, now=NOW)
    assert (verdict.health, verdict.rule) == (Health.UNKNOWN, "short_history")
    assert verdict.reason == (
        "not enough history to judge (1 batch with a time in the window, 3 needed): no "
        "commit for 684 s while 200 record(s) wait, the oldest for 680 s (more than 30 s); "
        "to judge it declare runs_every (--runs-every) if it runs on a schedule, else "
        "max_commit_age_seconds (--max-commit-age-seconds)"
    )
    assert Health.UNKNOWN.exit_code == 3 and not Health.UNKNOWN.is_breach


def test_any_other_finding_comes_first() -> None:
    r = report(part(200, lag_seconds=680.0), batch_ages=(684.0,))
    verdict = evaluate(r, Thresholds(max_lag_records_total=100), now=NOW)
    assert verdict.health is Health.LAGGING
    assert [f.rule for f in verdict.findings] == ["lagging", "short_history"]


def test_a_single_batch_job_checked_right_after_it_ran_stays_ok() -> None:
    r = report(part(200, lag_seconds=3.0), batch_ages=(5.0,))
    assert evaluate(r, now=NOW).health is Health.OK


def test_a_stopped_continuous_query_is_stopped_by_its_epoch_pace() -> None:
    """Epochs 2 s apart that read nothing (a quiet topic) still set the pace: every epoch is
    a sign of life. Micro-batches that read nothing set none."""
    ages = (60.0, 58.0, 56.0, 54.0)
    quiet = (None, 0, 0, 0)
    r = report(part(5, lag_seconds=45.0), batch_ages=ages, batch_records=quiet)
    assert rule_stopped(r, Thresholds(), NOW) is None
    assert rule_short_history(r, Thresholds(), NOW) is not None
    epochs = dataclasses.replace(r, continuous=True)
    found = rule_stopped(epochs, Thresholds(), NOW)
    assert found is not None and (found.health, found.rule) == (Health.STOPPED, "stopped_idle")
    assert "no epoch for 54 s" in found.reason and "between epochs" in found.reason
    assert rule_short_history(epochs, Thresholds(), NOW) is None


@pytest.mark.parametrize(
    ("ages", "idle", "needed"),
    [((684.0,), 684.0, True), ((20.0,), 20.0, False), ((3700.0, 3600.0), 3600.0, True)],
)
def test_record_ages_are_read_when_the_short_history_rule_could_decide(
    ages: tuple[float, ...], idle: float, needed: bool
) -> None:
    r = report(part(5, lag_seconds=None), batch_ages=ages)
    assert (idle > STOPPED_MIN_IDLE_SECONDS) is needed
    assert needs_record_ages(r, Thresholds(), NOW) is needed


def test_a_continuous_epoch_is_timed_by_its_offsets_file() -> None:
    epoch = parse_offsets(b'v1\n\n{"t":{"0":5}}', "/ck/offsets/3", modified=1_000.25)
    assert epoch.batch_timestamp_ms is None
    assert batch_time_ms(epoch) == 1_000_250
    batch = parse_offsets(
        b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":7,"conf":{}}\n{"t":{"0":5}}',
        "/ck/offsets/4",
        modified=1_000.25,
    )
    assert batch_time_ms(batch) == 7
