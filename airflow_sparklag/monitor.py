"""Checks: from a checkpoint location to a lag report and a health verdict, through a session.

    session.read -> session.kafka.snapshot -> compute_lag -> evaluate

Nothing heavy is imported at module level: DAG files may import this.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_sparklag import params
from airflow_sparklag.errors import SparkLagError, StorageNotFound
from airflow_sparklag.health import (
    Health,
    HealthVerdict,
    Thresholds,
    ages_needed,
    evaluate,
    reads_needed,
)
from airflow_sparklag.kafka import KafkaOffsetsClient, KafkaSnapshot, subscribe_regex
from airflow_sparklag.lag import (
    LagReport,
    Offsets,
    Reads,
    SourceCluster,
    as_of_checkpoint,
    compute_lag,
    with_time_to_loss,
)
from airflow_sparklag.location import Location
from airflow_sparklag.runs import (
    SCHEDULED_HISTORY,
    busy_interval,
    default_grace,
    last_gap,
    run_gap,
    schedule_of,
)
from airflow_sparklag.session import Session

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint import CheckpointState
    from airflow_sparklag.lag import PartitionLag

# Checkpoints read at once: each read is a few small, latency-bound storage requests, sent
# outside the GIL by obstore (S3) or waiting on the network; 64 keep a 20 ms store busy.
MAX_READERS = 64
DEFAULT_HISTORY = 10  # batches of history a check reads (the trend rules' window)
Progress = Callable[[int, int], None]  # (checkpoints read so far, total)


def _period(name: str, value: Any) -> float | None:
    """A duration in seconds (> 0 for the period, >= 0 for the grace), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {value!r} (see params.py)")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (name == "runs_every" and seconds == 0):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return seconds


@dataclass(frozen=True)
class CheckOptions:
    """How to judge a checkpoint: THE options of a check. The CLI's flags, the operators' and
    sensors' keyword arguments and the triggers' serialized ``options`` are made from these
    fields (each declared once with its reader, flag and doc line: ``params.option``; their
    meaning is in docs/lag-and-health.md, "Check options").

    ``read_committed=None`` means read_uncommitted: Spark does not record the Kafka source's
    isolation level in the checkpoint. ``runs_every`` (seconds) declares a scheduled job:
    STOPPED then means "no run within runs_every + ``run_grace``", never "idle between runs"
    (docs/scheduled-jobs.md).

    >>> CheckOptions(Thresholds(max_lag_seconds=300), history=5).to_dict()["history"]
    5
    >>> CheckOptions(runs_every=3600).grace
    900.0
    """

    thresholds: Thresholds = params.option(  # noqa: RUF009 (a dataclasses.field)
        factory=Thresholds, read=params.thresholds, flag=None, doc="health thresholds"
    )
    history: int = params.option(
        DEFAULT_HISTORY,
        read=params.batches,
        flag="--history",
        doc="batches of history to evaluate (default 10)",
    )
    exact_time_lag: bool = params.option(
        False,
        read=params.boolean,
        flag="--exact",
        doc="time lag from the record at the committed offset",
    )
    read_committed: bool | None = params.option(
        None,
        read=params.optional_boolean,
        flag="--read-committed",
        doc="measure against the last stable offset (transactional topics)",
    )
    runs_every: float | None = params.option(
        None,
        read=params.optional_positive_duration,
        flag="--runs-every",
        doc="a scheduled job (AvailableNow/Once) started this often: 1h, 90m, 30s",
    )
    run_grace: float | None = params.option(
        None,
        read=params.optional_duration,
        flag="--run-grace",
        doc="with --runs-every: how late a run may start (default max(5m, 25% of the period))",
    )
    subscribe_pattern: str | None = params.option(
        None,
        read=params.optional_text,
        flag="--subscribe-pattern",
        doc="the query's subscribePattern: topics it finds that it has not read yet wait "
        "from their start",
    )
    assign: bool = params.option(
        False,
        read=params.boolean,
        flag="--assign",
        doc="the query reads fixed partitions (Spark's assign): partitions the checkpoint "
        "lacks are not counted",
    )

    def __post_init__(self) -> None:
        if not isinstance(self.thresholds, Thresholds):
            raise TypeError("CheckOptions.thresholds must be a Thresholds (see params.py)")
        if isinstance(self.history, bool) or not isinstance(self.history, int):
            raise TypeError(f"history must be a whole number of batches, got {self.history!r}")
        if self.history < 1:
            raise ValueError(f"history must be >= 1 batch, got {self.history}")
        object.__setattr__(self, "runs_every", _period("runs_every", self.runs_every))
        object.__setattr__(self, "run_grace", _period("run_grace", self.run_grace))
        if self.run_grace is not None and self.runs_every is None:
            raise params.invalid(
                "run_grace", "is the grace of a scheduled job: give runs_every too"
            )
        if self.subscribe_pattern is not None:
            if not isinstance(self.subscribe_pattern, str):
                raise TypeError(f"subscribe_pattern must be text, got {self.subscribe_pattern!r}")
            subscribe_regex(self.subscribe_pattern)  # refused here, before any request
            if self.assign:
                raise params.invalid(
                    "assign", "a query reads by assign or by subscribe_pattern, not both"
                )

    @property
    def grace(self) -> float | None:
        """The grace after ``runs_every``: ``run_grace``, or the documented default."""
        if self.runs_every is None:
            return None
        return self.run_grace if self.run_grace is not None else default_grace(self.runs_every)

    @property
    def history_to_read(self) -> int:
        """Batches to read: ``history``, and for a scheduled job enough to see its last run."""
        if self.runs_every is None:
            return self.history
        return max(self.history, SCHEDULED_HISTORY)

    @classmethod
    def build(cls, **values: Any) -> CheckOptions:
        """From plain Python values (a dict of thresholds is checked by ``Thresholds``)."""
        thresholds = values.pop("thresholds", None)
        if not isinstance(thresholds, Thresholds):
            thresholds = Thresholds.from_dict(thresholds)
        return cls(thresholds, **values)

    def to_dict(self) -> dict[str, Any]:
        values = {name: getattr(self, name) for name in OPTION_NAMES}
        thresholds = self.thresholds.to_dict().items()
        values["thresholds"] = {k: v for k, v in thresholds if v is not None}
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> CheckOptions:
        return cls.build(**{k: v for k, v in values.items() if k in OPTION_NAMES})


