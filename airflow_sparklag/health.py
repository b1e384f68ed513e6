"""Health of a Spark query from one `LagReport`: Burrow-style rules tried in `RULES` order,
the first that fires is the verdict (docs/lag-and-health.md#health). Each rule also declares
what it reads; `reads_needed`/`ages_needed` turn that into what a check reads."""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from airflow_sparklag.forecast import duration, reads_time_to_breach, rule_time_to_breach
from airflow_sparklag.lag import first_five, single_cluster_warning
from airflow_sparklag.model.report import LagReport, PartitionLag, Reads
from airflow_sparklag.model.verdict import (
    NO_KAFKA_SOURCE,
    REAL_TIME_STOPPED_INTERVALS,
    STOPPED_BUSY_INTERVALS,
    STOPPED_MIN_IDLE_SECONDS,
    Health,
    HealthVerdict,
    PartitionRef,
    RuleResult,
    Thresholds,
)
from airflow_sparklag.pace import rule_batch_time
from airflow_sparklag.positions import more_history, time_lag_reads
from airflow_sparklag.runs import busy_interval, default_grace, observed_period


@dataclass(frozen=True)
class Rule:
    """A health rule and what it reads: ``reads`` the older history ``check`` needs to judge
    the report as on the whole window (``dated``: record ages will be read exactly), ``ages``
    whether it would judge by record ages the estimate left unknown."""

    name: str
    check: Callable[[LagReport, Thresholds, float], RuleResult | None]
    reads: Callable[[LagReport, Thresholds, float, bool], Reads] = lambda *_: Reads.NOTHING
    ages: Callable[[LagReport, Thresholds, float], bool] = lambda *_: False


def _refs(parts: Iterable[PartitionLag]) -> tuple[PartitionRef, ...]:
    return tuple(sorted({PartitionRef(p.topic, p.partition) for p in parts}, key=str))


def _names(refs: tuple[PartitionRef, ...]) -> str:
    return first_five([str(r) for r in refs])


def _on(health: Health, rule: str, reason: str, parts: Iterable[PartitionLag]) -> RuleResult:
    refs = _refs(parts)
    return RuleResult(health, rule, f"{reason} on {_names(refs)}", refs)


def _lagging(report: LagReport, thresholds: Thresholds) -> list[PartitionLag]:
    return [p for p in report.partitions() if p.lag > thresholds.allowed_lag]


def _window_offsets(p: PartitionLag, thresholds: Thresholds) -> list[int]:
    return [o for o in p.offset_history[-thresholds.window :] if o is not None]


def _window_times(report: LagReport, thresholds: Thresholds) -> list[float]:
    return [
        h.timestamp_ms / 1000.0
        for h in report.history[-thresholds.window :]
        if h.timestamp_ms is not None
    ]


def _commit_age(report: LagReport, now: float) -> float | None:
    """Seconds since the last commit; before the first one, since the first batch was planned."""
    if report.committed_at is not None:
        return max(0.0, now - report.committed_at)
    if report.committed_batch_id is None and report.in_flight is not None:
        started = report.in_flight.started_at
        return None if started is None else max(0.0, now - started)
    return report.commit_age_seconds


def _last_activity(report: LagReport, thresholds: Thresholds) -> float | None:
    """The newest sign of life: a batch start, the last commit or the in-flight plan."""
    times = _window_times(report, thresholds)
    flight = report.in_flight.started_at if report.in_flight else None
    candidates = (times[-1] if times else None, report.committed_at, flight)
    return max((t for t in candidates if t is not None), default=None)


def _oldest_waiting(parts: Iterable[PartitionLag]) -> float | None:
    return max((p.lag_seconds for p in parts if p.lag_seconds is not None), default=None)


def rule_data_loss(report: LagReport, thresholds: Thresholds, now: float) -> RuleResult | None:
    lost = [p for p in report.partitions() if p.data_loss]
    if not lost:
        return None
    total = sum(p.records_lost for p in lost)
    reason = f"{total} record(s) deleted before being read (committed < log start)"
    return _on(Health.DATA_LOSS, "data_loss", reason, lost)


