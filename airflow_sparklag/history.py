"""Lag history of a Spark query, rebuilt from its checkpoint and Kafka alone: no daemon, no
warm-up. docs/history.md explains the method, its limits and its cost; nothing heavy is
imported at module level.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_sparklag.checkpoint import real_time_interval
from airflow_sparklag.checkpoint_files import parse_source_start
from airflow_sparklag.errors import StorageNotFound
from airflow_sparklag.location import Location, join
from airflow_sparklag.model.report import ToDict
from airflow_sparklag.model.result import document
from airflow_sparklag.model.verdict import NO_KAFKA_SOURCE, HealthVerdict
from airflow_sparklag.timelag import RecordAge, Stairs, record_age, staircase

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint_files import BatchOffsets, CheckpointState
    from airflow_sparklag.kafka import KafkaSnapshot
    from airflow_sparklag.kafka_model import KafkaOffsets
    from airflow_sparklag.session import Session


DEFAULT_BATCHES = 100  # Spark's default minBatchesToRetain: every batch a default query keeps
MAX_PARALLEL_CALLS = 8  # ListOffsets-by-time calls in flight at once

# source id -> topic -> partition -> offset
Positions = Mapping[str, Mapping[str, Mapping[int, int]]]
# topic -> partition -> offset
TopicOffsets = Mapping[str, Mapping[int, int]]
# What one cluster answered: its log ends at each batch time (time_ms -> topic -> partition ->
# offset) and the live snapshot (None: no ``now`` point)
Answers = tuple[Mapping[int, TopicOffsets], "KafkaSnapshot | None"]

APPROXIMATIONS = (
    "log end at a batch's time = Kafka's first offset whose record timestamp is >= "
    "batchTimestampMs: exact for topics with message.timestamp.type=LogAppendTime; with "
    "CreateTime it trusts the producers' clocks and append order (records sent with explicit "
    "or late timestamps shift it, and a record stamped just before T may reach the log just "
    "after)",
    "processed at a batch's time = the previous batch's end offsets (in micro-batch mode batch "
    "N-1 commits before batch N is planned; with async progress tracking ids have gaps and "
    "such points are unknown)",
    "the time of a batch is batchTimestampMs, taken when Spark starts planning it: before it "
    "asks Kafka for the latest offsets and before the batch commits",
    "lag_seconds is the age of the first unread record, known only between two of Kafka's "
    "answers (lag_seconds_min .. lag_seconds_max) and interpolated linearly in between, as "
    "status does; unknown when the two are further apart than 2 s and 10 % of its age",
    "lag is measured against the high watermark: on transactional topics read with "
    "read_committed, markers and open transactions count as lag",
)
REAL_TIME_APPROXIMATIONS = (
    "real-time trigger: a point is a checkpoint, at the time offsets/N was written (the "
    "storage's modification time, 1 s resolution on S3) at the end of its interval, with the "
    "offsets reached then as processed; batchTimestampMs (the interval's start) is not used",
    "log end at a checkpoint's time = Kafka's first offset whose record timestamp is >= that "
    "time: exact for topics with message.timestamp.type=LogAppendTime; with CreateTime it "
    "trusts the producers' clocks and append order",
    APPROXIMATIONS[3],
    APPROXIMATIONS[4],
    "the now point has no lag: the running interval reads records as they arrive and no file "
    "says how far it got; committed offsets to the live log end are an upper bound",
)
REAL_TIME_NOW = (
    "real-time trigger: the running interval reads records as they arrive and no file says "
    "how far it got; the newest checkpoint to the live log end is an upper bound, not lag"
)


@dataclass(frozen=True)
class PartitionPoint(ToDict):
    """One partition of one Kafka source at one point of the history.

    ``unknown`` says why ``lag`` or ``lag_seconds`` is None (or why ``lag_seconds_max`` is).

    >>> PartitionPoint("0", "orders", 1, 150, 90, 120, 60, 4.2, 3.0, 5.0).lag
    60
    """

    source_id: str
    topic: str
    partition: int
    log_end_offset: int | None  # log end at the point's time, from Kafka
    processed_offset: int | None  # next offset to read at that time (previous batch's end)
    planned_offset: int | None  # where this batch reads up to (offsets/N); None for "now"
    lag: int | None  # records: log end - processed
    lag_seconds: float | None  # age of the first unread record, interpolated in its bracket
    lag_seconds_min: float | None
    lag_seconds_max: float | None
    unknown: str | None = None


@dataclass(frozen=True)
class HistoryPoint(ToDict):
    """The lag of every partition at one time: a retained batch's planning time or now.

    ``kind`` is ``committed`` (offsets/N with commits/N), ``in_flight`` (offsets/N not
    committed yet) or ``now`` (committed offsets against the live log end; ``batch_id`` None).
    ``total_lag`` is None when any partition's lag is unknown.

    >>> HistoryPoint(1_700_000_000_000, "committed", 7, (), 0, 0.0).kind
    'committed'
    """

    time_ms: int
    kind: str
    batch_id: int | None
    partitions: tuple[PartitionPoint, ...]
    total_lag: int | None
    max_lag_seconds: float | None  # largest known lag_seconds


@dataclass(frozen=True)
class LagHistory(ToDict):
    """Lag over the retained batches of one checkpoint, oldest first, ending with ``now``.

    ``approximations`` says in plain words what the numbers assume; ``unknown`` why there are
    no batch points (continuous trigger, nothing committed yet). ``verdict`` is status's when
    there is nothing to measure (UNKNOWN, no Kafka source: no points), else None.

    >>> past = history(session, "/data/ck/orders")                      # doctest: +SKIP
    >>> past.series("orders", 0)                                         # doctest: +SKIP
    [(1700000000000, 120), (1700000005000, 80), ...]
    """

    location: str
    generated_at: float
    points: tuple[HistoryPoint, ...]
    kafka_calls: int  # ListOffsets-by-time calls made (one per distinct batch time)
    approximations: tuple[str, ...] = APPROXIMATIONS
    unknown: str | None = None
    verdict: HealthVerdict | None = None

    def document(self) -> dict[str, Any]:
        """The JSON document of ``sparklag history --json`` and the exporter's ``/history``."""
        summary = {"jobs": 1, "failed_checks": 0, "points": len(self.points)}
        return document("history", [self.to_dict()], summary)

    def series(
        self, topic: str, partition: int, source_id: str | None = None
    ) -> list[tuple[int, int | None]]:
        """``(time_ms, lag)`` of one partition over the points (first source if not given)."""
        out: list[tuple[int, int | None]] = []
        for point in self.points:
            for part in point.partitions:
                same = part.topic == topic and part.partition == partition
                if same and source_id in (None, part.source_id):
                    out.append((point.time_ms, part.lag))
                    break
        return out