# The fields of CheckOptions, in order: the keyword arguments every check entry point takes.
OPTION_NAMES = tuple(f.name for f in dataclasses.fields(CheckOptions))


@dataclass(frozen=True)
class CheckResult:
    """Lag report and verdict of one checkpoint; `error` set (and `report` None) when the
    checkpoint could not be read in a multi-checkpoint check.

    >>> result = check(session, "s3a://bucket/ck/orders")       # doctest: +SKIP
    >>> result.verdict.health.value, result.report.total_lag    # doctest: +SKIP
    ('OK', 0)
    >>> json.dumps(result.to_dict())                            # doctest: +SKIP
    """

    report: LagReport | None
    verdict: HealthVerdict
    location: str = ""
    error: str | None = None  # "<ErrorClass>: message"

    def to_dict(self) -> dict[str, Any]:
        return {
            "location": self.location,
            "error": self.error,
            "verdict": self.verdict.to_dict(),
            "report": None if self.report is None else self.report.to_dict(),
        }


def _source_starts(session: Session, state: CheckpointState) -> Offsets | None:
    """Before the first commit: where each Kafka source of the in-flight batch started
    (``sources/<id>/0``, never purged), so its lag is counted from there. None otherwise."""
    from airflow_sparklag.checkpoint import parse_source_start
    from airflow_sparklag.storage import join

    if state.committed is not None or state.in_flight is None:
        return None
    storage = session.storage(state.location)
    starts: dict[str, Mapping[str, Mapping[int, int]]] = {}
    for source in state.in_flight.sources:
        if source.kind != "kafka":
            continue
        path = join(state.location, "sources", source.source_id, "0")
        try:
            start = parse_source_start(storage.read(path), path, source.source_id)
        except StorageNotFound:
            continue  # not written yet (or not kept): the source's lag stays unmeasured
        if start.kafka is not None:
            starts[source.source_id] = start.kafka
    return starts