def rule_rewind(report: LagReport, thresholds: Thresholds, now: float) -> RuleResult | None:
    """Offsets went backwards and stayed below their earlier maximum, or passed the log end."""
    ahead = [p for p in report.partitions() if p.ahead_of_log]
    rewound = []
    for p in report.partitions():
        offsets = _window_offsets(p, thresholds)
        if len(offsets) >= 2 and offsets[-1] < max(offsets[:-1]):
            rewound.append(p)
    if not ahead:
        reason = "committed offsets went backwards and did not recover"
        return _on(Health.REWIND, "rewind", reason, rewound) if rewound else None
    reason = f"committed offset beyond the log end (topic recreated?) on {_names(_refs(ahead))}"
    return RuleResult(Health.REWIND, "rewind", reason, _refs(ahead + rewound))


def rule_stopped(report: LagReport, thresholds: Thresholds, now: float) -> RuleResult | None:
    """Lag above allowed_lag and no commit: by `max_commit_age_seconds` when set; else, unless
    every record is younger than `max_lag_seconds`, by the schedule or the job's own pace."""
    lagging = _lagging(report, thresholds)
    if not lagging:
        return None
    if thresholds.max_commit_age_seconds is not None:
        return _stopped_commit_age(report, thresholds.max_commit_age_seconds, now, lagging)
    if _fresh(lagging, thresholds):
        return None
    if _period(report) is not None:
        return _stopped_schedule(report, thresholds, now, lagging)
    return _stopped_idle(report, thresholds, now, lagging)


def _period(report: LagReport) -> float | None:
    """A declared schedule's period plus its grace."""
    schedule = report.schedule
    if schedule is None or schedule.runs_every is None:
        return None
    return schedule.runs_every + (schedule.grace or 0.0)


def _fresh(lagging: list[PartitionLag], thresholds: Thresholds) -> bool:
    """Every waiting record is younger than a ``max_lag_seconds`` the user set."""
    limit = thresholds.max_lag_seconds
    return limit is not None and all(
        p.lag_seconds is not None and p.lag_seconds <= limit for p in lagging
    )


def _stopped_commit_age(
    report: LagReport, limit: float, now: float, lagging: list[PartitionLag]
) -> RuleResult | None:
    age = _commit_age(report, now)
    if age is None or age <= limit:
        return None
    waiting = f"(> {limit:g} s) while {report.total_lag} record(s) wait"
    flight = report.in_flight
    if flight is None or flight.started_at is None:
        reason = f"no commit for {age:.0f} s {waiting}"
    elif report.committed_batch_id is None:  # the age is the first batch's
        reason = f"no commit yet: batch {flight.batch_id}, the query's first, in flight for "
        reason += f"{age:.0f} s {waiting}"
    else:
        running = max(0.0, now - flight.started_at)
        reason = f"no commit for {age:.0f} s {waiting}; batch {flight.batch_id} in flight for "
        reason += f"{running:.0f} s"
    return RuleResult(Health.STOPPED, "stopped", reason, _refs(lagging))


def _stopped_schedule(
    report: LagReport, thresholds: Thresholds, now: float, lagging: list[PartitionLag]
) -> RuleResult | None:
    """No run within `runs_every` + grace while records waited longer than that (a run on an
    idle topic leaves no batch, so only records that waited a whole period prove a miss)."""
    schedule, period = report.schedule, _period(report)
    assert schedule is not None and period is not None
    last = _last_activity(report, thresholds)
    waited = _oldest_waiting(lagging)
    if last is None or now - last <= period or waited is None or waited <= period:
        return None
    reason = (
        f"no run for {now - last:.0f} s, longer than its schedule (every "
        f"{schedule.runs_every:g} s + {schedule.grace or 0:g} s grace), while "
        f"{report.total_lag} record(s) wait, the oldest for {waited:.0f} s"
    )
    return RuleResult(Health.STOPPED, "stopped_schedule", reason, _refs(lagging))


