"""Positions of a Spark query: its last committed Kafka offsets against the live log, per
partition, and the estimated age of the first record each partition has waiting. `measure()`
is pure; a check's plan looks at it between its reads (docs/architecture.md).

Lag in records is an offset difference: on transactional topics the commit/abort markers and the
records of aborted transactions occupy offsets too, so a consumer reads fewer records than the
lag says (the report's `notes` say so and show the last stable offset).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from airflow_sparklag.checkpoint import real_time_interval
from airflow_sparklag.kafka import subscribe_regex
from airflow_sparklag.model.report import (
    HistoryBatch,
    InFlightBatch,
    LagReport,
    PartitionLag,
    Reads,
    RealTime,
    SourceLag,
    TopicLag,
)
from airflow_sparklag.runs import schedule_of
from airflow_sparklag.timelag import estimate_age, history_points

if TYPE_CHECKING:
    from typing import Unpack

    from airflow_sparklag.checkpoint import BatchOffsets, CheckpointState
    from airflow_sparklag.kafka import KafkaSnapshot


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def sum_lags(parts: Sequence[PartitionLag], *, report: bool = False) -> dict[str, Any]:
    """The totals of ``parts``: their lag, their worst partition (named only when it lags),
    their largest known ``lag_seconds``; a topic's fields, or with ``report`` a report's."""
    worst = max(parts, key=lambda pl: pl.lag, default=None)
    known = [pl.lag_seconds for pl in parts if pl.lag_seconds is not None]
    totals: dict[str, Any] = {
        "total_lag" if report else "lag": sum(pl.lag for pl in parts),
        "max_lag": worst.lag if worst else 0,
        "max_lag_partition": worst.partition if worst and worst.lag > 0 else None,
        "max_lag_seconds": max(known) if known else None,
    }
    if report:
        totals["max_lag_topic"] = worst.topic if worst and worst.lag > 0 else None
    return totals


def _kafka_offsets(batch: BatchOffsets | None) -> Offsets:
    """source id -> topic -> partition -> offset, Kafka sources only."""
    if batch is None:
        return {}
    return {
        s.source_id: s.kafka for s in batch.sources if s.kind == "kafka" and s.kafka is not None
    }


def _rates(
    series: Sequence[BatchOffsets], source_ends: Offsets, fetched_at: float, real_time: bool
) -> tuple[float | None, float | None]:
    """(consumption rate, production-rate upper bound) over the retained history;
    ``source_ends``: each source's reference offsets in its cluster. Each batch's offsets are
    dated when they were reached (``batch_time_ms``): the upper bound holds only then (the log
    end was at least the first batch's offsets at that time)."""
    timed = [b for b in series if batch_time_ms(b, real_time) is not None]
    if not timed:
        return None, None
    first, last = timed[0], timed[-1]
    first_offsets, last_offsets = _kafka_offsets(first), _kafka_offsets(last)
    t_first = (batch_time_ms(first, real_time) or 0) / 1000.0
    t_last = (batch_time_ms(last, real_time) or 0) / 1000.0
    consumed = 0
    for source_id, topic, partition, start in _entries(first_offsets):
        end = offset_at(last_offsets, source_id, topic, partition)
        if end is not None:
            consumed += end - start  # not clamped: a rewind between them gives no rate
    produced = records_between(first_offsets, source_ends)
    consumption = consumed / (t_last - t_first) if t_last > t_first and consumed >= 0 else None
    production = produced / (fetched_at - t_first) if fetched_at > t_first else None
    return _finite(consumption), _finite(production)


def _looks_rate_limited(
    series_offsets: Sequence[Offsets],
    planned: Offsets,
    source_ends: Offsets,
    fewest: int = 2,
    steps: Sequence[int] | None = None,
) -> bool:
    """True when every observed batch read the same number of records while a backlog remained.

    maxOffsetsPerTrigger caps each batch at exactly N records as long as more are waiting;
    free-running batches of an organic stream practically never match to the record. Needs at
    least ``fewest`` steps between batches (retained history plus the in-flight one) to say so.
    ``steps``: the records read between the committed batches (``_steps``), when known.
    """
    totals = list(_steps(series_offsets) if steps is None else steps)
    if planned and series_offsets:
        totals.append(records_between(series_offsets[-1], planned))
    if len(totals) < fewest or totals[0] <= 0 or any(t != totals[0] for t in totals):
        return False
    backlog = sum(
        max(0, offset_at(source_ends, source_id, topic, partition, offset) - offset)
        for source_id, topic, partition, offset in _entries(planned or series_offsets[-1])
    )
    return backlog > totals[0]


def _steps(series_offsets: Sequence[Offsets]) -> list[int]:
    """The records read between each two consecutive batches of ``series_offsets``."""
    return [records_between(before, after) for before, after in itertools.pairwise(series_offsets)]


def more_history(report: LagReport) -> Reads:
    """offsets/C-1 when the report has only the newest batch, else the whole window."""
    return Reads.OLDER if len(report.history) < 2 else Reads.WINDOW


def time_lag_reads(report: LagReport) -> Reads:
    """What this report's own numbers need (the time-lag estimate, the rate-limit guess that
    withholds it, the rates): nothing for a caught-up job; offsets/C-1 for a waiting one, then
    the rest of the window when a partition is not in both, an offset went back between them,
    or older batches could make the rate-limit guess true.
    """
    if not any(p.lag > 0 or _planned_short(p, report.read_committed) for p in report.partitions()):
        return Reads.NOTHING
    if len(report.history) < 2:
        return Reads.OLDER
    for p in report.partitions():
        h = p.offset_history
        if len(h) < 2 or h[-1] is None or h[-2] is None or h[-1] < h[-2]:
            return Reads.WINDOW
    # Every partition has offsets/C-1 and offsets/C here: one step at least.
    series, planned, ends = positions_of(report)
    return Reads.WINDOW if _looks_rate_limited(series, planned, ends, fewest=1) else Reads.NOTHING


def _reference(p: PartitionLag, read_committed: bool) -> int | None:
    """The offset ``p``'s lag is measured to: the last stable offset under read_committed."""
    if read_committed and p.last_stable_offset is not None:
        return p.last_stable_offset
    return p.log_end_offset


def _planned_short(p: PartitionLag, read_committed: bool) -> bool:
    """An in-flight batch planned short of the log end (of the last stable offset)."""
    reference = _reference(p, read_committed)
    return p.planned_offset is not None and reference is not None and p.planned_offset < reference


def _entries(offsets: Offsets) -> Iterator[tuple[str, str, int, int]]:
    """(source id, topic, partition, offset) of every partition in ``offsets``."""
    for source_id, topics in offsets.items():
        for topic, parts in topics.items():
            for partition, offset in parts.items():
                yield source_id, topic, partition, offset


def offset_at(
    offsets: Offsets, source_id: str, topic: str, partition: int, default: Any = None
) -> Any:
    """``offsets[source_id][topic][partition]``, or ``default``."""
    return offsets.get(source_id, {}).get(topic, {}).get(partition, default)


def records_between(before: Offsets, after: Offsets) -> int:
    """Records read from ``before`` to ``after``, summed over every partition in both."""
    total = 0
    for source_id, topics in after.items():
        for topic, parts in topics.items():
            bases = before.get(source_id, {}).get(topic, {})  # a fleet's hot loop: looked up once
            for partition, offset in parts.items():
                base = bases.get(partition)
                if base is not None:
                    total += max(0, offset - base)
    return total


def positions_of(report: LagReport) -> tuple[list[Offsets], Offsets, Offsets]:
    """A report's committed series, in-flight plan and reference ends, as the offsets maps
    ``_looks_rate_limited`` takes (source id -> topic -> partition -> offset)."""
    width = max((len(p.offset_history) for p in report.partitions()), default=0)
    series: list[dict[str, dict[str, dict[int, int]]]] = [{} for _ in range(width)]
    planned: dict[str, dict[str, dict[int, int]]] = {}
    ends: dict[str, dict[str, dict[int, int]]] = {}
    for source in report.kafka_sources:
        for p in (p for topic in source.topics for p in topic.partitions):
            ref = _reference(p, report.read_committed)
            for offsets, offset in (
                *zip(series, p.offset_history, strict=False),
                (planned, p.planned_offset),
                (ends, ref),
            ):
                if offset is not None:
                    offsets.setdefault(source.source_id, {}).setdefault(p.topic, {})[
                        p.partition
                    ] = offset
    return list(series), planned, ends


def batch_time_ms(batch: BatchOffsets, real_time: bool = False) -> int | None:
    """When a batch's offsets were reached: its ``batchTimestampMs`` (a micro-batch plans up
    to them then); for a continuous epoch, which has none, and for a ``real_time`` checkpoint,
    whose ``batchTimestampMs`` is its interval's START while its offsets are those of the END,
    when its offsets file was written (Spark writes it at the epoch's or interval's end);
    None when not known."""
    if batch.batch_timestamp_ms is not None and not real_time:
        return batch.batch_timestamp_ms
    if batch.modified is not None:
        return int(batch.modified * 1000)
    return None if real_time else batch.batch_timestamp_ms


def _committed_series(state: CheckpointState) -> list[BatchOffsets]:
    """Retained committed batches, oldest first, ending at offsets/C."""
    committed = state.committed
    series = sorted(
        (b for b in state.history if committed is None or b.batch_id <= committed.batch_id),
        key=lambda b: b.batch_id,
    )
    if committed is not None and (not series or series[-1].batch_id != committed.batch_id):
        series.append(committed)
    return series


def _reference_ends(
    snapshot: KafkaSnapshot, topics: Iterable[str], read_committed: bool
) -> dict[str, dict[int, int]]:
    """topic -> partition -> the offset the lag is measured to, for ``topics`` only: a fleet
    shares one snapshot of every job's topics, and walking all of it per job cost more than the
    job itself."""
    ref_ends: dict[str, dict[int, int]] = {}
    for topic in topics:
        kafka_parts = snapshot.partitions.get(topic)
        if kafka_parts is None:
            continue
        # Under read_committed Spark stops at the LSO: measuring against the high watermark
        # would show a permanent lag on transactional topics.
        ref_ends[topic] = {
            partition: po.last_stable
            if read_committed and po.last_stable is not None
            else po.log_end
            for partition, po in kafka_parts.items()
        }
    return ref_ends


RATE_LIMITED = "batches look capped by maxOffsetsPerTrigger: the history cannot date records"
NO_TIMESTAMP = "the record's timestamp could not be read"
NOT_ESTIMATED = "not estimated (a preliminary report)"
REAL_TIME_AGE = (
    "real-time trigger: its batch times are its intervals' starts, so only the record's "
    "timestamp dates it as of the checkpoint (exact time lag)"
)


Offsets = Mapping[str, Mapping[str, Mapping[int, int]]]  # source id -> topic -> partition -> offset


@dataclass(frozen=True)
class SourceCluster:
    """The cluster one source is measured against. The checkpoint does not record which
    cluster a source reads, so the session's mapping says (docs/multi-cluster.md).

    >>> SourceCluster(snapshot_of_b, "b:9092")                       # doctest: +SKIP
    """

    snapshot: KafkaSnapshot
    servers: str | None  # None: the session's main cluster
    # Exact time-lag mode: (topic, partition) -> timestamp ms of the record at the position.
    record_timestamps: Mapping[tuple[str, int], int | None] | None = None


@dataclass(frozen=True)
class LagBasis:
    """What every partition of one query is measured against (one per `measure` call)."""

    clusters: Mapping[str, SourceCluster]  # source id -> the cluster it is measured against
    # source id -> topic -> partition -> reference offset: a topic of one name may live on two
    # clusters with different offsets.
    ref_ends: Mapping[str, Mapping[str, Mapping[int, int]]]
    now_ms: float
    rate_limited: bool
    # What the time-lag estimate dates records by: the committed batches and the in-flight one
    # (its planned offsets were the log end when it was planned), with the live log end.
    observed: Sequence[BatchOffsets]
    # Why lag_seconds of a lagging partition is not estimated, when it is not: NOT_ESTIMATED
    # for a report only asked whether it needs the older batches (then made again with them);
    # REAL_TIME_AGE for a real-time query (its batch times are its intervals' starts).
    unestimated: str | None = None

    @functools.cached_property
    def _points(self) -> dict[tuple[str, int], list[tuple[int, float]]]:
        """(topic, partition) -> history points: made once, only when a partition lags."""
        return history_points(self.observed)

    def age(
        self, source_id: str, topic: str, partition: int, position: int, lag: int
    ) -> tuple[float | None, str | None]:
        """How old the first unread record is: ``(seconds, None)``, or ``(None, why)`` when
        it is unknown."""
        if lag == 0:
            return 0.0, None
        cluster = self.clusters[source_id]
        if cluster.record_timestamps is not None:
            ts = cluster.record_timestamps.get((topic, partition))
            if ts is None:
                return None, NO_TIMESTAMP
            return max(0.0, (self.now_ms - ts) / 1000.0), None
        if self.rate_limited:
            return None, RATE_LIMITED
        if self.unestimated is not None:
            return None, self.unestimated
        live = self.ref_ends[source_id].get(topic, {}).get(partition)
        points = self._points.get((topic, partition), ())
        fetched_ms = cluster.snapshot.fetched_at * 1000.0
        return estimate_age(points, live, fetched_ms, position, self.now_ms)


def _partition_lag(
    basis: LagBasis,
    source_id: str,
    topic: str,
    partition: int,
    committed: int | None,
    planned: int | None,
    history: tuple[int | None, ...],
    start: int | None,
) -> PartitionLag:
    """Lag of one partition: from its committed offset, else the offset the query started at
    (no commit yet), else the log start (a partition the checkpoint lacks) to the log end."""
    snapshot = basis.clusters[source_id].snapshot
    po = snapshot.partitions.get(topic, {}).get(partition)
    if po is None:
        return PartitionLag(
            topic, partition, committed, planned, None, None, None, 0, None,
            removed_partition=topic not in snapshot.missing_topics,
            offset_history=history, start_offset=start,
        )  # fmt: skip
    ref = basis.ref_ends[source_id][topic][partition]
    new = committed is None and start is None
    position = committed
    if position is None:
        position = po.log_start if start is None else start
    lag = max(0, ref - position)
    data_loss = not new and position < po.log_start
    age, unknown = basis.age(source_id, topic, partition, position, lag)
    seconds = _finite(age)
    # A frozen dataclass's __init__ sets each of the 17 fields through object.__setattr__;
    # a fleet makes one per partition (32,000 for 1,000 jobs): fill the instance at once.
    lag_of = object.__new__(PartitionLag)
    lag_of.__dict__.update(
        topic=topic,
        partition=partition,
        committed_offset=committed,
        planned_offset=planned,
        log_start_offset=po.log_start,
        log_end_offset=po.log_end,
        last_stable_offset=po.last_stable,
        lag=lag,
        lag_seconds=seconds,
        new_partition=new,
        removed_partition=False,
        data_loss=data_loss,
        records_lost=po.log_start - position if data_loss else 0,
        ahead_of_log=not new and position > po.log_end,
        offset_history=history,
        start_offset=start,
        lag_seconds_unknown=(unknown or "unknown") if seconds is None else None,
    )
    return lag_of


def _basis(
    main: SourceCluster,
    clusters: Mapping[str, SourceCluster],
    series_offsets: Sequence[Offsets],
    planned: Offsets,
    steps: Sequence[int],
    read_committed: bool,
    **shared: Any,
) -> LagBasis:
    """The `LagBasis` of the query's sources (``clusters``: those not on ``main``);
    ``shared``: its fields that do not depend on them."""
    every = [*series_offsets, planned]  # the series ends with offsets/C
    topics = {topic for offsets in every for parts in offsets.values() for topic in parts}
    views = {source_id: clusters.get(source_id, main) for offsets in every for source_id in offsets}
    distinct = {id(view): view for view in views.values()}
    ends = {
        key: _reference_ends(view.snapshot, topics | view.snapshot.pattern_topics, read_committed)
        for key, view in distinct.items()
    }
    source_ends = {source_id: ends[id(view)] for source_id, view in views.items()}
    rate_limited = _looks_rate_limited(series_offsets, planned, source_ends, steps=steps)
    return LagBasis(views, source_ends, rate_limited=rate_limited, **shared)


def _topic_lag(
    basis: LagBasis,
    source_id: str,
    topic: str,
    stored: Mapping[int, int],
    planned_parts: Mapping[int, int],
    source_series: Sequence[Mapping[str, Mapping[int, int]]],
    *,
    started: bool = False,
    assign: bool = False,
) -> TopicLag:
    """Every partition of one topic of one source: those stored and those Kafka has (with
    ``assign``: those stored or planned only, the others of Kafka in ``not_read``). ``stored``:
    the committed offsets, or with ``started`` where a query not committed yet started."""
    cluster = basis.clusters[source_id]
    snapshot = cluster.snapshot
    if topic in snapshot.missing_topics or topic not in snapshot.partitions:
        # Nothing to measure against: unknown, never 0 (a 0 here once hid a source that
        # reads another cluster).
        return TopicLag(
            topic,
            missing=True,
            partitions=(),
            lag=None,
            lag_unknown=f"topic {topic} not found in "
            + ("the cluster" if cluster.servers is None else f"cluster {cluster.servers}"),
            checkpoint_offsets=dict(stored),
        )
    in_kafka = set(snapshot.partitions[topic])
    topic_series = [offsets.get(topic, {}) for offsets in source_series]
    listed = set(stored) | set(planned_parts)
    lags = tuple(
        _partition_lag(
            basis,
            source_id,
            topic,
            p,
            None if started else stored.get(p),
            planned_parts.get(p),
            tuple(offsets.get(p) for offsets in topic_series),
            stored.get(p) if started else None,
        )
        for p in sorted(listed if assign else listed | in_kafka)
    )
    not_read = tuple(sorted(in_kafka - listed)) if assign else ()
    return TopicLag(topic, False, lags, **sum_lags(lags), new_topic=not stored, not_read=not_read)


def partition_gap(listed: Mapping[str, Iterable[int]]) -> bool:
    """Do the partitions a source lists (topic -> partitions) skip one below the highest of
    a topic? Only a query of fixed partitions (``assign``) does that: docs/lag-and-health.md,
    "Subscriptions". A partition missing after the highest stays ambiguous."""
    for partitions in listed.values():
        numbers = set(partitions)
        if numbers and len(numbers) <= max(numbers):
            return True
    return False


def _subscribed_by(snapshot: KafkaSnapshot, pattern: str | None, read: set[str]) -> bool:
    """Is ``pattern`` the subscription of a source that has read ``read``: found in every one
    of them (Spark reads no other topic by a pattern), with the cluster's topics listed by it
    in ``snapshot``?"""
    if pattern is None or snapshot.pattern != pattern or not read:
        return False
    regex = subscribe_regex(pattern)
    return all(regex.search(topic) for topic in read)


def _source_lags(
    basis: LagBasis,
    state: CheckpointState,
    planned: Offsets,
    series_offsets: Sequence[Offsets],
    source_starts: Offsets | None,
    pattern: str | None = None,
    assign: bool = False,
) -> list[SourceLag]:
    """One SourceLag per source of the committed batch (before the first commit: of the
    in-flight batch, from where it started: ``source_starts``); non-Kafka sources have no
    topics. Topics a source has not read yet (in the in-flight batch only, or found by
    ``pattern``) wait from their log start; with ``assign`` or a gap in its listed partitions
    (``partition_gap``) only the partitions it lists are measured."""
    started = state.committed is None
    batch = state.in_flight if started else state.committed
    starts = source_starts or {}
    sources: list[SourceLag] = []
    for source in batch.sources if batch is not None else ():
        if source.kind != "kafka" or source.kafka is None:
            sources.append(SourceLag(source.source_id, source.kind, False, ()))
            continue
        source_id, cluster = source.source_id, basis.clusters[source.source_id]
        stored = starts.get(source_id) if started else source.kafka
        if stored is None:  # no commit yet and its starting offsets unknown: not measured
            why = f"no batch committed yet and sources/{source_id}/0 (where it started) not found"
            sources.append(
                SourceLag(
                    source_id, "kafka", True, (), None, lag_unknown=why, cluster=cluster.servers
                )
            )
            continue
        planned_topics = planned.get(source_id, {})
        read = set(source.kafka) | set(stored) | set(planned_topics)
        listed = {t: {*stored.get(t, {}), *planned_topics.get(t, {})} for t in read}
        fixed = assign or partition_gap(listed)  # a gap: this source reads by assign
        subscribed = not fixed and _subscribed_by(cluster.snapshot, pattern, read)
        unread = set(cluster.snapshot.pattern_topics) - read if subscribed else set()
        # This source's offsets at each retained batch, looked up once.
        source_series = [offsets.get(source_id, {}) for offsets in series_offsets]
        topics = tuple(
            _topic_lag(
                basis,
                source_id,
                topic,
                stored.get(topic, {}),
                planned_topics.get(topic, {}),
                source_series,
                started=started,
                assign=fixed,
            )
            for topic in sorted(read | unread)
        )
        unknown = "; ".join(t.lag_unknown or t.topic for t in topics if t.lag is None)
        lag = None if unknown else sum(t.lag or 0 for t in topics)
        sources.append(
            SourceLag(
                source_id,
                "kafka",
                True,
                topics,
                lag,
                lag_unknown=unknown or None,
                cluster=cluster.servers,
                pattern=pattern if subscribed else None,
            )
        )
    return sources


def _in_flight(
    state: CheckpointState,
    planned: Offsets,
    now: float,
    source_starts: Offsets | None,
) -> InFlightBatch | None:
    """The planned, uncommitted batch, with the records it covers beyond offsets/C (beyond the
    starting offsets when nothing is committed yet)."""
    batch = state.in_flight
    if batch is None:
        return None
    started = batch.modified
    if started is None and batch.batch_timestamp_ms is not None:
        started = batch.batch_timestamp_ms / 1000.0
    base_offsets = _kafka_offsets(state.committed) if state.committed else (source_starts or {})
    return InFlightBatch(
        batch_id=batch.batch_id,
        started_at=started,
        age_seconds=None if started is None else max(0.0, now - started),
        planned_records=records_between(base_offsets, planned),
        planned_offsets={
            sid: {t: dict(ps) for t, ps in tps.items()} for sid, tps in planned.items()
        },
    )


def catch_up_seconds(
    total_lag: int, has_sources: bool, consumption: float | None, production: float | None
) -> float | None:
    """Time to drain the backlog at the current rates; None when it does not shrink."""
    if total_lag == 0 and has_sources:
        return 0.0
    if consumption is not None and production is not None and consumption > production:
        return _finite(total_lag / (consumption - production))
    return None


class Measuring(TypedDict, total=False):
    """How :func:`measure` (and ``lag.compute_lag``) measure; every key optional."""

    now: float | None
    read_committed: bool
    record_timestamps: Mapping[tuple[str, int], int | None] | None
    source_starts: Offsets | None
    runs_every: float | None
    run_grace: float | None
    source_clusters: Mapping[str, SourceCluster] | None
    estimate_ages: bool
    subscribe_pattern: str | None
    assign: bool


def measure(state: CheckpointState, snapshot: KafkaSnapshot, **how: Unpack[Measuring]) -> LagReport:
    """The positions of the query in `state` against the log in `snapshot`, at `now` (default
    the snapshot's `fetched_at`): every partition's lag and the estimated age of its first
    waiting record, the batches read, the in-flight plan, a declared schedule's runs.

    `source_clusters`: the sources measured against their own cluster (docs/multi-cluster.md).
    `record_timestamps` (exact mode): (topic, partition) -> ms of the record at the committed
    offset; without it `lag_seconds` is interpolated from the history. `source_starts` (from
    `sources/<id>/0`): where a query whose first batch is in flight started.
    `estimate_ages=False` leaves interpolated ages unknown (`NOT_ESTIMATED`), for a preliminary
    report. `subscribe_pattern` and `assign`: docs/lag-and-health.md, "Subscriptions".
    """
    now = how.get("now")
    now = snapshot.fetched_at if now is None else now
    source_starts, source_clusters = how.get("source_starts"), how.get("source_clusters")
    series = _committed_series(state)
    planned = _kafka_offsets(state.in_flight)
    series_offsets = [_kafka_offsets(b) for b in series]
    steps = _steps(series_offsets)
    observed = [*series, state.in_flight] if state.in_flight is not None else series
    estimated = how.get("estimate_ages", True)
    interval = real_time_interval(state)  # a real-time query's batch times cannot date records
    basis = _basis(
        SourceCluster(snapshot, None, how.get("record_timestamps")),
        source_clusters or {},
        series_offsets,
        planned,
        steps,
        how.get("read_committed", False),
        now_ms=now * 1000.0,
        observed=observed,
        unestimated=REAL_TIME_AGE if interval else None if estimated else NOT_ESTIMATED,
    )
    pattern, assign = how.get("subscribe_pattern"), how.get("assign", False)
    sources = _source_lags(basis, state, planned, series_offsets, source_starts, pattern, assign)
    in_flight = _in_flight(state, planned, now, source_starts)
    report = _report(state, snapshot, basis, series, steps, sources, in_flight, now, interval, how)
    if how.get("runs_every") is None:
        return report
    schedule = schedule_of(
        report.history,
        runs_every=how.get("runs_every"),
        grace=how.get("run_grace"),
        in_flight=None if in_flight is None else (in_flight.batch_id, in_flight.started_at),
        committed_at=report.committed_at,
    )
    return dataclasses.replace(report, schedule=schedule)


def _report(
    state: CheckpointState,
    snapshot: KafkaSnapshot,
    basis: LagBasis,
    series: Sequence[BatchOffsets],
    steps: Sequence[int],
    sources: Sequence[SourceLag],
    in_flight: InFlightBatch | None,
    now: float,
    interval: float | None,
    how: Measuring,
) -> LagReport:
    """The report: the sources' lags, their totals and worst partition, rates and catch-up;
    ``interval``: a real-time query's (``checkpoint.real_time_interval``), else None."""
    # Measured lag only: a missing topic's lag is unknown (None, listed in missing_topics).
    totals = sum_lags([p for s in sources for t in s.topics for p in t.partitions], report=True)
    committed = state.committed
    committed_at = state.commit_modified  # when offsets/C was committed, else the batch's time
    if committed_at is None and committed is not None and committed.batch_timestamp_ms:
        committed_at = committed.batch_timestamp_ms / 1000.0
    at_end = interval is not None
    consumption, production = _rates(series, basis.ref_ends, snapshot.fetched_at, at_end)
    real_time = None  # the real-time trigger's checkpoint times, once one is committed
    if interval is not None and committed is not None and committed.modified is not None:
        real_time = RealTime(interval, committed.modified, tuple(b.modified for b in series))
    return LagReport(
        location=state.location,
        query_id=state.query_id,
        committed_batch_id=state.committed_batch_id,
        committed_at=committed_at,
        commit_age_seconds=None if committed_at is None else max(0.0, now - committed_at),
        in_flight=in_flight,
        sources=tuple(sources),
        # Each batch dated when its offsets were reached, with the records read since the one
        # before it (none before the first).
        history=tuple(
            HistoryBatch(batch.batch_id, batch_time_ms(batch, at_end), read)
            for batch, read in zip(series, [None, *steps], strict=False)
        ),
        consumption_rate=consumption,
        production_rate=production,
        catch_up_seconds=catch_up_seconds(
            totals["total_lag"], bool(sources), consumption, production
        ),
        time_lag_mode="estimate" if how.get("record_timestamps") is None else "exact",
        read_committed=how.get("read_committed", False),
        kafka_fetched_at=snapshot.fetched_at,
        kafka_cluster_id=snapshot.cluster_id,
        missing_topics=tuple(sorted({t.topic for s in sources for t in s.topics if t.missing})),
        generated_at=now,
        continuous=bool(state.continuous),
        **totals,
        rate_limited=basis.rate_limited,
        trigger="continuous" if state.continuous else "real-time" if interval else "micro-batch",
        real_time=real_time,
        single_cluster_assumed=not how.get("source_clusters")
        and sum(s.is_kafka for s in sources) > 1,
        subscribe_pattern=how.get("subscribe_pattern"),
        assign=how.get("assign", False),
    )