# -- what to ask for -------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryPlan:
    """Which batches become points, which Kafka times and topics they need (pure)."""

    shown: tuple[tuple[str, BatchOffsets], ...]  # (kind, batch), oldest first, timed only
    by_id: Mapping[int, BatchOffsets]  # every batch read, for finding predecessors
    topics: frozenset[str]
    times: tuple[int, ...]  # distinct batch times (ms) to ask Kafka about
    start_sources: tuple[str, ...]  # Kafka source ids whose sources/<id>/0 batch 0 needs
    unknown: str | None
    real_time: bool = False  # points at offsets/N's write, processed = offsets/N
    verdict: HealthVerdict | None = None  # NO_KAFKA_SOURCE: no batch read has one


def _point_time_ms(batch: BatchOffsets, real_time: bool) -> int | None:
    """When the point of ``batch`` is: its batch time; a real-time checkpoint's offsets file's
    write (its interval's end, when its offsets were reached)."""
    if not real_time:
        return batch.batch_timestamp_ms
    return None if batch.modified is None else round(batch.modified * 1000)


def plan_history(state: CheckpointState, batches: int) -> HistoryPlan:
    """The last ``batches`` committed batches (plus the in-flight one) that carry a time."""
    real_time = real_time_interval(state) is not None
    committed = list(state.history)  # oldest first, ending with C (CheckpointState.history)
    chosen = [("committed", b) for b in committed[-batches:]] if batches > 0 else []
    if state.in_flight is not None:
        chosen.append(("in_flight", state.in_flight))
    shown = tuple((kind, b) for kind, b in chosen if _point_time_ms(b, real_time) is not None)
    by_id = {b.batch_id: b for b in [*committed, *(b for _, b in chosen)]}
    topics = frozenset(
        topic for b in by_id.values() for positions in _kafka(b).values() for topic in positions
    )
    unknown = None
    verdict = NO_KAFKA_SOURCE if chosen and not topics else None
    if verdict is not None:  # no point to show: a lag of 0 at each batch would be a guess
        shown, unknown = (), verdict.reason
    elif not shown:
        if state.continuous or chosen:
            unknown = "the batches carry no time (continuous trigger): nothing to date"
        else:
            unknown = "no batch is retained yet: the query has not planned one"
    # A real-time batch processed its own offsets: batch 0 needs no start offsets.
    first = next((b for _, b in shown if b.batch_id == 0 and not real_time), None)
    # The batch before the first shown one is asked about too: its answer brackets the
    # records the first point has not read yet.
    base = by_id.get(shown[0][1].batch_id - 1) if shown else None
    asked = [b for _, b in shown] + ([base] if base is not None else [])
    return HistoryPlan(
        shown=shown,
        by_id=by_id,
        topics=topics,
        times=tuple(sorted({t for b in asked if (t := _point_time_ms(b, real_time))})),
        start_sources=tuple(_kafka(first)) if first is not None else (),
        unknown=unknown,
        real_time=real_time,
        verdict=verdict,
    )