def _stopped_idle(
    report: LagReport, thresholds: Thresholds, now: float, lagging: list[PartitionLag]
) -> RuleResult | None:
    """No batch planned for `STOPPED_BUSY_INTERVALS` busy-batch intervals (`_idle_limit`) while
    records waited that long: the records' age keeps one that arrived after a quiet spell from
    looking like a stopped query."""
    pace = _idle_limit(report, thresholds)
    last = _last_activity(report, thresholds)
    if pace is None or last is None:
        return None
    busy, limit = pace
    idle = now - last
    waited = _oldest_waiting(lagging)
    if idle <= limit or waited is None or waited <= limit:
        return None
    reason = (
        f"no {_batch_word(report)} for {idle:.0f} s while {report.total_lag} record(s) wait (the "
        f"oldest for {waited:.0f} s): more than {STOPPED_BUSY_INTERVALS} times the {busy:.1f} s "
        f"it usually takes between {_batch_word(report, plural=True)}"
    )
    if report.schedule is not None and report.schedule.looks_scheduled:
        # Undeclared but runs-shaped (AvailableNow/Once started by a scheduler): idle within
        # the period its runs came at, plus the default grace, is between runs, not stopped.
        every = observed_period(report.history)
        if every is not None and idle <= every + default_grace(every):
            return None
        seen = f", although its runs came at most {every:.0f} s apart" if every else ""
        reason += (
            f"; the job looks scheduled (runs of batches with records waiting between them"
            f"{seen}): declare runs_every (--runs-every) to judge it by its schedule"
        )
    return RuleResult(Health.STOPPED, "stopped_idle", reason, _refs(lagging))


def _idle_limit(report: LagReport, thresholds: Thresholds) -> tuple[float, float] | None:
    """(busy-batch interval, idle limit) of the threshold-free STOPPED rule; None when the
    window cannot measure them."""
    # Epochs of the continuous trigger come at its interval whether they read records or not.
    busy = busy_interval(report.history[-thresholds.window :], every_batch=report.continuous)
    if len(_window_times(report, thresholds)) < thresholds.min_window or not busy:
        return None
    scaled = STOPPED_BUSY_INTERVALS * busy * _in_flight_scale(report)
    return busy, max(STOPPED_MIN_IDLE_SECONDS, scaled)


def _in_flight_scale(report: LagReport) -> float:
    """How much longer than a usual batch the in-flight one may take: the records it planned
    over the usual records of a busy batch (a first batch after an outage reads a backlog)."""
    flight = report.in_flight
    usual = [h.records for h in report.history if h.records]
    if flight is None or not usual or flight.planned_records <= 0:
        return 1.0
    return max(1.0, flight.planned_records / statistics.median(usual))


def rule_stopped_real_time(
    report: LagReport, thresholds: Thresholds, now: float
) -> RuleResult | None:
    """A real-time query checkpoints every interval, records or not: none for
    `REAL_TIME_STOPPED_INTERVALS` intervals (or `max_commit_age_seconds`) while records wait."""
    real_time = report.real_time
    if real_time is None:
        return None
    waiting = [
        p for p in report.partitions() if p.lag + (p.since_checkpoint or 0) > thresholds.allowed_lag
    ]
    limit = thresholds.max_commit_age_seconds
    if limit is None:
        limit = max(
            STOPPED_MIN_IDLE_SECONDS, REAL_TIME_STOPPED_INTERVALS * real_time.interval_seconds
        )
    idle = now - real_time.checkpoint_at
    if not waiting or idle <= limit:
        return None
    count = sum(p.lag + (p.since_checkpoint or 0) for p in waiting)
    reason = (
        f"no checkpoint for {idle:.0f} s (> {limit:g} s; the real-time query checkpoints every "
        f"{real_time.interval_seconds:.1f} s) while {count} record(s) wait"
    )
    return RuleResult(Health.STOPPED, "stopped_real_time", reason, _refs(waiting))


