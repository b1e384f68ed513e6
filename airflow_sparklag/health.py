"""Health of a Spark query from one `LagReport`: Burrow-style rules, no daemon, no warm-up.

The retained offsets files are the history window, so a single check can judge trends. Each
rule is a pure function `(report, thresholds, now) -> RuleResult | None`, tried in `RULES`
order; the first that fires is the verdict (docs/lag-and-health.md#health says when each
fires). A threshold the user set outranks the threshold-free rules. Each rule also declares
what it reads (`Rule.reads`, `Rule.ages`); `reads_needed`/`ages_needed` are the one place a
newest-first check learns from them what to read.
"""

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
    """A health rule and what it reads, so a check reads no more and no less than it needs.

    ``reads(report, thresholds, now, dated)`` declares the older history ``check`` needs to
    judge ``report`` as on the whole window (``dated``: the waiting records' ages will be read
    exactly); ``ages`` whether it would judge by record ages the estimate left unknown. A rule
    that declares too little gets a lazy verdict that differs from the full read's
    (tests/unit/test_check_requests_shapes.py).
    """

    name: str
    check: Callable[[LagReport, Thresholds, float], RuleResult | None]
    reads: Callable[[LagReport, Thresholds, float, bool], Reads] = lambda *_: Reads.NOTHING
    ages: Callable[[LagReport, Thresholds, float], bool] = lambda *_: False


# -- helpers -----------------------------------------------------------------------------------


def _refs(parts: Iterable[PartitionLag]) -> tuple[PartitionRef, ...]:
    return tuple(sorted({PartitionRef(p.topic, p.partition) for p in parts}, key=str))


def _names(refs: tuple[PartitionRef, ...]) -> str:
    return first_five([str(r) for r in refs])


def _on(health: Health, rule: str, reason: str, parts: Iterable[PartitionLag]) -> RuleResult:
    """A finding on ``parts``, named at the end of its reason."""
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
    known = [t for t in candidates if t is not None]
    return max(known) if known else None


def _oldest_waiting(parts: Iterable[PartitionLag]) -> float | None:
    """Age of the oldest first-unread record among ``parts``; None when none is known."""
    known = [p.lag_seconds for p in parts if p.lag_seconds is not None]
    return max(known) if known else None


# -- rules, in order -----------------------------------------------------------------------------


def rule_data_loss(report: LagReport, thresholds: Thresholds, now: float) -> RuleResult | None:
    """Committed offset below the log start: those records were deleted unread."""
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
    """Lag above allowed_lag and the query stopped committing.

    The user's `max_commit_age_seconds`, when set, alone decides. Otherwise records younger
    than a `max_lag_seconds` the user set are fresh enough (not STOPPED); a declared scheduled
    job is judged by its schedule (`_stopped_schedule`), any other job by its own pace
    (`_stopped_idle`).
    """
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
    """A declared schedule's period plus its grace; None when no ``runs_every`` is declared."""
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


def _by_own_pace(report: LagReport, thresholds: Thresholds, lagging: list[PartitionLag]) -> bool:
    """Would ``rule_stopped`` judge this job by its own pace? Records wait, neither
    ``max_commit_age_seconds`` nor a schedule is declared, and they are not all fresh."""
    return (
        bool(lagging)
        and thresholds.max_commit_age_seconds is None
        and _period(report) is None
        and not _fresh(lagging, thresholds)
    )


def _stopped_commit_age(
    report: LagReport, limit: float, now: float, lagging: list[PartitionLag]
) -> RuleResult | None:
    """No commit for longer than ``limit`` (``_commit_age``: since the last commit, or since
    the first batch was planned): STOPPED, a batch in flight or not; the reason names it."""
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
    """Declared scheduled job: no run started within `runs_every` + grace, while records have
    waited longer than that (a run on an idle topic leaves no batch, so only records that
    waited a whole period prove a run was missed). Idle between runs is never STOPPED."""
    schedule, period = report.schedule, _period(report)
    assert schedule is not None and period is not None
    last = _last_activity(report, thresholds)
    waited = _oldest_waiting(lagging)
    if last is None or now - last <= period or waited is None or waited <= period:
        return None
    return RuleResult(
        Health.STOPPED,
        "stopped_schedule",
        f"no run for {now - last:.0f} s, longer than its schedule (every "
        f"{schedule.runs_every:g} s + {schedule.grace or 0:g} s grace), while "
        f"{report.total_lag} record(s) wait, the oldest for {waited:.0f} s",
        _refs(lagging),
    )


