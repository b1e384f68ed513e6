"""Runs of a scheduled job (``Trigger.AvailableNow``/``Once`` started every so often), found in
the checkpoint's batch history: batches close together, then a gap (docs/scheduled-jobs.md).

Pure functions of the retained batches (``HistoryBatch``); whether each run was complete
needs Kafka and is filled in by ``judge``:

>>> from airflow_sparklag.model.report import HistoryBatch
>>> history = [HistoryBatch(i, t * 1000, 10) for i, t in enumerate([0, 1, 2, 3600, 3601])]
>>> schedule = schedule_of(history, runs_every=3600)
>>> schedule.runs_seen, schedule.last_run.first_batch_id, schedule.last_run.batches
(2, 3, 2)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections.abc import Sequence

from airflow_sparklag.model.report import HistoryBatch, Run, Schedule

# Grace after `runs_every` before a declared job that has records waiting counts as STOPPED:
# the larger of 5 minutes and a quarter of the period (scheduler delay, cluster start-up).
DEFAULT_GRACE_RATIO = 0.25
MIN_DEFAULT_GRACE_SECONDS = 300.0
# Batches a check of a declared scheduled job reads, to see its last run whole (Spark keeps
# 100 by default; each batch file is read once per reader, then cached).
SCHEDULED_HISTORY = 100
# Declared job: a pause longer than this share of the period separates two runs.
RUN_SPLIT_RATIO = 0.5
# Undeclared: a pause between batches is a gap between runs when it is longer than this many
# of the job's usual intervals between batches that read records, and at least this long.
GAP_BUSY_INTERVALS = 5
MIN_GAP_SECONDS = 10.0


def default_grace(runs_every: float) -> float:
    """The grace a declared job gets when none is given (see ``DEFAULT_GRACE_RATIO``)."""
    return max(MIN_DEFAULT_GRACE_SECONDS, DEFAULT_GRACE_RATIO * runs_every)


def _seconds(batch: HistoryBatch) -> float | None:
    return None if batch.timestamp_ms is None else batch.timestamp_ms / 1000.0


def busy_interval(history: Sequence[HistoryBatch], *, every_batch: bool = False) -> float | None:
    """The job's usual time between batches when it has records to read: the median of the
    intervals that END at a batch which read records (idle gaps are a minority of them in any
    but a scheduled job, whose every interval is a gap). None without such an interval.

    ``every_batch``: the median of every interval, for the epochs of the continuous trigger,
    which come at the trigger's interval whether they read records or not."""
    intervals = []
    for prev, cur in itertools.pairwise(history):
        t0, t1 = _seconds(prev), _seconds(cur)
        if (every_batch or cur.records) and t0 is not None and t1 is not None:
            intervals.append(t1 - t0)
    return statistics.median(intervals) if intervals else None


def run_gap(history: Sequence[HistoryBatch], runs_every: float | None) -> float | None:
    """How long a pause between two batches must be to separate two runs."""
    if runs_every is not None:
        return RUN_SPLIT_RATIO * runs_every
    busy = busy_interval(history)
    return None if busy is None else max(MIN_GAP_SECONDS, GAP_BUSY_INTERVALS * busy)


def split_runs(history: Sequence[HistoryBatch], gap: float) -> list[tuple[int, int]]:
    """Index ranges (first, last), oldest first, of the runs: a pause longer than ``gap``
    between two timed batches starts a new run."""
    if not history:
        return []
    runs: list[tuple[int, int]] = []
    first = 0
    for i in range(1, len(history)):
        t0, t1 = _seconds(history[i - 1]), _seconds(history[i])
        if t0 is not None and t1 is not None and t1 - t0 > gap:
            runs.append((first, i - 1))
            first = i
    runs.append((first, len(history) - 1))
    return runs


def observed_period(history: Sequence[HistoryBatch]) -> float | None:
    """An undeclared job's longest time between the starts of two runs seen in ``history``
    (the oldest run may be cut off by retention, so the longest is the safe estimate); None
    with fewer than two runs."""
    gap = run_gap(history, None)
    if gap is None:
        return None
    starts = [_seconds(history[first]) for first, _ in split_runs(history, gap)]
    timed = [start for start in starts if start is not None]
    return max((b - a for a, b in itertools.pairwise(timed)), default=None)


def last_gap(history: Sequence[HistoryBatch], gap: float) -> tuple[int, int] | None:
    """Indexes (before, after) of the newest pause longer than ``gap``, or None."""
    runs = split_runs(history, gap)
    if len(runs) < 2:
        return None
    return runs[-2][1], runs[-1][0]


def schedule_of(
    history: Sequence[HistoryBatch],
    *,
    runs_every: float | None,
    grace: float | None = None,
    in_flight: tuple[int, float | None] | None = None,
    committed_at: float | None = None,
    looks_scheduled: bool = False,
) -> Schedule:
    """The runs in ``history`` (committed batches, oldest first) and the last one.

    ``in_flight`` is (batch id, start time) of a planned, uncommitted batch: part of the last
    run when it started within the run gap of it, else the first batch of a new run.
    """
    if runs_every is not None and grace is None:
        grace = default_grace(runs_every)
    gap = run_gap(history, runs_every)
    ranges = split_runs(history, math.inf if gap is None else gap)  # no gap known: one run
    last: Run | None = None
    if ranges:
        first, end = ranges[-1]
        last = Run(
            first_batch_id=history[first].batch_id,
            last_batch_id=history[end].batch_id,
            batches=end - first + 1,
            started_at=_seconds(history[first]),
            last_batch_at=_seconds(history[end]),
            ended_at=committed_at,
            start_known=first > 0 or history[first].batch_id == 0,
            in_progress=False,
        )
    runs_seen = len(ranges)
    if in_flight is not None:
        batch_id, started = in_flight
        if last is not None and _joins(last, started, gap):
            last = dataclasses.replace(
                last,
                last_batch_id=batch_id,
                batches=last.batches + 1,
                last_batch_at=started if started is not None else last.last_batch_at,
                ended_at=None,
                in_progress=True,
            )
        else:
            last = Run(batch_id, batch_id, 1, started, started, None, True, True)
            runs_seen += 1
    return Schedule(runs_every, grace, looks_scheduled, runs_seen, last)


def _joins(last: Run, started: float | None, gap: float | None) -> bool:
    """Does a batch planned at ``started`` continue ``last``? (Unknown times: assume so.)"""
    if gap is None or started is None or last.last_batch_at is None:
        return True
    return started - last.last_batch_at <= gap