def needs_record_ages(report: LagReport, thresholds: Thresholds, now: float) -> bool:
    """Would a STOPPED rule, or the short-history one, decide if the waiting records' age were
    known? (The estimate cannot date records after a quiet spell, nor a continuous query's.)"""
    if thresholds.max_commit_age_seconds is not None:
        return False
    if all(p.lag_seconds is not None for p in _lagging(report, thresholds)):  # or none lags
        return False
    last = _last_activity(report, thresholds)
    if last is None:
        return False
    period = _period(report)
    if period is not None:
        return now - last > period
    pace = _idle_limit(report, thresholds)
    return now - last > (STOPPED_MIN_IDLE_SECONDS if pace is None else pace[1])


def rule_short_history(report: LagReport, thresholds: Thresholds, now: float) -> RuleResult | None:
    """UNKNOWN, never OK, for a job ``rule_stopped`` would judge by a pace its history is too
    short to measure, idle with records waiting past ``STOPPED_MIN_IDLE_SECONDS``."""
    lagging = _lagging(report, thresholds)
    if report.committed_batch_id is None or not lagging or _fresh(lagging, thresholds):
        return None
    if thresholds.max_commit_age_seconds is not None or _period(report) is not None:
        return None  # rule_stopped judges it by those, not by its own pace
    if _idle_limit(report, thresholds) is not None:
        return None
    last = _last_activity(report, thresholds)
    waited = _oldest_waiting(lagging)
    bound = STOPPED_MIN_IDLE_SECONDS
    if last is None or now - last <= bound or waited is None or waited <= bound:
        return None
    timed = len(_window_times(report, thresholds))
    if timed < thresholds.min_window:
        words = _batch_word(report, plural=timed != 1)
        short = f"{timed} {words} with a time in the window, {thresholds.min_window} needed"
    else:
        short = f"no interval between {_batch_word(report, plural=True)} that read records"
    flight = report.in_flight
    if flight is not None and flight.started_at is not None and flight.started_at >= last:
        word = _batch_word(report)
        quiet = f"{word} {flight.batch_id} in flight for {now - flight.started_at:.0f} s"
    else:
        quiet = f"no commit for {now - last:.0f} s"
    reason = (
        f"not enough history to judge ({short}): {quiet} while {report.total_lag} record(s) "
        f"wait, the oldest for {waited:.0f} s (more than {bound:g} s); to judge it declare "
        "runs_every (--runs-every) if it runs on a schedule, else max_commit_age_seconds "
        "(--max-commit-age-seconds)"
    )
    return RuleResult(Health.UNKNOWN, "short_history", reason, _refs(lagging))


def _batch_word(report: LagReport, *, plural: bool = False) -> str:
    """A continuous query's batches are epochs."""
    word = "epoch" if report.continuous else "batch"
    return word + ("es" if word == "batch" else "s") if plural else word


def rule_stalled(report: LagReport, thresholds: Thresholds, now: float) -> RuleResult | None:
    """A batch runs too long, or batches commit while a lagging partition does not move and
    its first unread record is older than the newest batch (a younger one just waits for the
    next; the estimate always dates it after that batch: only exact mode shows one stuck)."""
    flight = report.in_flight
    limit = thresholds.max_in_flight_seconds
    if flight is not None and limit is not None and flight.started_at is not None:
        age = max(0.0, now - flight.started_at)
        if age > limit:
            running = f"batch {flight.batch_id} running for {age:.0f} s (> {limit:g} s)"
            return RuleResult(Health.STALLED, "stalled", f"{running} without a commit")
    times = _window_times(report, thresholds)
    newest = times[-1] if times else None
    stuck = []
    for p in _lagging(report, thresholds):
        offsets = _window_offsets(p, thresholds)
        if len(offsets) < thresholds.min_window or len(set(offsets)) != 1:
            continue
        if newest is None or p.lag_seconds is None or p.lag_seconds <= now - newest:
            continue  # the unread records may be younger than the newest batch
        stuck.append(p)
    if not stuck:
        return None
    reason = (
        f"batches commit but the offset did not move for {thresholds.min_window}+ batches "
        "while records wait"
    )
    return _on(Health.STALLED, "stalled", reason, stuck)


