"""Reading the window newest first never changes a verdict or a partition's numbers.

A check reads offsets/C, then offsets/C-1 when the job lags, then the rest of the window only
when a rule (or the time-lag estimate) declares it could still depend on it
(``health.reads_needed``). This compares that
way with the eager one (the whole window read, then judged at the same instant) on several
hundred generated job shapes: random batch sizes and intervals, quiet partitions, capped
batches (maxOffsetsPerTrigger), idle spells, a batch in flight, lags, data loss and rewinds,
under random thresholds and both time-lag modes. The one shape not compared is the known
limit: a rewind in a batch the check did not read (older than offsets/C-1, or than offsets/C
for a caught-up job) that no shrunk offsets file shows. Checkpoints are
written from a real Spark 3.5 checkpoint's files (see test_check_requests).
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag import health
from airflow_sparklag.model.report import Reads
from airflow_sparklag.model.verdict import Thresholds
from airflow_sparklag.monitor import CheckOptions
from tests.unit.test_check_requests import (
    NOW,
    _without_window,
    _write,
    checkpoint_files,
    cluster,
    eager,
    judged,
    lazy,
)

SHAPES = 400


def _deltas(rng: random.Random, n: int) -> list[int]:
    """Records each batch reads from one partition."""
    kind = rng.choice(["random", "steady", "capped", "quiet", "growing", "bursty"])
    if kind == "steady":
        base = rng.randint(1, 200)
        return [base + rng.randint(-2, 2) for _ in range(n)]
    if kind == "capped":
        return [rng.choice([50, 100]) for _ in range(n)]
    if kind == "quiet":
        return [rng.choice([0, 0, 0, 1]) for _ in range(n)]
    if kind == "growing":
        return [10 * (i + 1) + rng.randint(0, 3) for i in range(n)]
    if kind == "bursty":
        return [rng.choice([0, 0, 500]) for _ in range(n)]
    return [rng.randint(0, 300) for _ in range(n)]


def _gaps(rng: random.Random, n: int) -> list[float]:
    """Seconds between batches."""
    kind = rng.choice(["steady", "jitter", "idle spells", "runs"])
    if kind == "steady":
        every = rng.choice([1.0, 5.0, 10.0, 60.0])
        return [every] * n
    if kind == "jitter":
        return [rng.uniform(0.5, 20.0) for _ in range(n)]
    if kind == "idle spells":
        return [rng.choice([5.0, 5.0, 5.0, 900.0]) for _ in range(n)]
    return [rng.choice([2.0, 2.0, 3600.0]) for _ in range(n)]


def shape(seed: int) -> tuple[list, int | None, dict, dict, float, CheckOptions]:
    """(batches, committed, kafka ends, kafka starts, rate, options) of one generated job."""
    rng = random.Random(seed)
    n = rng.randint(2, 14)
    partitions = rng.randint(1, 3)
    per_partition = {p: _deltas(rng, n) for p in range(partitions)}
    gaps = _gaps(rng, n)
    since_last = rng.choice([0.5, 2.0, 10.0, 25.0, 45.0, 300.0, 4000.0])
    times, at = [], NOW - since_last
    for gap in reversed(gaps):
        times.append(at)
        at -= gap
    times.reverse()
    offsets = {p: 10_000 + rng.randint(0, 50) for p in range(partitions)}
    batches = []
    rewind_at = rng.randint(1, n - 1) if rng.random() < 0.1 else None
    for i in range(n):
        for p in range(partitions):
            offsets[p] += per_partition[p][i]
            if i == rewind_at:  # topic recreated: fewer digits, or as many
                offsets[p] = rng.choice([rng.randint(0, 900), offsets[p] - rng.randint(1, 50)])
        batches.append((times[i], dict(offsets)))
    committed = n - 1 if rng.random() < 0.3 else None  # the newest batch in flight
    last = batches[-1][1]
    ends = {p: last[p] + rng.choice([0, 0, 1, 5, 40, 120, 1000]) for p in range(partitions)}
    starts = {}
    if rng.random() < 0.05:
        victim = rng.randrange(partitions)
        starts[victim] = batches[-1 if committed is None else -2][1][victim] + 1
    rate = rng.choice([0.1, 1.0, 50.0])
    thresholds = rng.choice(
        [
            {},
            {"max_lag_records_total": rng.choice([10, 100, 1000])},
            {"max_lag_seconds": rng.choice([1, 30, 600])},
            {"max_commit_age_seconds": rng.choice([20, 600])},
            {"allowed_lag": rng.choice([5, 50])},
            {"max_in_flight_seconds": 30},
            {"window": 5, "min_window": 3},
        ]
    )
    options: dict[str, Any] = {"thresholds": Thresholds(**thresholds)}
    if rng.random() < 0.3:
        options["exact_time_lag"] = True
    if rng.random() < 0.2:
        options["history"] = rng.choice([2, 3, 5])
    return batches, committed, ends, starts, rate, CheckOptions(**options)


def _unseen_rewind(batches: list, committed: int | None, read: int) -> bool:
    """Is an offset of a committed batch the check did not read above offsets/C? (``read``:
    the newest committed batches it read.) That is the one thing reading newest first does
    not see unless an offsets file shrank: docs/benchmarks.md, "Known limit"."""
    done = batches if committed is None else batches[:committed]
    newest = done[-1][1]
    return any(o > newest[p] for _, offsets in done[:-read] for p, o in offsets.items())


def compare(tmp_path: Path, seeds: range) -> tuple[list[int], int, int]:
    """Each shape of ``seeds`` checked newest first and eagerly at the same instant: (seeds
    whose verdict or numbers differ, shapes compared, shapes settled before the window)."""
    differ: list[int] = []
    settled_early = compared = 0
    for seed in seeds:
        batches, committed, ends, starts, rate, options = shape(seed)
        location = _write(tmp_path / str(seed), checkpoint_files(batches, committed))
        result, _ = lazy(location, cluster(dict(ends), dict(starts), rate), options)
        before = eager(location, cluster(dict(ends), dict(starts), rate), options)
        report, full = result.report, before.report
        assert report is not None and full is not None
        read = len(report.history)
        if read < len(full.history) and _unseen_rewind(batches, committed, read):
            continue  # the known limit: not compared
        compared += 1
        same = result.verdict == before.verdict and _without_window(result) == _without_window(
            before
        )
        if read == len(full.history):
            same = same and judged(result) == judged(before)
        else:
            settled_early += 1
        if not same:
            differ.append(seed)
    return differ, compared, settled_early


@pytest.mark.parametrize("block", range(8))
def test_newest_first_reading_keeps_every_verdict_and_number(tmp_path: Path, block: int) -> None:
    per_block = SHAPES // 8
    seeds = range(block * per_block, (block + 1) * per_block)
    differ, compared, settled_early = compare(tmp_path, seeds)
    assert differ == []
    assert settled_early > 0 and compared > per_block * 0.9


def _declares_nothing(report: Any, thresholds: Thresholds, now: float, dated: bool) -> Reads:
    return Reads.NOTHING


# Not "stalled": a partition the newest batch did not move has a lag above what it read, so
# the lagging rule's declaration asks for the same batches. "short_history" judges where
# "stopped" cannot measure a pace, and only the window tells which: it declares what
# "stopped" does, so the "stopped" case drops both.
SHARED_DECLARATION = {"stopped": ("stopped", "short_history")}


@pytest.mark.parametrize("name", ["lagging", "stopped"])
def test_a_rule_that_declares_too_little_makes_lazy_and_eager_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The comparison above can fail: a rule that says it needs no older batch (while its
    check still reads the window) gets verdicts the full read does not give. The other
    declarations stay, so only this rule's own needs go unread."""
    dropped = SHARED_DECLARATION.get(name, (name,))
    rules = tuple(
        dataclasses.replace(rule, reads=_declares_nothing) if rule.name in dropped else rule
        for rule in health.RULES
    )
    monkeypatch.setattr(health, "RULES", rules)
    differ, _, _ = compare(tmp_path, range(SHAPES))
    assert differ, f"no shape shows the {name} rule's missing declaration"
