"""Batch time against the trigger's interval, from the listing's times alone: offsets/N
written to commits/N written (docs/lag-and-health.md#batch-time).

>>> pace_of(state.listed_times).ratio  # doctest: +SKIP
0.92
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

from airflow_sparklag.model.report import LagReport, Pace
from airflow_sparklag.model.verdict import Health, RuleResult, Thresholds

# A batch waited for its trigger when the next one was planned at least this long after its
# commit (and IDLE_SHARE of the spacing): planning the next batch at once (Kafka's offsets, the
# offsets file) takes well under a second; file times on S3 are whole seconds.
IDLE_SECONDS = 1.0
IDLE_SHARE = 0.1
# Fewer spacings that waited than this in the window: the interval is not known.
MIN_WAITED = 2
# The newer half's median batch time this many times the older half's (and at least
# TREND_SECONDS apart): "rising" (or "falling" the other way); under TREND_BATCHES: no trend.
TREND_FACTOR = 1.25
TREND_SECONDS = 0.5
TREND_BATCHES = 4
NEWEST = 3  # batches whose median time is the current batch time

# What an operator does when batches take most of their interval.
PACE_NEXT_STEP = (
    "give the job more resources (executors, cores, shuffle partitions) or a longer trigger "
    "interval; with maxOffsetsPerTrigger, lower it so a batch fits its interval"
)


def pace_of(listed: Sequence[tuple[int, float, float | None]]) -> Pace | None:
    """The batches' pace from ``CheckpointState.listed_times``; None without a committed batch."""
    done = [(i, planned, committed - planned) for i, planned, committed in listed if committed]
    done = [(i, planned, took) for i, planned, took in done if took >= 0]
    if not done:
        return None
    times = tuple(took for _, _, took in done)
    current = statistics.median(times[-NEWEST:])
    interval = _interval(listed)
    unknown = None
    if interval is None:
        unknown = (
            f"fewer than {MIN_WAITED} batches of the window waited for their trigger: they run "
            "back to back (the default trigger, or every batch overran its interval)"
        )
    return Pace(
        batch_seconds=current,
        batch_times=times,
        batch_ids=tuple(i for i, _, _ in done),
        batch_starts=tuple(planned for _, planned, _ in done),
        interval_seconds=interval,
        ratio=None if not interval else current / interval,
        trend=_trend(times),
        unknown=unknown,
    )


def _interval(listed: Sequence[tuple[int, float, float | None]]) -> float | None:
    """The median spacing of consecutive plans where the first batch waited for its trigger
    after its commit; None with fewer than ``MIN_WAITED`` of them."""
    waited = []
    for (i, planned, committed), (j, following, _) in itertools.pairwise(listed):
        if committed is None or j != i + 1:
            continue
        spacing = following - planned
        if following - committed >= max(IDLE_SECONDS, IDLE_SHARE * spacing):
            waited.append(spacing)
    return statistics.median(waited) if len(waited) >= MIN_WAITED else None


def _trend(times: Sequence[float]) -> str | None:
    """ "rising", "falling" or "steady": the newer half's median against the older half's."""
    if len(times) < TREND_BATCHES:
        return None
    half = len(times) // 2
    older, newer = statistics.median(times[:half]), statistics.median(times[-half:])
    if newer >= older * TREND_FACTOR and newer - older >= TREND_SECONDS:
        return "rising"
    if older >= newer * TREND_FACTOR and older - newer >= TREND_SECONDS:
        return "falling"
    return "steady"


def pace_text(pace: Pace) -> str:
    """``batches take 9.2 s on a 10.0 s interval (92%), rising``, or why not."""
    trend = f", {pace.trend}" if pace.trend else ""
    if pace.interval_seconds is None:
        return f"batches take {pace.batch_seconds:.1f} s{trend}; interval unknown: {pace.unknown}"
    return (
        f"batches take {pace.batch_seconds:.1f} s on a {pace.interval_seconds:.1f} s interval "
        f"({pace.ratio or 0:.0%}){trend}"
    )


def rule_batch_time(report: LagReport, thresholds: Thresholds, now: float) -> RuleResult | None:
    """Batches take more than ``max_batch_time_ratio`` of their interval."""
    limit, pace = thresholds.max_batch_time_ratio, report.pace
    if limit is None or pace is None or pace.ratio is None or pace.ratio <= limit:
        return None
    reason = f"{pace_text(pace)}, more than {limit:.0%} of it: {PACE_NEXT_STEP}"
    return RuleResult(Health.LAGGING, "batch_time", reason, ())