def cluster_topics(session: Session, states: Mapping[str, CheckpointState]) -> dict[int, set[str]]:
    """The topics to ask each cluster for (0: the main one; see ``Session.cluster_of``)."""
    topics: dict[int, set[str]] = {}
    for state in states.values():
        for batch in (state.committed, state.in_flight):
            for source in batch.sources if batch is not None else ():
                if source.kind == "kafka" and source.kafka is not None:
                    cluster = session.cluster_of(source.source_id)
                    topics.setdefault(cluster, set()).update(source.kafka)
    return topics


def _record_positions(partitions: Iterable[PartitionLag]) -> dict[tuple[str, int], int]:
    """Where exact mode reads a record: the first unread offset of every lagging partition
    (committed, else where the query started, else the log start of a new partition).
    Partitions with lost records are skipped (there is nothing to read there)."""
    wanted: dict[tuple[str, int], int] = {}
    for p in partitions:
        if p.lag <= 0 or p.data_loss or p.log_start_offset is None:
            continue
        position = p.committed_offset
        if position is None:
            position = p.start_offset if p.start_offset is not None else p.log_start_offset
        wanted[(p.topic, p.partition)] = min(wanted.get((p.topic, p.partition), position), position)
    return wanted


def _exact_timestamps(
    client: KafkaOffsetsClient, wanted: Sequence[Mapping[tuple[str, int], int]]
) -> dict[tuple[str, int, int], int | None]:
    """Record timestamps for every (topic, partition, offset) any job asks for.

    One consumer pass per distinct offset of a partition; with one job (or jobs at the same
    offsets) that is a single pass.
    """
    distinct: dict[tuple[str, int], set[int]] = {}
    for positions in wanted:
        for key, offset in positions.items():
            distinct.setdefault(key, set()).add(offset)
    result: dict[tuple[str, int, int], int | None] = {}
    rounds = max((len(v) for v in distinct.values()), default=0)
    ordered = {key: sorted(offsets) for key, offsets in distinct.items()}
    for i in range(rounds):
        batch = {key: offs[i] for key, offs in ordered.items() if i < len(offs)}
        for (topic, partition), ts in client.record_timestamps(batch).items():
            result[(topic, partition, batch[(topic, partition)])] = ts
    return result


# Records that waited this long (or 3 busy intervals) before the first batch of a run read them
# show a scheduled job, not a streaming one that reacts to arrivals.
WAITED_MIN_SECONDS = 10.0


# Older batches' GETs in flight at once, every job's together (one pool): the window's files are
# known once the listing is in, and each GET is a small, latency-bound request.
WINDOW_READERS = 128


Stamps = Mapping[int, Mapping[tuple[str, int], int | None]]  # cluster -> record timestamps


