"""When each lag threshold is crossed at the current rates (docs/lag-and-health.md#time-to-
breach): the backlog grows at the production rate (an upper bound) minus the consumption rate,
so every time errs on the early side; nothing is extrapolated where a rate is unknown.

>>> breaches = time_to_breach(report, Thresholds(max_lag_records_total=1000))  # doctest: +SKIP
>>> breach_text(breaches[0])                                                 # doctest: +SKIP
'max_lag_records_total 1000 crossed in 12.4 min at +35.0 records/s'
"""

from __future__ import annotations

import math

from airflow_sparklag.model.report import Breach, LagReport, Reads
from airflow_sparklag.model.verdict import Health, PartitionRef, RuleResult, Thresholds

# Net growth under this share of the production rate is noise of the two rates' spans (a
# healthy job's production bound runs ahead of its consumption by the records since its newest
# batch), not a trend: no forecast.
NOISE_SHARE = 0.05

# What an operator does when a threshold will be crossed soon.
BREACH_NEXT_STEP = (
    "raise maxOffsetsPerTrigger (if set) or the job's resources (executors, cores, "
    "partitions) before then, or lower the topic's production"
)


class _Rate:
    """The backlog's net growth (records/s), or why there is no forecast: ``never`` when it
    does not grow (math.inf), else unknown (None)."""

    def __init__(self, report: LagReport) -> None:
        consumed, produced = report.consumption_rate, report.production_rate
        self.growth: float | None = None
        self.produced = produced or 0.0
        self.unknown: str | None = None
        self.never = False
        if consumed is None or produced is None:
            self.unknown = (
                f"rates unknown ({len(report.history)} batch(es) read; two timed batches are "
                "needed)"
            )
        elif produced - consumed <= NOISE_SHARE * produced:
            self.never = True
            self.unknown = (
                f"the backlog does not grow ({produced:.1f} records/s produced, "
                f"{consumed:.1f} consumed)"
            )
        else:
            self.growth = produced - consumed

    def breach(self, name: str, limit: float, current: float, per_second: float) -> Breach:
        """``current`` (crossing ``limit``) grows by ``per_second`` per record/s of growth."""
        if current > limit:
            return Breach(name, limit, current, 0.0, self.growth)
        if self.growth is None:
            seconds = math.inf if self.never else None
            return Breach(name, limit, current, seconds, None, self.unknown)
        return Breach(
            name, limit, current, (limit - current) / (self.growth * per_second), self.growth
        )


def time_to_breach(report: LagReport, thresholds: Thresholds | None) -> tuple[Breach, ...]:
    """When each lag threshold set is crossed at the report's rates. The worst partition grows
    at most at the whole job's net rate (rates are not per partition), so its time is the
    earliest; the oldest waiting record ages ``growth / produced`` seconds a second."""
    if thresholds is None or not report.kafka_sources or report.committed_batch_id is None:
        return ()
    rate = _Rate(report)
    found = []
    if thresholds.max_lag_records_total is not None:
        limit = thresholds.max_lag_records_total
        found.append(rate.breach("max_lag_records_total", limit, report.total_lag, 1.0))
    if thresholds.max_lag_records_per_partition is not None:
        limit = thresholds.max_lag_records_per_partition
        found.append(rate.breach("max_lag_records_per_partition", limit, report.max_lag, 1.0))
    limit_seconds, age = thresholds.max_lag_seconds, report.max_lag_seconds
    if limit_seconds is not None and age is None:
        unknown = "the waiting records' age is unknown"
        found.append(Breach("max_lag_seconds", limit_seconds, None, None, rate.growth, unknown))
    elif limit_seconds is not None and age is not None:
        per_record = 1.0 / rate.produced if rate.produced else 0.0
        found.append(rate.breach("max_lag_seconds", limit_seconds, age, per_record))
    return tuple(found)


def breach_text(breach: Breach) -> str:
    """``max_lag_seconds 600 crossed in 12.4 min at +35.0 records/s``, or why not."""
    head = f"{breach.threshold} {breach.limit:g}"
    if breach.seconds == 0.0:
        return f"{head} crossed now ({breach.current:g})"
    if breach.seconds is None or math.isinf(breach.seconds):
        return f"{head} not forecast: {breach.unknown or 'the backlog does not grow'}"
    return f"{head} crossed in {duration(breach.seconds)} at +{breach.growth or 0:.1f} records/s"


def soonest(report: LagReport) -> Breach | None:
    """The threshold crossed first in the future (not crossed yet); None when none is."""
    ahead = [b for b in report.time_to_breach if b.seconds is not None and 0 < b.seconds < math.inf]
    return min(ahead, key=lambda b: b.seconds or 0.0, default=None)


def duration(seconds: float | None) -> str:
    """``42 s``, ``12.4 min``, ``3.2 h``, ``2.0 d``; ``unknown`` for None."""
    if seconds is None:
        return "unknown"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def rule_time_to_breach(report: LagReport, thresholds: Thresholds, now: float) -> RuleResult | None:
    """A lag threshold not crossed yet will be within ``min_time_to_breach_seconds`` (one
    already crossed is the lagging rule's)."""
    limit = thresholds.min_time_to_breach_seconds
    first = soonest(report)
    if limit is None or first is None or (first.seconds or 0.0) >= limit:
        return None
    reason = f"{breach_text(first)} (< {duration(limit)}): {BREACH_NEXT_STEP}"
    waiting = {PartitionRef(p.topic, p.partition) for p in report.partitions() if p.lag > 0}
    return RuleResult(Health.LAGGING, "time_to_breach", reason, tuple(sorted(waiting, key=str)))


def reads_time_to_breach(
    report: LagReport, thresholds: Thresholds, now: float, dated: bool
) -> Reads:
    """The window with ``min_time_to_breach_seconds`` and records waiting: the rates are then
    the window's, whatever a newest-first check read."""
    if thresholds.min_time_to_breach_seconds is None or report.total_lag <= thresholds.allowed_lag:
        return Reads.NOTHING
    return Reads.WINDOW