def _grew(p: PartitionLag, thresholds: Thresholds) -> bool:
    """The lag grew at every batch of the window, then to the live lag. Without
    maxOffsetsPerTrigger Spark plans up to the log end, so offsets/N - offsets/N-1 is the
    backlog when N started."""
    history = p.offset_history[-(thresholds.window + 1) :]
    samples = [b - a for a, b in itertools.pairwise(history) if a is not None and b is not None]
    # At least min_window backlog samples besides the live lag: with fewer (a job keeping
    # only 2 or 3 batches) a steady stream "grows" by chance at one poll in six.
    if len(samples) < thresholds.min_window:
        return False
    return all(b > a for a, b in itertools.pairwise([*samples, p.lag]))


def rule_lagging(report: LagReport, thresholds: Thresholds, now: float) -> RuleResult | None:
    """A lag threshold is breached, or a partition's lag grew at every batch of the window."""
    parts = list(report.partitions())
    per_partition = thresholds.max_lag_records_per_partition
    if per_partition is not None:
        over = [p for p in parts if p.lag > per_partition]
        if over:
            worst = max(p.lag for p in over)
            return _on(Health.LAGGING, "lagging", f"lag {worst} records > {per_partition}", over)
    total_limit = thresholds.max_lag_records_total
    if total_limit is not None and report.total_lag > total_limit:
        reason = f"total lag {report.total_lag} records > {total_limit}"
        return RuleResult(Health.LAGGING, "lagging", reason, _refs(p for p in parts if p.lag > 0))
    seconds_limit = thresholds.max_lag_seconds
    if seconds_limit is not None:
        late = [p for p in parts if p.lag_seconds is not None and p.lag_seconds > seconds_limit]
        if late:
            worst_s = max(p.lag_seconds or 0.0 for p in late)
            reason = f"lag {worst_s:.0f} s > {seconds_limit:g} s"
            return _on(Health.LAGGING, "lagging", reason, late)
    growing = [p for p in _lagging(report, thresholds) if _grew(p, thresholds)]
    if growing:
        return _on(Health.LAGGING, "lagging", "lag grew at every batch of the window", growing)
    return None


def rule_time_to_loss(report: LagReport, thresholds: Thresholds, now: float) -> RuleResult | None:
    """Retention would delete an unread record sooner than ``Thresholds.loss_bound``; a worse
    verdict names it in its reason (``_verdict``)."""
    soon = [
        (p, bound)
        for p in _lagging(report, thresholds)
        if p.time_to_loss_seconds is not None
        and p.time_to_loss_seconds < (bound := thresholds.loss_bound(p.retention_seconds))
    ]
    if not soon:
        return None
    first, bound = min(soon, key=lambda found: found[0].time_to_loss_seconds or 0.0)
    retention = first.retention_seconds
    limit = duration(bound)
    if retention:
        limit += f", {bound / retention:.0%} of its {duration(retention)} retention"
    refs = _refs([p for p, _ in soon])
    reason = (
        f"retention deletes unread records in {duration(first.time_to_loss_seconds)} "
        f"(< {limit}) on {_names(refs)}: {LOSS_NEXT_STEP}"
    )
    return RuleResult(Health.LAGGING, "time_to_data_loss", reason, refs)