class _Judge:
    """Reports and verdicts of several checkpoints against ONE Kafka snapshot per cluster
    (``snapshots[0]``: the main one), at ONE instant."""

    def __init__(
        self,
        session: Session,
        states: Mapping[str, CheckpointState],
        options: CheckOptions,
        snapshots: Mapping[int, KafkaSnapshot],
        now: float,
        query_id: bool = True,
    ) -> None:
        self.session = session
        self.states = dict(states)
        self.query_id = query_id  # the readers the states came from (``Session.reader``)
        self.errors: dict[str, SparkLagError] = {}  # reading a state's history failed
        self.stepped: set[str] = set()  # states with offsets/C-1 read, the rest maybe not
        self.options = options
        self.snapshots = snapshots
        self.snapshot = snapshots[0]
        self.now = now
        self.starts = {loc: _source_starts(session, st) for loc, st in states.items()}
        # Real-time queries: Kafka's offsets when a checkpoint was written, per (job, time).
        self.checkpoint_ends: dict[tuple[str, float | None], Offsets | None] = {}

    def report(self, loc: str, stamps: Stamps | None) -> LagReport:
        """The report of ``loc``. A lazily read state's older batches are unread: its report
        only says whether it needs them (``health.reads_needed``, whose answer for offsets/C
        alone does not depend on ``lag_seconds``), and a job whose partitions lag always does
        and is reported again with them; so the time lag of such a first report is not
        estimated."""
        state = self.states[loc]
        report = compute_lag(
            state,
            self.snapshot,
            now=self.now,
            # Not in the checkpoint: None is read_uncommitted, the Kafka source's default.
            read_committed=bool(self.options.read_committed),
            record_timestamps=None if stamps is None else stamps.get(0, {}),
            source_starts=self.starts[loc],
            runs_every=self.options.runs_every,
            run_grace=self.options.grace,
            source_clusters=self.source_clusters(state, stamps),
            estimate_ages=not state.unread_history or loc in self.stepped,
            subscribe_pattern=self.options.subscribe_pattern,
            assign=self.options.assign,
        )
        return self.at_checkpoints(report)

    def at_checkpoints(self, report: LagReport) -> LagReport:
        """A real-time query's report as of its checkpoints (``lag.as_of_checkpoint``):
        Kafka's offsets when the newest was written; when the lag then is above what its
        interval read (``health.rule_lagging_real_time`` may judge the trend), also when each
        older one of the history was. One ListOffsets by timestamp per checkpoint, once."""
        real_time = report.real_time
        if real_time is None:
            return report
        times = real_time.checkpoint_times
        unasked: list[Offsets | None] = [None] * (len(times) - 1)
        measured = as_of_checkpoint(report, [*unasked, self.ends_at(report, times[-1])])
        read = report.history[-1].records if report.history else None
        limit = self.options.thresholds.allowed_lag
        if read is None or measured.total_lag <= max(read, limit):
            return measured
        return as_of_checkpoint(report, [self.ends_at(report, t) for t in times])

    def ends_at(self, report: LagReport, at: float | None) -> Offsets | None:
        """source id -> topic -> partition -> Kafka's offset at ``at`` (epoch seconds), asked
        once per job and time; None when unknown."""
        key = (report.location, at)
        if key not in self.checkpoint_ends:
            found = None if at is None else self.offsets_at(report, int(at * 1000))
            self.checkpoint_ends[key] = (
                None
                if found is None
                else {
                    s.source_id: found.get(self.session.cluster_of(s.source_id), {})
                    for s in report.kafka_sources
                }
            )
        return self.checkpoint_ends[key]

    def source_clusters(
        self, state: CheckpointState, stamps: Stamps | None
    ) -> dict[str, SourceCluster] | None:
        """The query's sources the session maps to a cluster, each with that cluster's
        snapshot (and record timestamps); None when it maps none of them."""
        mapped = self.session.source_kafka
        ids = {
            source.source_id
            for batch in (state.committed, state.in_flight)
            for source in (batch.sources if batch is not None else ())
            if source.source_id in mapped
        }
        if not ids:
            return None
        views: dict[int, SourceCluster] = {}
        for cluster in {self.session.cluster_of(source_id) for source_id in ids}:
            views[cluster] = SourceCluster(
                self.snapshots.get(cluster, self.snapshot),
                self.session.cluster_servers(cluster),
                None if stamps is None else stamps.get(cluster, {}),
            )
        return {source_id: views[self.session.cluster_of(source_id)] for source_id in ids}

    def by_cluster(self, report: LagReport) -> dict[int, list[PartitionLag]]:
        """The report's partitions, grouped by the cluster their source is measured against."""
        grouped: dict[int, list[PartitionLag]] = {}
        for source in report.kafka_sources:
            parts = grouped.setdefault(self.session.cluster_of(source.source_id), [])
            parts.extend(p for topic in source.topics for p in topic.partitions)
        return grouped

    def dated(self, reports: Mapping[str, LagReport]) -> dict[str, LagReport]:
        """``reports`` again in exact time-lag mode (record timestamps read, one pass per
        cluster)."""
        positions = {
            loc: {c: _record_positions(parts) for c, parts in self.by_cluster(report).items()}
            for loc, report in reports.items()
        }
        clusters = sorted({c for wanted in positions.values() for c in wanted})
        stamps = {
            c: _exact_timestamps(
                self.session.cluster_kafka(c), [wanted.get(c, {}) for wanted in positions.values()]
            )
            for c in clusters
        }
        return {
            loc: self.report(
                loc,
                {
                    c: {key: stamps[c].get((*key, off)) for key, off in wanted.items()}
                    for c, wanted in by_cluster.items()
                },
            )
            for loc, by_cluster in positions.items()
        }

    def offsets_at(
        self, report: LagReport, timestamp_ms: int
    ) -> dict[int, dict[str, dict[int, int]]] | None:
        """Kafka's offsets as of ``timestamp_ms`` (ListOffsets by timestamp) of the report's
        topics, per cluster: cluster -> topic -> partition -> offset; None when a topic went
        away meanwhile (the answer is then unknown)."""
        topics: dict[int, set[str]] = {}
        for source in report.kafka_sources:
            names = {t.topic for t in source.topics if not t.missing}
            topics.setdefault(self.session.cluster_of(source.source_id), set()).update(names)
        try:
            return {
                c: self.session.cluster_kafka(c).offsets_for_time(sorted(names), timestamp_ms)
                for c, names in sorted(topics.items())
                if names
            }
        except SparkLagError:
            return None

    def reads(self, report: LagReport) -> Reads:
        """The older batches ``report`` needs: what the rules and the time-lag estimate
        declare (``health.reads_needed``, the one place that decides)."""
        options = self.options
        return reads_needed(
            report, options.thresholds, self.now, exact_time_lag=options.exact_time_lag
        )

    def with_history(self, reports: Mapping[str, LagReport]) -> dict[str, LagReport]:
        """The reports of the jobs whose lazily read states need their older batches
        (``reads_needed``), again with them; the others are not in the result. Newest first:
        offsets/C-1 alone where it may settle the report, then the whole window where not."""
        needed = {
            loc: self.reads(report)
            for loc, report in reports.items()
            if self.states[loc].unread_history
        }
        wanted = [loc for loc, reads in needed.items() if reads]
        step = [loc for loc in wanted if needed[loc] == Reads.OLDER]
        done = self.read_history({loc: 1 for loc in step})
        self.stepped.update(done)
        result = {loc: self.report(loc, None) for loc in done}
        rest = [
            loc
            for loc in wanted
            if loc not in self.errors
            and self.states[loc].unread_history
            and (loc not in result or self.reads(result[loc]))
        ]
        done = self.read_history(dict.fromkeys(rest))
        self.stepped.difference_update(done)
        result.update({loc: self.report(loc, None) for loc in done})
        return result

    def read_history(self, wanted: Mapping[str, int | None]) -> list[str]:
        """Read the unread history of each state in ``wanted`` (all of it, or its newest N
        batches), in parallel; the locations read, a failure recorded in ``errors``."""
        if not wanted:
            return []

        def read(loc: str) -> CheckpointState | SparkLagError:
            reader = self.session.reader(loc, query_id=self.query_id)
            try:
                return reader.read_history(self.states[loc], wanted[loc], pool=gets)
            except SparkLagError as exc:
                return exc

        # Jobs wait in one pool while their GETs run in another, WINDOW_READERS at once.
        with (
            ThreadPoolExecutor(max_workers=WINDOW_READERS) as gets,
            ThreadPoolExecutor(max_workers=max(1, min(MAX_READERS, len(wanted)))) as jobs,
        ):
            outcomes = list(jobs.map(read, wanted))
        for loc, outcome in zip(wanted, outcomes, strict=True):
            if isinstance(outcome, SparkLagError):
                self.errors[loc] = outcome
            else:
                self.states[loc] = outcome
        return [loc for loc in wanted if loc not in self.errors]

    def run(self) -> dict[str, CheckResult]:
        reports = {loc: self.report(loc, None) for loc in self.states}
        reports.update(self.with_history(reports))
        reports = {loc: r for loc, r in reports.items() if loc not in self.errors}
        if any(s.partitions or s.missing_topics for s in self.snapshots.values()):
            if self.options.exact_time_lag:
                reports = self.dated(reports)
            else:
                thresholds = self.options.thresholds
                undated = {
                    loc: r for loc, r in reports.items() if ages_needed(r, thresholds, self.now)
                }
                reports.update(self.dated(undated) if undated else {})
            if self.options.runs_every is not None:
                reports = {loc: self.with_completeness(r) for loc, r in reports.items()}
            reports = self.with_time_to_loss(reports)
        results = {}
        for loc, report in reports.items():
            verdict = evaluate(report, self.options.thresholds, now=self.now)
            if verdict.rule == "stopped_idle" and self.options.runs_every is None:
                report, verdict = self.unless_scheduled(report, verdict)
            results[loc] = CheckResult(report, verdict, loc)
        for loc, error in self.errors.items():
            results[loc] = failed_result(loc, error)
        return results

    def with_time_to_loss(self, reports: dict[str, LagReport]) -> dict[str, LagReport]:
        """The lagging reports with each partition's time to data loss: the retention of
        their topics, one DescribeConfigs per cluster (remembered by its client)."""
        lagging = {loc: r for loc, r in reports.items() if r.total_lag > 0}
        topics: dict[int, set[str]] = {}
        for report in lagging.values():
            for source in report.kafka_sources:
                names = {t.topic for t in source.topics if t.lag}
                topics.setdefault(self.session.cluster_of(source.source_id), set()).update(names)
        retention = {
            c: self.session.cluster_kafka(c).retention(sorted(names))
            for c, names in topics.items()
            if names
        }
        for loc, report in lagging.items():
            by_source = {
                s.source_id: retention.get(self.session.cluster_of(s.source_id), {})
                for s in report.kafka_sources
            }
            reports[loc] = with_time_to_loss(report, by_source)
        return reports

    def with_completeness(self, report: LagReport) -> LagReport:
        """The last run's completeness: its committed offsets against Kafka's offsets as of its
        start (ListOffsets by timestamp at its first batch's time)."""
        schedule = report.schedule
        run = schedule.last_run if schedule is not None else None
        if schedule is None or run is None or not run.start_known or run.started_at is None:
            return report
        if report.committed_batch_id is None or run.first_batch_id > report.committed_batch_id:
            return report  # nothing of this run committed yet: "not yet", nothing to compare
        targets = self.offsets_at(report, int(run.started_at * 1000))
        if targets is None:
            return report  # a topic went away meanwhile: completeness unknown
        left = 0
        for cluster, parts in self.by_cluster(report).items():
            for p in parts:
                target = targets.get(cluster, {}).get(p.topic, {}).get(p.partition)
                position = (
                    p.committed_offset if p.committed_offset is not None else p.log_start_offset
                )
                if target is not None and position is not None:
                    left += max(0, target - position)
        done = dataclasses.replace(run, complete=left == 0, records_left=left)
        return dataclasses.replace(report, schedule=dataclasses.replace(schedule, last_run=done))

    def unless_scheduled(
        self, report: LagReport, verdict: HealthVerdict
    ) -> tuple[LagReport, HealthVerdict]:
        """A job STOPPED by the idle rule whose history looks like runs: did records wait
        between the runs? Then it looks scheduled, and the verdict says how to declare it."""
        if not self.records_waited_before_last_run(report):
            return report, verdict
        flight = report.in_flight
        schedule = schedule_of(
            report.history,
            runs_every=None,
            in_flight=None if flight is None else (flight.batch_id, flight.started_at),
            committed_at=report.committed_at,
            looks_scheduled=True,
        )
        report = dataclasses.replace(report, schedule=schedule)
        return report, evaluate(report, self.options.thresholds, now=self.now)

    def records_waited_before_last_run(self, report: LagReport) -> bool:
        """Did the first batch after the newest long pause read records produced well before
        it (more than ``WAITED_MIN_SECONDS`` or 3 busy intervals)? A streaming query reacts to
        new records within its trigger; a scheduled one leaves them waiting until the next
        run."""
        history = report.history
        gap = run_gap(history, None)
        edges = last_gap(history, gap) if gap is not None else None
        busy = busy_interval(history)
        if edges is None or busy is None:
            return False
        before, after = edges
        after_ms = history[after].timestamp_ms
        if after_ms is None:
            return False
        margin = max(WAITED_MIN_SECONDS, 3 * busy)
        waiting = self.offsets_at(report, int(after_ms - margin * 1000))
        if waiting is None:
            return False
        for cluster, parts in self.by_cluster(report).items():
            for p in parts:
                end = p.offset_history[before] if len(p.offset_history) > before else None
                if end is None:
                    continue
                if waiting.get(cluster, {}).get(p.topic, {}).get(p.partition, end) > end:
                    return True
        return False


