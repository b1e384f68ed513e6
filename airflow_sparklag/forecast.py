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


def _growth(report: LagReport) -> tuple[float | None, float | None, str | None]:
    """(the backlog's net growth in records/s, else the forecast's seconds: math.inf when it
    does not grow, None when unknown; and why there is no forecast)."""
    consumed, produced = report.consumption_rate, report.production_rate
    if consumed is None or produced is None:
        count = len(report.history)
        return None, None, f"rates unknown ({count} batch(es) read; two timed batches are needed)"
    if produced - consumed <= NOISE_SHARE * produced:
        rates = f"{produced:.1f} records/s produced, {consumed:.1f} consumed"
        return None, math.inf, f"the backlog does not grow ({rates})"
    return produced - consumed, None, None


def time_to_breach(report: LagReport, thresholds: Thresholds | None) -> tuple[Breach, ...]:
    """When each lag threshold set is crossed at the report's rates. The worst partition grows
    at most at the whole job's net rate (rates are not per partition), so its time is the
    earliest; the oldest waiting record ages ``growth / produced`` seconds a second."""
    if thresholds is None or not report.kafka_sources or report.committed_batch_id is None:
        return ()
    growth, seconds, unknown = _growth(report)
    produced = report.production_rate or 0.0
    # (threshold, measured value, its growth per record/s of the backlog's growth)
    measured = (
        ("max_lag_records_total", report.total_lag, 1.0),
        ("max_lag_records_per_partition", report.max_lag, 1.0),
        ("max_lag_seconds", report.max_lag_seconds, 1.0 / produced if produced else 0.0),
    )
    found = []
    for name, current, per_second in measured:
        limit = getattr(thresholds, name)
        if limit is None:
            continue
        if current is None:
            age = "the waiting records' age is unknown"
            found.append(Breach(name, limit, None, None, growth, age))
        elif current > limit:
            found.append(Breach(name, limit, current, 0.0, growth))
        elif growth is None:
            found.append(Breach(name, limit, current, seconds, None, unknown))
        else:
            left = (limit - current) / (growth * per_second)
            found.append(Breach(name, limit, current, left, growth))
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