# What an operator does when records are about to be deleted unread.
LOSS_NEXT_STEP = (
    "restart or scale the job before then (raise maxOffsetsPerTrigger or its resources), or "
    "raise the topic's retention.ms; if it cannot catch up, snapshot its offsets first "
    "(sparklag snapshot) and migrate"
)


def ages_time_to_loss(report: LagReport, thresholds: Thresholds, now: float) -> bool:
    """A lagging partition of a topic that deletes by age whose record the estimate cannot
    date, while the warning is on: its time to loss is counted from that record's age."""
    return any(
        p.lag > thresholds.allowed_lag
        and p.lag_seconds is None
        and p.retention_seconds is not None
        and thresholds.loss_bound(p.retention_seconds) > 0
        for p in report.partitions()
    )


def rule_lagging_real_time(
    report: LagReport, thresholds: Thresholds, now: float
) -> RuleResult | None:
    """A real-time query's lag as of its `min_window` newest checkpoints grew past what its
    last interval read. An interval reads what it could process, flat when saturated, so
    `rule_lagging`'s trend cannot see it."""
    real_time = report.real_time
    if real_time is None or not report.history:
        return None
    lags = real_time.checkpoint_lags[-thresholds.min_window :]
    read = report.history[-1].records
    if len(lags) < thresholds.min_window or read is None:
        return None
    known = [lag for lag in lags if lag is not None]
    if len(known) < len(lags) or known[-1] <= max(read, thresholds.allowed_lag):
        return None
    if not all(b > a for a, b in itertools.pairwise(known)):
        return None
    reason = (
        f"lag as of the checkpoint grew at each of the last {len(known)} checkpoints "
        f"({' -> '.join(str(lag) for lag in known)} records), past what its last interval "
        f"read ({read})"
    )
    refs = _refs(_lagging(report, thresholds))
    return RuleResult(Health.LAGGING, "lagging_real_time", reason, refs)


def _newest_read(p: PartitionLag) -> int | None:
    """Records the newest batch read from ``p`` (offsets/C - offsets/C-1)."""
    h = p.offset_history
    if len(h) < 2 or h[-1] is None or h[-2] is None:
        return None
    return h[-1] - h[-2]


def reads_rewind(report: LagReport, thresholds: Thresholds, now: float, dated: bool) -> Reads:
    """The window when a partition points at a recreated topic or went back between the two
    newest batches (known limit: a rewind older than offsets/C-1 is not seen)."""
    for p in report.partitions():
        if p.data_loss or p.ahead_of_log or p.removed_partition:
            return Reads.WINDOW
        read = _newest_read(p)
        if read is not None and read < 0:
            return Reads.WINDOW
    return Reads.NOTHING


def reads_stopped(report: LagReport, thresholds: Thresholds, now: float, dated: bool) -> Reads:
    """The window for a declared schedule, or a lagging job idle past
    ``STOPPED_MIN_IDLE_SECONDS`` without ``max_commit_age_seconds`` (its busy-batch interval is
    the window's; offsets/C-1 alone never settles it)."""
    if _period(report) is not None:
        return Reads.WINDOW
    if not _lagging(report, thresholds) or thresholds.max_commit_age_seconds is not None:
        return Reads.NOTHING
    last = _last_activity(report, thresholds)
    if last is not None and now - last > STOPPED_MIN_IDLE_SECONDS:
        return Reads.WINDOW
    return Reads.NOTHING


def reads_stalled(report: LagReport, thresholds: Thresholds, now: float, dated: bool) -> Reads:
    """More for a lagging partition the newest batch did not move, when dated exactly (the
    estimate always dates a waiting record after the newest batch)."""
    for p in _lagging(report, thresholds):
        read = _newest_read(p)
        if read is None or (dated and read == 0):
            return more_history(report)
    return Reads.NOTHING


def reads_lagging(report: LagReport, thresholds: Thresholds, now: float, dated: bool) -> Reads:
    """More for a lagging partition whose lag is above what the newest batch read."""
    for p in _lagging(report, thresholds):
        read = _newest_read(p)
        if read is None or p.lag > read:
            return more_history(report)
    return Reads.NOTHING