def judge_states(
    session: Session,
    states: Mapping[str, CheckpointState],
    options: CheckOptions,
    *,
    now: float | None = None,
    query_id: bool = True,
) -> dict[str, CheckResult]:
    """One Kafka snapshot for all topics of all states (one per cluster when the session maps
    sources to clusters: docs/multi-cluster.md), then a report and verdict each, all measured
    at one instant (``now``, default the snapshot's fetch time).

    A `max_lag_seconds` threshold is never skipped silently: when the estimate cannot date a
    lagging job's records, that job's time lag is read exactly before it is judged; so is a
    job a STOPPED rule would judge by the age of its waiting records. A declared scheduled
    job's last run is checked for completeness.

    States read lazily (``read_states``, with ``query_id`` as given there) get their older
    batches read only when ``health.reads_needed`` says the report depends on them; a failure
    to read them gives that job a failed result.
    """
    return _judge(session, states, options, now, query_id).run()


def judge_against(
    session: Session,
    states: Mapping[str, CheckpointState],
    options: CheckOptions,
    snapshots: Mapping[int, KafkaSnapshot],
    now: float,
) -> dict[str, CheckResult]:
    """:func:`judge_states` against Kafka snapshots already taken, one per cluster of the
    session (``Session.cluster_of``; 0, the main one, required): the Spark scan's executors
    judge against the driver's broadcast snapshots. The same reports and verdicts."""
    return _Judge(session, states, options, snapshots, now).run()