def _kafka(batch: BatchOffsets | None) -> dict[str, TopicOffsets]:
    """source id -> topic -> partition -> offset, Kafka sources only."""
    if batch is None:
        return {}
    return {s.source_id: s.kafka for s in batch.sources if s.kind == "kafka" and s.kafka}


def _log_ends(snapshot: KafkaSnapshot) -> dict[str, dict[int, int]]:
    return {t: {p: po.log_end for p, po in ps.items()} for t, ps in snapshot.partitions.items()}


def log_end_tables(
    log_ends_at: Mapping[int, TopicOffsets], snapshot: KafkaSnapshot | None
) -> dict[tuple[str, int], Stairs]:
    """(topic, partition) -> staircase of (log end, time) from every answer and the snapshot."""
    points: dict[tuple[str, int], list[tuple[int, float]]] = {}
    answers: list[tuple[float, TopicOffsets]] = [(float(t), e) for t, e in log_ends_at.items()]
    if snapshot is not None:
        answers.append((snapshot.fetched_at * 1000.0, _log_ends(snapshot)))
    for time_ms, ends in answers:
        for topic, parts in ends.items():
            for partition, offset in parts.items():
                points.setdefault((topic, int(partition)), []).append((int(offset), time_ms))
    return {key: staircase(found) for key, found in points.items()}


# -- the reconstruction (pure) -------------------------------------------------------------------


@dataclass(frozen=True)
class _At:
    """What one point is measured with."""

    kind: str
    batch_id: int | None
    time_ms: float  # the now point's: the snapshot's instant, to the bit, as status dates it
    planned: Positions  # the batch's own end offsets (what it reads up to)
    processed: Positions | None  # None: the position at that time is unknown
    why_unprocessed: str
    log_ends: Mapping[str, TopicOffsets]  # "" (the main cluster) or a mapped source's id ->
    unmeasured: str | None = None  # why no lag is measured at this point (real-time's now)


# "" (the main cluster) or a mapped source's id -> (topic, partition) -> its staircase
Tables = Mapping[str, Mapping[tuple[str, int], Stairs]]


def _unmeasured(at: _At, topic: str, p: int, offset: int | None, log_end: int | None) -> str | None:
    """Why the lag of one partition at ``at`` is not measured; None when it is."""
    if at.unmeasured is not None:
        return at.unmeasured
    if at.processed is None:
        return at.why_unprocessed
    if offset is None:
        return (
            f"partition new in batch {at.batch_id}: Spark read it from the log start, which the "
            "checkpoint does not record"
        )
    if log_end is None:
        return f"Kafka has no partition {topic}-{p} now (topic deleted, or recreated smaller)"
    if log_end < offset:
        return (
            f"Kafka's offset for this time ({log_end}) is below the offset already processed "
            f"({offset}): record timestamps are out of append order (set by producers) or the "
            "topic was recreated"
        )
    return None


