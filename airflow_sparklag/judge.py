"""A check as a plan, a fetch (tier by tier, every job of the check together) and ONE
``compute_lag`` and ``evaluate`` per job: docs/architecture.md. What each job's evidence holds,
and which rule asked for it, is ``Evidence.reads``.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_sparklag.check_options import CheckOptions
from airflow_sparklag.errors import SparkLagError, StorageNotFound
from airflow_sparklag.health import ages_needed, changes_at, evaluate, reads_needed, waiting_wanted
from airflow_sparklag.kafka import KafkaSnapshot
from airflow_sparklag.lag import (
    Answers,
    answered,
    compute_lag,
    records_waited,
    run_start,
    waiting_probe,
)
from airflow_sparklag.model.report import LagReport, Reads
from airflow_sparklag.model.result import CheckResult, Read
from airflow_sparklag.positions import Measuring, Offsets, SourceCluster, measure
from airflow_sparklag.session import Session

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint import CheckpointState
    from airflow_sparklag.kafka import TopicRetention

# Checkpoints read at once: each read is a few small, latency-bound storage requests, sent
# outside the GIL by obstore (S3) or waiting on the network; 64 keep a 20 ms store busy.
MAX_READERS = 64
# Older batches' GETs in flight at once, every job's together (one pool): the window's files are
# known once the listing is in, and each GET is a small, latency-bound request.
WINDOW_READERS = 128
# Kafka requests of one tier in flight at once (ListOffsets by time, DescribeConfigs).
KAFKA_REQUESTS = 8

Stamps = Mapping[int, Mapping[tuple[str, int], int | None]]  # cluster -> record timestamps
K = TypeVar("K")
T = TypeVar("T")


def failed_result(location: str, error: SparkLagError) -> CheckResult:
    """The result of a checkpoint that could not be read: CHECK_FAILED in its JSON, with the
    error (its verdict UNKNOWN: the check tells nothing of the job)."""
    return CheckResult.failed(location, f"{type(error).__name__}: {error}")


@dataclass
class Evidence:
    """What one job is judged on, gathered tier by tier."""

    state: CheckpointState
    starts: Offsets | None  # where each source started, before the first commit
    stepped: bool = False  # offsets/C-1 read, the rest of the window maybe not
    stamps: Stamps | None = None
    retention: dict[str, Mapping[str, TopicRetention | None]] | None = None
    run_start: Offsets | None = None
    waited: bool = False
    # A real-time query: Kafka's offsets when each checkpoint was written, by time.
    ends: dict[float | None, Offsets | None] = field(default_factory=dict)
    all_ends: bool = False  # as of every checkpoint of the history, not only the newest
    reads: list[Read] = field(default_factory=list)
    # ``positions.measure`` of what it held then: (state, stamps, stepped) -> the positions.
    measured: tuple[tuple[Any, ...], LagReport] | None = None

    def read(self, what: str, asked_by: Iterable[str] = ()) -> None:
        self.reads.append(Read(what, tuple(asked_by)))


def _first_read(state: CheckpointState) -> Read:
    """What the first read of a checkpoint fetched (older batches its reader already held
    come with it, at no cost)."""
    batches = ["offsets/C" if state.committed is not None else "no commit"]
    if len(state.history) > 1:
        batches.append(f"{len(state.history) - 1} older batch(es) held")
    if state.in_flight is not None:
        batches.append("the in-flight offsets file")
    return Read(f"listing, {' and '.join(batches)}, Kafka end offsets")


def _source_starts(session: Session, state: CheckpointState) -> Offsets | None:
    """Before the first commit: where each Kafka source of the in-flight batch started
    (``sources/<id>/0``, never purged), so its lag is counted from there. None otherwise."""
    from airflow_sparklag.checkpoint_files import parse_source_start
    from airflow_sparklag.location import join

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


def _together(calls: Mapping[K, Callable[[], T]]) -> dict[K, T]:
    """Every call of one tier in flight at once: key -> its answer."""
    if len(calls) <= 1:
        return {key: call() for key, call in calls.items()}
    with ThreadPoolExecutor(max_workers=min(KAFKA_REQUESTS, len(calls))) as pool:
        futures = {key: pool.submit(call) for key, call in calls.items()}
        return {key: future.result() for key, future in futures.items()}


class _Check:
    """The evidence of several checkpoints against ONE Kafka snapshot per cluster
    (``snapshots[0]``: the main one), at ONE instant; ``run`` plans, fetches and judges."""

    def __init__(
        self,
        session: Session,
        states: Mapping[str, CheckpointState],
        options: CheckOptions,
        now: float | None,
        query_id: bool = True,
        snapshots: Mapping[int, KafkaSnapshot] | None = None,
    ) -> None:
        if snapshots is None:
            topics = cluster_topics(session, states)
            snapshots = cluster_snapshots(session, topics, options.subscribe_pattern)
        self.session = session
        self.options = options
        self.snapshots = snapshots
        self.now = max(s.fetched_at for s in snapshots.values()) if now is None else now
        self.query_id = query_id  # the readers the states came from (``Session.reader``)
        self.jobs = {
            loc: Evidence(st, _source_starts(session, st), reads=[_first_read(st)])
            for loc, st in states.items()
        }
        self.errors: dict[str, SparkLagError] = {}  # reading a job's older batches failed

    # -- what was read, as positions ------------------------------------------------------

    def _arguments(self, job: Evidence) -> Measuring:
        """The arguments of ``measure``/``compute_lag`` for what ``job`` holds."""
        options, state = self.options, job.state
        return {
            "now": self.now,
            # Not in the checkpoint: None is read_uncommitted, the Kafka source's default.
            "read_committed": bool(options.read_committed),
            "record_timestamps": None if job.stamps is None else job.stamps.get(0, {}),
            "source_starts": job.starts,
            "runs_every": options.runs_every,
            "run_grace": options.grace,
            "source_clusters": self.source_clusters(state, job.stamps),
            # Only offsets/C read while older batches wait: the age of a waiting record is
            # not estimated (the declarations of offsets/C alone do not depend on it).
            "estimate_ages": not state.unread_history or job.stepped,
            "subscribe_pattern": options.subscribe_pattern,
            "assign": options.assign,
        }

    def _checkpoint_ends(self, job: Evidence, report: LagReport) -> list[Offsets | None] | None:
        real_time = report.real_time
        if real_time is None or not job.ends:
            return None
        times = real_time.checkpoint_times
        if job.all_ends:
            return [job.ends.get(t) for t in times]
        return [*([None] * (len(times) - 1)), job.ends.get(times[-1])]

    def positions(self, job: Evidence) -> LagReport:
        """``positions.measure`` of what ``job`` holds, made again only once it holds more (a
        newer state, record timestamps, offsets/C-1): the tiers and the judgment share it."""
        held = (job.state, job.stamps, job.stepped)
        if job.measured is None or not all(map(operator.is_, job.measured[0], held)):
            arguments = self._arguments(job)
            job.measured = (held, measure(job.state, self.snapshots[0], **arguments))
        return job.measured[1]

    def measure(self, job: Evidence) -> LagReport:
        """``job``'s positions so far (``positions.measure``): what the plan looks at."""
        report = self.positions(job)
        ends = self._checkpoint_ends(job, report)
        return answered(report, ends, job.retention)

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
        views = {
            cluster: SourceCluster(
                self.snapshots.get(cluster, self.snapshots[0]),
                self.session.cluster_servers(cluster),
                None if stamps is None else stamps.get(cluster, {}),
            )
            for cluster in {self.session.cluster_of(source_id) for source_id in ids}
        }
        return {source_id: views[self.session.cluster_of(source_id)] for source_id in ids}

    def record_positions(self, report: LagReport) -> dict[int, dict[tuple[str, int], int]]:
        """Where exact mode reads a record, per cluster of the report's sources: the first
        unread offset of every lagging partition (committed, else where the query started,
        else the log start of a new partition). Partitions with lost records are skipped
        (there is nothing to read there)."""
        wanted: dict[int, dict[tuple[str, int], int]] = {}
        for source in report.kafka_sources:
            at = wanted.setdefault(self.session.cluster_of(source.source_id), {})
            for p in (p for topic in source.topics for p in topic.partitions):
                if p.lag <= 0 or p.data_loss or p.log_start_offset is None:
                    continue
                position = p.committed_offset
                if position is None:
                    position = p.start_offset if p.start_offset is not None else p.log_start_offset
                at[p.topic, p.partition] = min(at.get((p.topic, p.partition), position), position)
        return wanted

    def topics(self, reports: Iterable[LagReport], lagging: bool = False) -> dict[int, set[str]]:
        """The reports' topics per cluster: those Kafka has, or with ``lagging`` those with lag."""
        topics: dict[int, set[str]] = {}
        for report in reports:
            for source in report.kafka_sources:
                names = {t.topic for t in source.topics if (t.lag if lagging else not t.missing)}
                topics.setdefault(self.session.cluster_of(source.source_id), set()).update(names)
        return topics

    # -- the tiers ----------------------------------------------------------------------------

    def run(self) -> dict[str, CheckResult]:
        """Plan, fetch (every job of a tier together), then ONE report and verdict per job."""
        measured = self.with_history(self.remeasure(self.jobs))
        measured = {loc: m for loc, m in measured.items() if loc not in self.errors}
        if any(s.partitions or s.missing_topics for s in self.snapshots.values()):
            measured.update(self.with_retention(measured))
            measured.update(self.with_record_ages(measured))
            self.with_kafka_answers(measured)
        results = {}
        for loc in measured:
            job = self.jobs[loc]
            answers = Answers(
                retention=job.retention,
                run_start=job.run_start,
                waited=job.waited,
                checkpoint_ends=self._checkpoint_ends(job, measured[loc]),
            )
            report = compute_lag(
                job.state,
                self.snapshots[0],
                **self._arguments(job),
                answers=answers,
                thresholds=self.options.thresholds,
                measured=self.positions(job),
            )
            verdict = evaluate(report, self.options.thresholds, now=self.now)
            results[loc] = CheckResult(report, verdict, loc, evidence=tuple(job.reads))
            # A later poll lists this checkpoint again once its verdict may change by time.
            reader = self.session.reader(loc, query_id=self.query_id)
            reader.confirm_at = changes_at(report, self.options.thresholds)
        for loc, error in self.errors.items():
            results[loc] = failed_result(loc, error)
        return results

    def remeasure(self, locs: Iterable[str]) -> dict[str, LagReport]:
        """The positions of ``locs`` again; a real-time query's as of its newest checkpoint,
        and, when its lag then is above what its interval read (``health.rule_lagging_real_
        time`` may judge the trend), as of each older one of the history too (one ListOffsets
        by timestamp per checkpoint time, once)."""
        measured = {loc: self.measure(self.jobs[loc]) for loc in locs}
        times = {
            loc: m.real_time.checkpoint_times
            for loc, m in measured.items()
            if m.real_time is not None
        }
        self.fetch_ends({loc: t[-1:] for loc, t in times.items()}, measured, "real-time trigger")
        measured.update({loc: self.measure(self.jobs[loc]) for loc in times})
        lagging = {loc: t for loc, t in times.items() if self._behind_interval(measured[loc])}
        for loc in lagging:
            self.jobs[loc].all_ends = True
        self.fetch_ends(lagging, measured, "lagging_real_time")
        measured.update({loc: self.measure(self.jobs[loc]) for loc in lagging})
        return measured

    def _behind_interval(self, report: LagReport) -> bool:
        """Is a real-time query's lag above what its newest interval read (and the allowed
        lag)?"""
        read = report.history[-1].records if report.history else None
        allowed = self.options.thresholds.allowed_lag
        return read is not None and report.total_lag > max(read, allowed)

    def fetch_ends(
        self,
        wanted: Mapping[str, Sequence[float | None]],
        reports: Mapping[str, LagReport],
        by: str,
    ) -> None:
        """Kafka's offsets at each time in ``wanted`` (job -> times) not asked yet, all jobs
        together."""
        new = {loc: [t for t in ts if t not in self.jobs[loc].ends] for loc, ts in wanted.items()}
        new = {loc: ts for loc, ts in new.items() if ts}
        calls = {
            (loc, i): partial(self.offsets_at, reports[loc], None if t is None else int(t * 1000))
            for loc, times in new.items()
            for i, t in enumerate(times)
        }
        answers = _together(calls)
        for loc, times in new.items():
            job = self.jobs[loc]
            for i, t in enumerate(times):
                job.ends[t] = answers[loc, i]
            job.read(f"Kafka offsets at {len(times)} checkpoint time(s)", [by])

    def with_history(self, measured: Mapping[str, LagReport]) -> dict[str, LagReport]:
        """Every job's positions after reading what its declarations ask for, newest first:
        offsets/C-1 where it may settle them, then the whole window where not."""
        for step, newest, what in (
            (Reads.OLDER, 1, "offsets/C-1"),
            (Reads.WINDOW, None, "the window's older batches"),
        ):
            wanted: dict[str, tuple[str, ...]] = {}
            for loc, report in measured.items():
                job = self.jobs[loc]
                if loc in self.errors or not job.state.unread_history:
                    continue
                reads, asked_by = reads_needed(
                    report,
                    self.options.thresholds,
                    self.now,
                    exact_time_lag=self.options.exact_time_lag,
                )
                if reads and (step == Reads.WINDOW or reads == Reads.OLDER):
                    wanted[loc] = asked_by
            done = self.read_history(dict.fromkeys(wanted, newest))
            for loc in done:
                self.jobs[loc].stepped = step == Reads.OLDER
                self.jobs[loc].read(what, wanted[loc])
            measured = {**measured, **self.remeasure(done)}
        return dict(measured)

    def read_history(self, wanted: Mapping[str, int | None]) -> list[str]:
        """Read the unread history of each job in ``wanted`` (all of it, or its newest N
        batches), in parallel; the locations read, a failure recorded in ``errors``."""

        def read(loc: str) -> CheckpointState | SparkLagError:
            reader = self.session.reader(loc, query_id=self.query_id)
            try:
                return reader.read_history(self.jobs[loc].state, wanted[loc], pool=gets)
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
                self.jobs[loc].state = outcome
        return [loc for loc in wanted if loc not in self.errors]

    def with_record_ages(self, measured: Mapping[str, LagReport]) -> dict[str, LagReport]:
        """Record timestamps (one consumer pass per cluster, every job's together) where the
        age of waiting records is needed: exact mode, or a rule the estimate cannot serve."""
        thresholds, exact = self.options.thresholds, self.options.exact_time_lag
        asked = {
            loc: ("exact_time_lag",) if exact else ages_needed(r, thresholds, self.now)
            for loc, r in measured.items()
        }
        asked = {loc: names for loc, names in asked.items() if names}
        if not asked:
            return {}
        positions = {loc: self.record_positions(measured[loc]) for loc in asked}
        stamps = {
            c: _exact_timestamps(
                self.session.cluster_kafka(c), [wanted.get(c, {}) for wanted in positions.values()]
            )
            for c in sorted({c for wanted in positions.values() for c in wanted})
        }
        for loc, by_cluster in positions.items():
            job = self.jobs[loc]
            job.stamps = {
                c: {key: stamps[c].get((*key, off)) for key, off in wanted.items()}
                for c, wanted in by_cluster.items()
            }
            count = sum(len(wanted) for wanted in by_cluster.values())
            if count:
                job.read(f"record timestamps of {count} partition(s)", asked[loc])
        return self.remeasure(asked)

    def with_retention(self, measured: Mapping[str, LagReport]) -> dict[str, LagReport]:
        """The retention of the topics with lag (one DescribeConfigs per cluster, every job's
        topics together, remembered by the client): each lagging partition's time to data
        loss, which the time_to_data_loss rule judges and may need record ages for."""
        lagging = {loc: r for loc, r in measured.items() if r.total_lag > 0}
        calls = {
            cluster: partial(self.session.cluster_kafka(cluster).retention, sorted(names))
            for cluster, names in self.topics(lagging.values(), lagging=True).items()
            if names
        }
        answers = _together(calls)
        for loc, report in lagging.items():
            job = self.jobs[loc]
            job.retention = {
                s.source_id: answers.get(self.session.cluster_of(s.source_id), {})
                for s in report.kafka_sources
            }
            job.read("topic retention", ["time_to_data_loss"])
        return self.remeasure(lagging)

    def with_kafka_answers(self, measured: Mapping[str, LagReport]) -> None:
        """What else Kafka answers beyond the snapshot, every job's asked together: the
        offsets at a declared scheduled job's last run start (was it complete?) and before an
        undeclared job's last run (did records wait: it looks scheduled, when the idle rule
        would call it STOPPED)."""
        thresholds = self.options.thresholds
        calls: dict[tuple[str, str], Callable[[], Any]] = {}
        for loc, report in measured.items():
            started = run_start(report) if self.options.runs_every is not None else None
            if started is not None:
                calls["start", loc] = partial(self.offsets_at, report, int(started * 1000))
            probe = waiting_probe(report) if waiting_wanted(report, thresholds, self.now) else None
            if probe is not None:
                calls["waited", loc] = partial(self.offsets_at, report, probe[0])
        answers = _together(calls)
        for loc, report in measured.items():
            job = self.jobs[loc]
            if ("start", loc) in answers:
                job.run_start = answers["start", loc]
                job.read("Kafka offsets at the last run's start", ["run completeness"])
            if ("waited", loc) in answers:
                found, probe = answers["waited", loc], waiting_probe(report)
                if found is not None and probe is not None:
                    job.waited = records_waited(report, found, probe[1])
                job.read("Kafka offsets before the last run", ["stopped"])

    def offsets_at(self, report: LagReport, timestamp_ms: int | None) -> Offsets | None:
        """Kafka's offsets of the report's sources at ``timestamp_ms`` (ListOffsets by
        timestamp, one per cluster); None when unknown (no time, or a topic went away)."""
        if timestamp_ms is None:
            return None
        try:
            by_cluster = {
                c: self.session.cluster_kafka(c).offsets_for_time(sorted(names), timestamp_ms)
                for c, names in sorted(self.topics([report]).items())
                if names
            }
        except SparkLagError:
            return None
        cluster_of = self.session.cluster_of
        return {
            s.source_id: by_cluster.get(cluster_of(s.source_id), {}) for s in report.kafka_sources
        }