def reads_lagging_real_time(
    report: LagReport, thresholds: Thresholds, now: float, dated: bool
) -> Reads:
    """More for a real-time query whose lag is above what its newest interval read."""
    if report.real_time is None or report.total_lag <= thresholds.allowed_lag:
        return Reads.NOTHING
    read = report.history[-1].records if report.history else None
    if read is None or report.total_lag > read:
        return more_history(report)
    return Reads.NOTHING


def ages_lagging(report: LagReport, thresholds: Thresholds, now: float) -> bool:
    """A ``max_lag_seconds`` threshold and a lagging partition the estimate cannot date."""
    return thresholds.max_lag_seconds is not None and any(
        p.lag > 0 and p.lag_seconds is None for p in report.partitions()
    )


RULES: tuple[Rule, ...] = (
    Rule("data_loss", rule_data_loss),
    Rule("rewind", rule_rewind, reads_rewind),
    Rule("stopped", rule_stopped, reads_stopped, needs_record_ages),
    Rule("stopped_real_time", rule_stopped_real_time),
    Rule("stalled", rule_stalled, reads_stalled),
    Rule("time_to_data_loss", rule_time_to_loss, ages=ages_time_to_loss),
    Rule("lagging", rule_lagging, reads_lagging, ages_lagging),
    Rule("lagging_real_time", rule_lagging_real_time, reads_lagging_real_time),
    Rule("time_to_breach", rule_time_to_breach, reads_time_to_breach),  # forecast.py
    Rule("batch_time", rule_batch_time),  # pace.py: the listing's times
    Rule("short_history", rule_short_history, reads_stopped, needs_record_ages),
)


def ages_needed(report: LagReport, thresholds: Thresholds, now: float) -> tuple[str, ...]:
    """The rules that need the age of waiting records the estimate could not give."""
    return tuple(rule.name for rule in RULES if rule.ages(report, thresholds, now))


TIME_LAG = "time lag"  # the time-lag estimate, when it asks for older batches


def reads_needed(
    report: LagReport, thresholds: Thresholds, now: float, *, exact_time_lag: bool = False
) -> tuple[Reads, tuple[str, ...]]:
    """The older history ``report`` needs to be judged as on the whole window: the most the
    rules and the time-lag estimate declare, and who declared it."""
    dated = exact_time_lag or bool(ages_needed(report, thresholds, now))
    needs = {TIME_LAG: time_lag_reads(report)}
    needs.update({rule.name: rule.reads(report, thresholds, now, dated) for rule in RULES})
    most = max(needs.values())
    return most, tuple(name for name, reads in needs.items() if most and reads == most)


def waiting_wanted(report: LagReport, thresholds: Thresholds, now: float) -> bool:
    """Kafka's offsets before the last run are wanted when the verdict would be STOPPED by the
    job's own pace: records that waited between runs show a job started by a scheduler."""
    if report.schedule is not None or _unjudged(report) is not None:
        return False
    if rule_data_loss(report, thresholds, now) or rule_rewind(report, thresholds, now):
        return False
    found = rule_stopped(report, thresholds, now)
    return found is not None and found.rule == "stopped_idle"


def changes_at(report: LagReport, thresholds: Thresholds) -> tuple[float, ...]:
    """When (epoch s) a rule may judge the job differently with nothing new written (a time
    limit passing): a point-read poll then lists again (``CheckpointReader.confirm_at``)."""
    moments = []
    limit = thresholds.max_commit_age_seconds
    if limit is not None and report.committed_at is not None:
        moments.append(report.committed_at + limit)
    last = _last_activity(report, thresholds)
    if last is not None:
        pace = _idle_limit(report, thresholds)
        idle_limits = (STOPPED_MIN_IDLE_SECONDS, pace[1] if pace else None, _period(report))
        moments += [last + idle for idle in idle_limits if idle is not None]
    flight, in_flight = report.in_flight, thresholds.max_in_flight_seconds
    if flight is not None and flight.started_at is not None and in_flight is not None:
        moments.append(flight.started_at + in_flight)
    return tuple(sorted(moments))