def _judge(
    session: Session,
    states: Mapping[str, CheckpointState],
    options: CheckOptions,
    now: float | None,
    query_id: bool = True,
) -> _Judge:
    """The judge of ``states``: one Kafka snapshot per cluster taken, at one instant."""
    topics = cluster_topics(session, states)
    snapshots = cluster_snapshots(session, topics, options.subscribe_pattern)
    at = max(s.fetched_at for s in snapshots.values()) if now is None else now
    return _Judge(session, states, options, snapshots, at, query_id)


def cluster_snapshots(
    session: Session, topics: Mapping[int, Iterable[str]], pattern: str | None = None
) -> dict[int, KafkaSnapshot]:
    """ONE snapshot per cluster (cluster -> its topics, ``cluster_topics``), with the last
    stable offsets; the main cluster's (0) is empty when no source reads it. ``pattern``'s
    topics come in the same metadata answer: no extra request."""
    listed = {} if pattern is None else {"pattern": pattern}
    snapshots = {
        cluster: session.cluster_kafka(cluster).snapshot(
            sorted(names), read_committed=True, **listed
        )
        for cluster, names in sorted(topics.items())
        if names
    }
    if 0 not in snapshots:  # no source on the main cluster: nothing to ask it
        fetched = max((s.fetched_at for s in snapshots.values()), default=None)
        snapshots[0] = KafkaSnapshot({}, frozenset(), fetched or time.time(), None)
    return snapshots