def _partition_point(at: _At, tables: Tables, source_id: str, topic: str, p: int) -> PartitionPoint:
    cluster = source_id if source_id in tables else ""
    planned = at.planned.get(source_id, {}).get(topic, {}).get(p)
    log_end = at.log_ends.get(cluster, {}).get(topic, {}).get(p)
    processed = None if at.processed is None else at.processed.get(source_id, {}).get(topic, {})
    offset = None if processed is None else processed.get(p)
    why = _unmeasured(at, topic, p, offset, log_end)
    if why is not None or offset is None or log_end is None:
        return PartitionPoint(
            source_id, topic, p, log_end, offset, planned, None, None, None, None, why
        )
    lag = log_end - offset
    if lag == 0:
        age = RecordAge(0.0, 0.0, 0.0)
    else:
        age = record_age(tables[cluster].get((topic, p), ([], [], [])), offset, at.time_ms)
    return PartitionPoint(
        source_id, topic, p, log_end, offset, planned, lag, *age[:3], unknown=age.unknown
    )


def _history_point(at: _At, tables: Tables) -> HistoryPoint:
    keys = sorted(
        {
            (sid, topic, p)
            for positions in (at.planned, at.processed or {})
            for sid, topics in positions.items()
            for topic, parts in topics.items()
            for p in parts
        }
    )
    parts = tuple(_partition_point(at, tables, sid, topic, p) for sid, topic, p in keys)
    lags = [part.lag for part in parts]
    known = [part.lag_seconds for part in parts if part.lag_seconds is not None]
    return HistoryPoint(
        time_ms=int(at.time_ms),
        kind=at.kind,
        batch_id=at.batch_id,
        partitions=parts,
        total_lag=None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags),
        max_lag_seconds=max(known) if known else None,
    )


def _batch_points(
    plan: HistoryPlan, answers: Mapping[str, Answers], start_offsets: Positions | None
) -> Iterator[_At]:
    for kind, batch in plan.shown:
        previous = plan.by_id.get(batch.batch_id - 1)
        processed: Positions | None = _kafka(previous) if previous is not None else None
        why = (
            f"batch {batch.batch_id - 1} is not in the checkpoint any more (purged past "
            "minBatchesToRetain) or was never written (async progress tracking): what had been "
            "processed at this time is unknown"
        )
        if plan.real_time:
            processed = _kafka(batch)  # reached when its offsets file was written
        elif batch.batch_id == 0:
            processed = start_offsets
            why = "the source's start offsets (sources/<id>/0) could not be read"
        time_ms = _point_time_ms(batch, plan.real_time) or 0
        ends = {key: answer[0].get(time_ms) or {} for key, answer in answers.items()}
        yield _At(kind, batch.batch_id, time_ms, _kafka(batch), processed, why, ends)


