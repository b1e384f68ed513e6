"""runs.py: runs of a scheduled job found in the batch history, one table per function."""

from __future__ import annotations

import pytest

from airflow_sparklag.model.report import HistoryBatch
from airflow_sparklag.runs import (
    MIN_DEFAULT_GRACE_SECONDS,
    busy_interval,
    default_grace,
    last_gap,
    run_gap,
    schedule_of,
    split_runs,
)


def hist(*times: float, records: int | None = 10) -> list[HistoryBatch]:
    """Batches 0.. at ``times`` (seconds); each but the first read ``records``."""
    return [
        HistoryBatch(i, int(t * 1000), None if i == 0 else records) for i, t in enumerate(times)
    ]


@pytest.mark.parametrize(
    ("case", "history", "expected"),
    [
        ("steady 1 s", hist(0, 1, 2, 3), 1.0),
        ("a few idle gaps are outvoted", hist(0, 1, 2, 900, 901, 902, 1800, 1801), 1.0),
        ("one batch: no interval", hist(0), None),
        ("batches that read nothing", hist(0, 1, 2, records=0), None),
        ("one batch per run: every interval is the period", hist(0, 3600, 7200), 3600.0),
    ],
)
def test_busy_interval(case: str, history: list[HistoryBatch], expected: float | None) -> None:
    assert busy_interval(history) == expected


@pytest.mark.parametrize(
    ("case", "history", "runs_every", "expected"),
    [
        ("declared: half the period", hist(0, 1), 3600, 1800.0),
        ("undeclared: 5 busy intervals", hist(0, 10, 20), None, 50.0),
        ("undeclared: at least 10 s", hist(0, 0.5, 1), None, 10.0),
        ("undeclared, no busy interval", hist(0), None, None),
    ],
)
def test_run_gap(
    case: str, history: list[HistoryBatch], runs_every: float | None, expected: float | None
) -> None:
    assert run_gap(history, runs_every) == expected


@pytest.mark.parametrize(
    ("case", "times", "gap", "runs", "last"),
    [
        ("one run", (0, 1, 2), 10, [(0, 2)], None),
        ("two runs", (0, 1, 100, 101), 10, [(0, 1), (2, 3)], (1, 2)),
        ("a pause exactly the gap joins", (0, 10), 10, [(0, 1)], None),
        ("three runs, newest gap", (0, 50, 51, 200), 10, [(0, 0), (1, 2), (3, 3)], (2, 3)),
        ("empty", (), 10, [], None),
    ],
)
def test_split_runs_and_last_gap(
    case: str,
    times: tuple[float, ...],
    gap: float,
    runs: list[tuple[int, int]],
    last: tuple[int, int] | None,
) -> None:
    history = hist(*times)
    assert split_runs(history, gap) == runs
    assert last_gap(history, gap) == last


def test_default_grace() -> None:
    assert default_grace(60) == MIN_DEFAULT_GRACE_SECONDS == 300
    assert default_grace(3600) == 900
    assert default_grace(86400) == 21600


def test_schedule_of_a_declared_job() -> None:
    history = hist(0, 1, 2, 3600, 3601)
    schedule = schedule_of(history, runs_every=3600, committed_at=3605.0)
    assert schedule.declared and schedule.scheduled and not schedule.looks_scheduled
    assert (schedule.runs_every, schedule.grace, schedule.runs_seen) == (3600, 900, 2)
    run = schedule.last_run
    assert run is not None
    assert (run.first_batch_id, run.last_batch_id, run.batches) == (3, 4, 2)
    assert (run.started_at, run.last_batch_at, run.ended_at) == (3600.0, 3601.0, 3605.0)
    assert run.start_known and not run.in_progress
    assert (run.complete, run.records_left) == (None, None)


@pytest.mark.parametrize(
    ("case", "first_id", "times", "known"),
    [
        ("a gap before the run", 7, (0, 3600), True),
        ("the run reaches back to batch 0", 0, (0, 1), True),
        ("the run reaches back past the oldest batch read", 7, (0, 1), False),
    ],
)
def test_start_known(case: str, first_id: int, times: tuple[float, ...], known: bool) -> None:
    history = [HistoryBatch(first_id + i, int(t * 1000), 10) for i, t in enumerate(times)]
    last = schedule_of(history, runs_every=3600).last_run
    assert last is not None and last.start_known is known


def test_in_flight_batch_continues_or_starts_a_run() -> None:
    history = hist(0, 1, 2)
    going = schedule_of(history, runs_every=3600, in_flight=(3, 3.0)).last_run
    assert going is not None and going.in_progress and going.batches == 4
    assert going.ended_at is None
    new = schedule_of(history, runs_every=3600, in_flight=(3, 3600.0))
    assert new.runs_seen == 2
    assert new.last_run is not None
    assert (new.last_run.first_batch_id, new.last_run.batches) == (3, 1)
    assert new.last_run.in_progress


def test_nothing_committed_yet() -> None:
    schedule = schedule_of([], runs_every=60, in_flight=(0, 10.0))
    assert schedule.runs_seen == 1 and schedule.last_run is not None
    assert schedule.last_run.in_progress
    assert schedule_of([], runs_every=60).last_run is None


def test_to_dict_is_plain() -> None:
    data = schedule_of(hist(0, 1), runs_every=3600).to_dict()
    assert data["last_run"]["batches"] == 2 and data["runs_every"] == 3600