def failed_result(location: str, error: SparkLagError) -> CheckResult:
    """The result of a checkpoint that could not be read: UNKNOWN, with the error."""
    message = f"{type(error).__name__}: {error}"
    return CheckResult(
        None, HealthVerdict(Health.UNKNOWN, message, "unreadable"), location, message
    )


def read_states(
    session: Session,
    locations: Iterable[Location | str],
    *,
    history: int,
    query_id: bool = True,
    max_workers: int = MAX_READERS,
    progress: Progress | None = None,
    lazy_history: bool = False,
) -> tuple[dict[str, CheckpointState], dict[str, CheckResult]]:
    """Read every checkpoint (in parallel, each as soon as ``locations`` yields it): states,
    and a failed result per unreadable one.

    ``lazy_history``: offsets/C only, the older batches left for ``judge_states`` to read
    when a rule needs them (``CheckpointReader.read(lazy_history=True)``)."""
    states: dict[str, CheckpointState] = {}
    failures: dict[str, CheckResult] = {}
    unique: list[Location | str] = []

    def each() -> Iterator[Location | str]:  # once each, as ``locations`` yields them
        seen: set[Location | str] = set()
        for location in locations:
            if location not in seen:
                seen.add(location)
                unique.append(location)
                yield location

    def read(location: Location | str) -> tuple[str, CheckpointState | SparkLagError]:
        try:
            reader = session.reader(location, query_id=query_id)
            return str(location), reader.read(history, lazy_history=lazy_history)
        except SparkLagError as exc:
            return str(location), exc

    # Executor.map submits every location (each read starts as it is yielded) before the first
    # result comes back, so ``unique`` is complete when progress is reported.
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        for done, (location, outcome) in enumerate(pool.map(read, each()), start=1):
            if isinstance(outcome, SparkLagError):
                failures[location] = failed_result(location, outcome)
            else:
                states[location] = outcome
            if progress is not None:
                progress(done, len(unique))
    return states, failures