def reconstruct(
    state: CheckpointState,
    log_ends_at: Mapping[int, TopicOffsets],
    snapshot: KafkaSnapshot | None,
    *,
    batches: int = DEFAULT_BATCHES,
    start_offsets: Positions | None = None,
    kafka_calls: int = 0,
    now: float | None = None,
    source_answers: Mapping[str, Answers] | None = None,
) -> LagHistory:
    """The history from what was read: the checkpoint's state, Kafka's log end at each batch
    time (``time_ms -> topic -> partition -> offset``), the live snapshot (None: no ``now``
    point) and batch 0's start offsets (``sources/<id>/0``). No I/O.

    ``source_answers``: the same two answers from another cluster, for each source measured
    against one (source id -> (log ends at each time, live snapshot); docs/multi-cluster.md)."""
    plan = plan_history(state, batches)
    answers = {"": (log_ends_at, snapshot), **(source_answers or {})}
    tables = {key: log_end_tables(ends, live) for key, (ends, live) in answers.items()}
    ats = list(_batch_points(plan, answers, start_offsets))
    lives = {key: live for key, (_, live) in answers.items() if live is not None}
    if lives and state.committed is not None:
        ats.append(
            _At(
                "now",
                None,
                (snapshot or next(iter(lives.values()))).fetched_at * 1000.0,
                _kafka(state.in_flight),
                _kafka(state.committed),
                "",
                {key: _log_ends(live) for key, live in lives.items()},
                REAL_TIME_NOW if plan.real_time else None,
            )
        )
    approximations = REAL_TIME_APPROXIMATIONS if plan.real_time else APPROXIMATIONS
    return LagHistory(
        location=state.location,
        generated_at=time.time() if now is None else now,
        points=tuple(_history_point(at, tables) for at in ats),
        kafka_calls=kafka_calls,
        approximations=() if plan.verdict else approximations,  # no point: nothing approximated
        unknown=plan.unknown,
        verdict=plan.verdict,
    )


# -- reading it ----------------------------------------------------------------------------------


def log_ends_at(
    client: KafkaOffsets, topics: Sequence[str], times_ms: Sequence[int]
) -> dict[int, dict[str, dict[int, int]]]:
    """Kafka's log end at each time (first offset stamped >= it; the log end if none is):
    one ListOffsets-by-time call per time, every partition of ``topics`` in each."""
    if not topics or not times_ms:
        return {}
    wanted = sorted(set(topics))

    def ask(time_ms: int) -> tuple[int, dict[str, dict[int, int]]]:
        return time_ms, client.offsets_for_time(wanted, time_ms)

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_CALLS, len(times_ms))) as pool:
        return dict(pool.map(ask, sorted(set(times_ms))))


def start_offsets(session: Session, location: str, source_ids: Sequence[str]) -> Positions | None:
    """Batch 0's starting point: each Kafka source's ``sources/<id>/0`` (None if any is gone)."""
    storage = session.storage(location)
    found: dict[str, TopicOffsets] = {}
    for source_id in source_ids:
        path = join(location.rstrip("/"), "sources", source_id, "0")
        try:
            source = parse_source_start(storage.read(path), path, source_id)
        except StorageNotFound:
            return None
        if source.kafka is None:
            return None
        found[source_id] = source.kafka
    return found


def history(
    session: Session,
    location: Location | str,
    *,
    batches: int = DEFAULT_BATCHES,
    include_now: bool = True,
) -> LagHistory:
    """Per-partition lag at each of the last ``batches`` retained batches of ``location``.

    Reads ``batches + 1`` committed batches (the oldest one only as the starting point of the
    next), asks Kafka once per distinct batch time, and (``include_now``) takes one snapshot
    for the ``now`` point. Raises the typed errors of reading and of Kafka.
    """
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
        raise ValueError(f"batches must be a whole number >= 1, got {batches!r}")
    state = session.read(Location.of(location), history=batches + 1)
    plan = plan_history(state, batches)
    # Each source is measured against its own cluster (Session.cluster_of; 0 is the main one).
    of_source = {sid: session.cluster_of(sid) for b in plan.by_id.values() for sid in _kafka(b)}
    topics: dict[int, set[str]] = {}
    for b in plan.by_id.values():
        for sid, positions in _kafka(b).items():
            topics.setdefault(of_source[sid], set()).update(positions)
    answers: dict[int, Answers] = {}
    for cluster, names in sorted(topics.items()):
        client = session.cluster_kafka(cluster)
        ends = log_ends_at(client, sorted(names), plan.times)
        answers[cluster] = (ends, client.snapshot(sorted(names)) if include_now else None)
    starts = (
        start_offsets(session, state.location, plan.start_sources) if plan.start_sources else None
    )
    main_ends, main_snapshot = answers.get(0, ({}, None))
    return reconstruct(
        state,
        main_ends,
        main_snapshot,
        batches=batches,
        start_offsets=starts,
        kafka_calls=sum(len(ends) for ends, _ in answers.values()),
        source_answers={sid: answers[c] for sid, c in of_source.items() if c != 0},
    )