def evaluate(
    report: LagReport, thresholds: Thresholds | None = None, *, now: float | None = None
) -> HealthVerdict:
    """Run the rules in order; the first (worst) that fires is the verdict. `now` defaults to
    the report's `generated_at`, so a stored report gives the same verdict again.

    >>> evaluate(report, Thresholds(max_commit_age_seconds=900)).health  # doctest: +SKIP
    <Health.OK: 'OK'>
    """
    verdict = _verdict(report, thresholds or Thresholds(), now)
    warning = single_cluster_warning(report)
    if warning is None:
        return verdict
    return dataclasses.replace(verdict, reason=f"{verdict.reason}; warning: {warning}")


def _verdict(report: LagReport, thresholds: Thresholds, now: float | None) -> HealthVerdict:
    now = report.generated_at if now is None else now
    unjudged = _unjudged(report)
    if unjudged is not None:
        return unjudged
    findings = tuple(r for r in (rule.check(report, thresholds, now) for rule in RULES) if r)
    pending = _first_batch_pending(report, now)
    if findings:
        first = findings[0]
        named = first.rule == "stopped"  # the commit-age rule names the first batch itself
        reason = first.reason if pending is None or named else f"{first.reason} ({pending})"
        if first.rule == "lagging" and report.real_time is not None:
            reason = f"{reason} {_as_of_checkpoint(report)}"
        if any(f.rule == "time_to_data_loss" for f in findings[1:]):  # each rule fires once
            soonest = report.min_time_to_loss_seconds
            reason += f"; retention deletes unread records in {duration(soonest)}: {LOSS_NEXT_STEP}"
        return HealthVerdict(first.health, reason, first.rule, first.partitions, findings)
    unknown = "; ".join(
        f"source {s.source_id}: {s.lag_unknown}" for s in report.kafka_sources if s.lag_unknown
    )
    lag_unknown = f"lag unknown: {unknown}" if unknown else None
    if pending is not None:
        measured = lag_unknown or f"lag {report.total_lag} record(s) from the offsets it started at"
        return HealthVerdict(Health.UNKNOWN, f"{pending}; {measured}", "no_commit")
    if report.missing_topics:
        missing = f"topic(s) {', '.join(report.missing_topics)} not found in the cluster"
        return HealthVerdict(Health.UNKNOWN, lag_unknown or missing, "topic_missing")
    as_of = "" if report.real_time is None else f" {_as_of_checkpoint(report)}"
    return HealthVerdict(Health.OK, f"lag {report.total_lag} record(s){as_of}", "ok")


def _unjudged(report: LagReport) -> HealthVerdict | None:
    # A real-time query's first offsets file is written with its first checkpoint.
    real_time = report.trigger == "real-time"
    if report.committed_batch_id is None and (report.in_flight is None or real_time):
        return HealthVerdict(Health.UNKNOWN, "no committed batch yet", "no_commit")
    if not report.kafka_sources:
        return NO_KAFKA_SOURCE
    return None


def _as_of_checkpoint(report: LagReport) -> str:
    since = report.real_time.produced_since if report.real_time else None
    return (
        f"as of the newest checkpoint (real-time trigger; {since} record(s) produced since, "
        "read as they arrive)"
    )


def _first_batch_pending(report: LagReport, now: float) -> str | None:
    """ "the query has not committed a batch yet (...)" while its first batch is in flight."""
    flight = report.in_flight
    if report.committed_batch_id is not None or flight is None:
        return None
    running = "" if flight.started_at is None else f" for {max(0.0, now - flight.started_at):.0f} s"
    return f"the query has not committed a batch yet: batch {flight.batch_id} in flight{running}"