def check(
    session: Session,
    location: Location | str,
    options: CheckOptions | None = None,
    *,
    now: float | None = None,
) -> CheckResult:
    """Lag and health of the Spark query whose checkpoint is at ``location``.

    Raises the typed errors (`CheckpointNotFound`, `CheckpointCorrupt`, `StorageError`,
    `KafkaUnavailable`, `KafkaError`).

    >>> with Session(kafka_config={"bootstrap.servers": "127.0.0.1:9092"}) as session:
    ...     result = check(session, "/data/ck/orders",
    ...                    CheckOptions(Thresholds(max_lag_seconds=600)))    # doctest: +SKIP
    >>> result.verdict.health                                               # doctest: +SKIP
    <Health.OK: 'OK'>
    """
    options = options or CheckOptions()
    where = Location.of(location)
    state = session.reader(where).read(options.history_to_read, lazy_history=True)
    judge = _judge(session, {where.text: state}, options, now)
    result = judge.run()[where.text]
    if where.text in judge.errors:
        raise judge.errors[where.text]
    return result


def check_many(
    session: Session,
    locations: Sequence[Location | str],
    options: CheckOptions | None = None,
    *,
    now: float | None = None,
    query_id: bool = True,
    max_workers: int = MAX_READERS,
    progress: Progress | None = None,
) -> list[CheckResult]:
    """`check` for many queries: checkpoints read in parallel (at most `max_workers` at once),
    ONE Kafka snapshot for all their topics.

    Results come in the order of `locations`. A checkpoint that cannot be read gives a result
    with `error` set and an UNKNOWN verdict instead of failing the others; Kafka errors concern
    every query and are raised.
    """
    options = options or CheckOptions()
    wanted = [Location.of(each, "locations", bucket=False) for each in locations]
    states, failures = read_states(
        session,
        wanted,
        history=options.history_to_read,
        query_id=query_id,
        max_workers=max_workers,
        progress=progress,
        lazy_history=True,
    )
    # No state: no Kafka request either (no topic to ask for).
    judged = judge_states(session, states, options, now=now, query_id=query_id)
    return [judged.get(loc.text) or failures[loc.text] for loc in wanted]


# -- for scripts: one call, its own session ------------------------------------------------------


def check_checkpoint(
    location: str,
    *,
    options: CheckOptions | None = None,
    now: float | None = None,
    **options_and_session: Any,
) -> CheckResult:
    """:func:`check` in a session of its own (a script's one-off check). The keyword
    arguments are ``CheckOptions`` fields (``thresholds``, ``history``, ...; or ``options``)
    and :class:`~airflow_sparklag.session.Session`'s (``kafka_config``, ``s3_options``, ...).

    >>> check_checkpoint("/data/ck/orders", kafka_config={"bootstrap.servers": "k:9092"},
    ...                  thresholds={"max_lag_seconds": 600})      # doctest: +SKIP
    """
    chosen = params.take(OPTION_NAMES, CheckOptions.build, options_and_session, options)
    with Session(**options_and_session) as session:
        return check(session, location, chosen, now=now)


def check_checkpoints(
    locations: Sequence[str],
    *,
    options: CheckOptions | None = None,
    now: float | None = None,
    max_workers: int = MAX_READERS,
    **options_and_session: Any,
) -> list[CheckResult]:
    """:func:`check_many` in a session of its own; keyword arguments as :func:`check_checkpoint`.

    >>> results = check_checkpoints(["s3a://b/ck/a", "s3a://b/ck/b"],
    ...                             kafka_config={"bootstrap.servers": "k:9092"})  # doctest: +SKIP
    >>> [r.verdict.health.value for r in results]                                   # doctest: +SKIP
    ['OK', 'LAGGING']
    """
    chosen = params.take(OPTION_NAMES, CheckOptions.build, options_and_session, options)
    with Session(**options_and_session) as session:
        return check_many(session, locations, chosen, now=now, max_workers=max_workers)


__all__ = [
    "OPTION_NAMES",
    "CheckOptions",
    "CheckResult",
    "check",
    "check_checkpoint",
    "check_checkpoints",
    "check_many",
    "cluster_snapshots",
    "cluster_topics",
    "judge_against",
    "judge_states",
    "read_states",
]