def _exact_timestamps(
    client: Any, wanted: Sequence[Mapping[tuple[str, int], int]]
) -> dict[tuple[str, int, int], int | None]:
    """Record timestamps for every (topic, partition, offset) any job asks for: one consumer
    pass per distinct offset of a partition (one pass when the jobs agree)."""
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


def judge_states(
    session: Session,
    states: Mapping[str, CheckpointState],
    options: CheckOptions,
    *,
    now: float | None = None,
    query_id: bool = True,
    snapshots: Mapping[int, KafkaSnapshot] | None = None,
) -> dict[str, CheckResult]:
    """One Kafka snapshot per cluster for all topics of all states, then the plan's tiers for
    every job together and ONE report and verdict each, at one instant (``now``, default the
    snapshot's fetch time). A failure to read a job's older batches gives that job a failed
    result. ``snapshots``: ones already taken, per cluster (``Session.cluster_of``; 0, the main
    one, required), as the Spark scan's executors judge against the driver's broadcast ones.
    """
    return _Check(session, states, options, now, query_id, snapshots).run()


def judge_one(
    session: Session,
    location: str,
    state: CheckpointState,
    options: CheckOptions,
    now: float | None,
) -> CheckResult:
    """:func:`judge_states` of one job; a failure to read its older batches is raised."""
    check = _Check(session, {location: state}, options, now)
    result = check.run()[location]
    if location in check.errors:
        raise check.errors[location]
    return result