def _stopped_idle(
    report: LagReport, thresholds: Thresholds, now: float, lagging: list[PartitionLag]
) -> RuleResult | None:
    """No batch planned for `STOPPED_BUSY_INTERVALS` of the job's usual intervals between
    batches that read records (`_idle_limit`), while records waited that long.

    Judged against the busy batches, not the window's span, so idle stretches do not hide a
    stopped bursty job; the waiting records' age keeps a record that arrived a moment ago after
    a quiet spell from looking like a stopped query.
    """
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
    window holds fewer than `min_window` timed batches or no interval of a busy batch."""
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
    """A real-time query whose checkpoints stopped while records wait (its lag as of the
    checkpoint or records produced since). It checkpoints every interval, records or not, so
    no checkpoint for `REAL_TIME_STOPPED_INTERVALS` intervals and at least
    `STOPPED_MIN_IDLE_SECONDS` (the user's `max_commit_age_seconds` instead, when set) means
    it is not running."""
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
    return RuleResult(
        Health.STOPPED,
        "stopped_real_time",
        f"no checkpoint for {idle:.0f} s (> {limit:g} s; the real-time query checkpoints every "
        f"{real_time.interval_seconds:.1f} s) while {count} record(s) wait",
        _refs(waiting),
    )


def needs_record_ages(report: LagReport, thresholds: Thresholds, now: float) -> bool:
    """Would a STOPPED rule, or the short-history one, decide if the waiting records' age were
    known? (A check then reads their timestamps: the estimate cannot date records that arrived
    after a quiet spell, nor any of a continuous query.)"""
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
    """UNKNOWN for a job ``rule_stopped`` would judge by its own pace but whose history is too
    short to measure one (``_idle_limit`` is None), idle with records waiting for more than
    ``STOPPED_MIN_IDLE_SECONDS``. Not STOPPED: one batch cannot tell a dead query from a slow
    trigger or a scheduled job; but never OK."""
    lagging = _lagging(report, thresholds)
    if report.committed_batch_id is None or not _by_own_pace(report, thresholds, lagging):
        return None
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
    return RuleResult(
        Health.UNKNOWN,
        "short_history",
        f"not enough history to judge ({short}): {quiet} while {report.total_lag} record(s) "
        f"wait, the oldest for {waited:.0f} s (more than {bound:g} s); to judge it declare "
        "runs_every (--runs-every) if it runs on a schedule, else max_commit_age_seconds "
        "(--max-commit-age-seconds)",
        _refs(lagging),
    )


def _batch_word(report: LagReport, *, plural: bool = False) -> str:
    """What a job's batches are called: a continuous query's are epochs."""
    word = "epoch" if report.continuous else "batch"
    return word + ("es" if word == "batch" else "s") if plural else word


def rule_stalled(report: LagReport, thresholds: Thresholds, now: float) -> RuleResult | None:
    """A batch runs too long, or batches commit while a lagging partition does not move.

    The second check needs `min_window` batches with the same offset and the first unread
    record known to be older than the newest batch: a record that arrived after the newest
    batch was planned is simply waiting for the next one (a quiet partition of a busy topic).
    Without a rate limit the estimate always places it after that batch, so in estimate mode
    only a record timestamp (exact mode) can show a partition stuck.
    """
    flight = report.in_flight
    limit = thresholds.max_in_flight_seconds
    if flight is not None and limit is not None and flight.started_at is not None:
        age = max(0.0, now - flight.started_at)
        if age > limit:
            return RuleResult(
                Health.STALLED,
                "stalled",
                f"batch {flight.batch_id} running for {age:.0f} s (> {limit:g} s) without a commit",
            )
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


def _lag_samples(p: PartitionLag, thresholds: Thresholds) -> list[int]:
    """Lag at the planning of each batch in the window (the caller adds the live lag).

    Without maxOffsetsPerTrigger Spark plans up to the log end, so offsets/N - offsets/N-1 is
    exactly the backlog when batch N started; with a rate limit it is a lower bound.
    """
    history = p.offset_history[-(thresholds.window + 1) :]
    return [b - a for a, b in itertools.pairwise(history) if a is not None and b is not None]


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
        refs = _refs(p for p in parts if p.lag > 0)
        return RuleResult(
            Health.LAGGING,
            "lagging",
            f"total lag {report.total_lag} records > {total_limit}",
            refs,
        )
    seconds_limit = thresholds.max_lag_seconds
    if seconds_limit is not None:
        late = [p for p in parts if p.lag_seconds is not None and p.lag_seconds > seconds_limit]
        if late:
            worst_s = max(p.lag_seconds or 0.0 for p in late)
            reason = f"lag {worst_s:.0f} s > {seconds_limit:g} s"
            return _on(Health.LAGGING, "lagging", reason, late)
    growing = []
    for p in _lagging(report, thresholds):
        samples = _lag_samples(p, thresholds)
        # At least min_window backlog samples besides the live lag: with fewer (a job keeping
        # only 2 or 3 batches) a steady stream "grows" by chance at one poll in six.
        if len(samples) < thresholds.min_window:
            continue
        if all(b > a for a, b in itertools.pairwise([*samples, p.lag])):
            growing.append(p)
    if growing:
        return _on(Health.LAGGING, "lagging", "lag grew at every batch of the window", growing)
    return None


def rule_time_to_loss(report: LagReport, thresholds: Thresholds, now: float) -> RuleResult | None:
    """Retention would delete an unread record sooner than ``Thresholds.loss_bound`` (at
    defaults: within a quarter of the topic's retention.ms, at most 6 h ahead): LAGGING,
    rule ``time_to_data_loss``, with what to do. Partitions whose time to loss is unknown do
    not fire; a worse verdict names it in its reason (``_verdict``)."""
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
    """A lagging partition of a topic that deletes by age, whose waiting record the estimate
    cannot date, while the warning is on: the time to loss is counted from that record's age,
    so it is read (every report where records wait then has its time to loss)."""
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
    """A real-time query falling behind: its lag as of each of its `min_window` newest
    checkpoints grew, and the newest is more than its last interval read (it is more than an
    interval behind). What a real-time batch reads is what the interval could process, flat
    when the query is saturated, so `rule_lagging`'s trend cannot see it; its thresholds
    judge the lag as of the checkpoint."""
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
    return RuleResult(
        Health.LAGGING,
        "lagging_real_time",
        f"lag as of the checkpoint grew at each of the last {len(known)} checkpoints "
        f"({' -> '.join(str(lag) for lag in known)} records), past what its last interval "
        f"read ({read})",
        _refs(_lagging(report, thresholds)),
    )


# -- what each rule reads ------------------------------------------------------------------------


def _newest_read(p: PartitionLag) -> int | None:
    """Records the newest batch read from ``p`` (offsets/C - offsets/C-1); None unknown."""
    h = p.offset_history
    if len(h) < 2 or h[-1] is None or h[-2] is None:
        return None
    return h[-1] - h[-2]


def reads_rewind(report: LagReport, thresholds: Thresholds, now: float, dated: bool) -> Reads:
    """The window, at once, when lost records, an offset beyond the log end or a partition
    Kafka no longer has point at a recreated topic, or an offset went back between the two
    newest batches: the rewound partitions are named over the window. Otherwise nothing (the
    known limit: a rewind older than offsets/C-1 that no offsets file shows)."""
    for p in report.partitions():
        if p.data_loss or p.ahead_of_log or p.removed_partition:
            return Reads.WINDOW
        read = _newest_read(p)
        if read is not None and read < 0:
            return Reads.WINDOW
    return Reads.NOTHING


def reads_stopped(report: LagReport, thresholds: Thresholds, now: float, dated: bool) -> Reads:
    """A declared schedule: the window (its runs). Without ``max_commit_age_seconds``, a
    lagging job idle for more than ``STOPPED_MIN_IDLE_SECONDS`` since its newest batch,
    commit or plan: the whole window at once (the busy-batch interval is measured over the
    window, and only the window says whether it is too short for one: the short-history rule
    reads the same; offsets/C-1 alone never settles it, so it is not read as a step first)."""
    if _period(report) is not None:
        return Reads.WINDOW
    if not _lagging(report, thresholds) or thresholds.max_commit_age_seconds is not None:
        return Reads.NOTHING
    last = _last_activity(report, thresholds)
    if last is not None and now - last > STOPPED_MIN_IDLE_SECONDS:
        return Reads.WINDOW
    return Reads.NOTHING


def reads_stalled(report: LagReport, thresholds: Thresholds, now: float, dated: bool) -> Reads:
    """A lagging partition the newest batch did not move (or that is not in both newest
    batches), when its records are dated exactly: more. The estimate always dates a waiting
    record after the newest batch, so undated it cannot look stuck."""
    for p in _lagging(report, thresholds):
        read = _newest_read(p)
        if read is None or (dated and read == 0):
            return more_history(report)
    return Reads.NOTHING


def reads_lagging(report: LagReport, thresholds: Thresholds, now: float, dated: bool) -> Reads:
    """A lagging partition whose lag is above what the newest batch read (the last of the
    growing samples), or unknown: more. The thresholds need only the live lag."""
    for p in _lagging(report, thresholds):
        read = _newest_read(p)
        if read is None or p.lag > read:
            return more_history(report)
    return Reads.NOTHING


def reads_lagging_real_time(
    report: LagReport, thresholds: Thresholds, now: float, dated: bool
) -> Reads:
    """A real-time query whose lag as of its checkpoint is above what its newest interval
    read (or that read is unknown): more (the trend over its checkpoints)."""
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
    """The rules that need the age of waiting records the estimate could not give (a check
    then reads their timestamps); empty when none does."""
    return tuple(rule.name for rule in RULES if rule.ages(report, thresholds, now))


TIME_LAG = "time lag"  # the time-lag estimate, when it asks for older batches


def reads_needed(
    report: LagReport, thresholds: Thresholds, now: float, *, exact_time_lag: bool = False
) -> tuple[Reads, tuple[str, ...]]:
    """The older history ``report`` needs for its verdict and every partition's numbers to be
    those of the whole window: the most that the rules and the time-lag estimate declare, and
    who declared it.

    The one place a newest-first check decides what to read: ``NOTHING`` settles the report,
    ``OLDER`` reads offsets/C-1 and asks again, ``WINDOW`` reads the rest of the window.
    """
    dated = exact_time_lag or bool(ages_needed(report, thresholds, now))
    needs = {TIME_LAG: time_lag_reads(report)}
    needs.update({rule.name: rule.reads(report, thresholds, now, dated) for rule in RULES})
    most = max(needs.values())
    return most, tuple(name for name, reads in needs.items() if most and reads == most)


def waiting_wanted(report: LagReport, thresholds: Thresholds, now: float) -> bool:
    """Kafka's offsets before the last run are wanted when the verdict would be STOPPED by the
    job's own pace (``_stopped_idle``) and no schedule is declared: records that waited between
    runs show a job started by a scheduler, then judged by the period its runs came at."""
    if report.schedule is not None or _unjudged(report) is not None:
        return False
    if rule_data_loss(report, thresholds, now) or rule_rewind(report, thresholds, now):
        return False
    found = rule_stopped(report, thresholds, now)
    return found is not None and found.rule == "stopped_idle"


def changes_at(report: LagReport, thresholds: Thresholds) -> tuple[float, ...]:
    """The moments (epoch seconds) at which a rule may judge ``report``'s job differently with
    nothing new written to its checkpoint (a time limit passing). A poll that reads with one
    point read lists the checkpoint again once one has passed, to confirm no reset, purge or
    rename before such a verdict (``CheckpointReader.confirm_at``)."""
    moments = []
    limit = thresholds.max_commit_age_seconds
    if limit is not None and report.committed_at is not None:
        moments.append(report.committed_at + limit)
    last = _last_activity(report, thresholds)
    if last is not None:
        pace = _idle_limit(report, thresholds)
        moments.append(last + STOPPED_MIN_IDLE_SECONDS)
        moments += [last + pace[1]] if pace is not None else []
        period = _period(report)
        moments += [last + period] if period is not None else []
    flight, in_flight = report.in_flight, thresholds.max_in_flight_seconds
    if flight is not None and flight.started_at is not None and in_flight is not None:
        moments.append(flight.started_at + in_flight)
    return tuple(sorted(moments))


def evaluate(
    report: LagReport, thresholds: Thresholds | None = None, *, now: float | None = None
) -> HealthVerdict:
    """Run the rules in order; the first (worst) that fires is the verdict. `now` defaults to
    the report's `generated_at`, so a stored report gives the same verdict again. Several Kafka
    sources all measured against one cluster add that warning to the reason.

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
        if first.rule != "time_to_data_loss" and any(
            f.rule == "time_to_data_loss" for f in findings
        ):
            soonest = report.min_time_to_loss_seconds
            reason += f"; retention deletes unread records in {duration(soonest)}: {LOSS_NEXT_STEP}"
        return HealthVerdict(first.health, reason, first.rule, first.partitions, findings)
    unknown = [
        f"source {s.source_id}: {s.lag_unknown}" for s in report.kafka_sources if s.lag_unknown
    ]
    if pending is not None:
        measured = (
            f"lag unknown: {'; '.join(unknown)}"
            if unknown
            else f"lag {report.total_lag} record(s) from the offsets it started at"
        )
        return HealthVerdict(Health.UNKNOWN, f"{pending}; {measured}", "no_commit")
    if report.missing_topics:
        return HealthVerdict(
            Health.UNKNOWN,
            f"lag unknown: {'; '.join(unknown)}"
            if unknown
            else f"topic(s) {', '.join(report.missing_topics)} not found in the cluster",
            "topic_missing",
        )
    as_of = "" if report.real_time is None else f" {_as_of_checkpoint(report)}"
    return HealthVerdict(Health.OK, f"lag {report.total_lag} record(s){as_of}", "ok")


def _unjudged(report: LagReport) -> HealthVerdict | None:
    """UNKNOWN without running the rules: no committed batch yet, or no Kafka source."""
    # A real-time query's first offsets file is written with its first checkpoint.
    real_time = report.trigger == "real-time"
    if report.committed_batch_id is None and (report.in_flight is None or real_time):
        return HealthVerdict(Health.UNKNOWN, "no committed batch yet", "no_commit")
    if not report.kafka_sources:
        return NO_KAFKA_SOURCE
    return None


def _as_of_checkpoint(report: LagReport) -> str:
    """What a real-time query's lag is measured at, for its verdict's reason."""
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
