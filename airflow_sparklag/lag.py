"""The lag report of a Spark query: its positions (``positions.measure``), what Kafka answered
beyond the snapshot (``Answers``) and the notes a reader of the numbers must know."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_sparklag.forecast import time_to_breach
from airflow_sparklag.model.report import LagReport, PartitionLag, Schedule
from airflow_sparklag.model.verdict import Thresholds
from airflow_sparklag.pace import pace_of
from airflow_sparklag.positions import (
    REAL_TIME_AGE,
    Measuring,
    Offsets,
    catch_up_seconds,
    measure,
    offset_at,
    positions_of,
    records_between,
    sum_lags,
)
from airflow_sparklag.runs import busy_interval, last_gap, run_gap, schedule_of

if TYPE_CHECKING:
    from typing import Unpack

    from airflow_sparklag.checkpoint import CheckpointState
    from airflow_sparklag.kafka import KafkaSnapshot, TopicRetention


@dataclass(frozen=True)
class Answers:
    """What Kafka answered beyond the snapshot for one job, because a rule asked (``judge``):
    ``run_start`` its offsets when a scheduled job's last run started, ``waited`` whether
    records waited before an undeclared job's last run, ``checkpoint_ends``: ``answered``."""

    retention: Mapping[str, Mapping[str, TopicRetention | None]] | None = None
    run_start: Offsets | None = None
    waited: bool = False
    checkpoint_ends: Sequence[Offsets | None] | None = None


def compute_lag(
    state: CheckpointState,
    snapshot: KafkaSnapshot,
    *,
    answers: Answers | None = None,
    thresholds: Thresholds | None = None,
    measured: LagReport | None = None,
    **how: Unpack[Measuring],
) -> LagReport:
    """The lag report of the query in `state` against `snapshot`: :func:`measure` (or
    ``measured``, made of the same arguments) with what ``answers`` adds; with ``thresholds``,
    when each is crossed at the current rates.

    >>> report = compute_lag(state, snapshot, read_committed=True)   # doctest: +SKIP
    >>> json.dumps(report.to_dict())                                  # doctest: +SKIP
    """
    answers = answers or Answers()
    report = measure(state, snapshot, **how) if measured is None else measured
    report = answered(report, answers.checkpoint_ends, answers.retention)
    schedule = report.schedule
    if answers.run_start is not None:
        schedule = completeness(report, answers.run_start)
    if answers.waited and schedule is None:
        schedule = looks_scheduled(report)
    return dataclasses.replace(
        report,
        notes=_notes(report, how.get("source_starts")),
        schedule=schedule,
        time_to_breach=time_to_breach(report, thresholds),
        pace=pace_of(state.listed_times) if report.trigger == "micro-batch" else None,
        unknown=unknowns(report, answers.retention),
    )


# Why a number of the report is unknown (``LagReport.unknown``): short, fixed words, the same
# in the CLI, JSON and XCom, the lag page and the exporter's labels.
NO_KAFKA_SOURCE = "no Kafka source"
ONE_BATCH = "one batch read: no rate yet"
NO_RATE = "no rate from the batches read"
MAY_KEEP_PACE = "production may keep pace"  # its rate is an upper bound, not below consumption
RETENTION_NOT_READ = "retention not read"
DELETED_BY_SIZE = "deleted by size (retention.bytes)"
AGE_UNKNOWN = "record age unknown"


def catch_up_unknown(report: LagReport) -> str | None:
    """Why ``catch_up_seconds`` is None, when it is."""
    if report.catch_up_seconds is not None:
        return None
    if not report.kafka_sources:
        return NO_KAFKA_SOURCE
    if report.consumption_rate is None:
        return ONE_BATCH if len(report.history) < 2 else NO_RATE
    if report.production_rate is None:
        return NO_RATE
    return MAY_KEEP_PACE


def unknowns(
    report: LagReport, retention: Mapping[str, Mapping[str, TopicRetention | None]] | None
) -> dict[str, str]:
    """``LagReport.unknown``: why the catch-up, the time lag and the time to data loss (of
    the most lagging partition without one) are unknown, each only when it is."""
    why = {"catch_up_seconds": catch_up_unknown(report)}
    undated: list[PartitionLag] = []
    lost: list[tuple[PartitionLag, str]] = []
    for source in report.kafka_sources:
        for p in (p for topic in source.topics for p in topic.partitions if p.lag > 0):
            if p.lag_seconds is None:
                undated.append(p)
            topics = {} if retention is None else retention.get(source.source_id, {})
            reason = _loss_unknown(p, topics.get(p.topic))
            if p.time_to_loss_seconds is None and reason is not None:
                lost.append((p, reason))
    if undated:
        worst = max(undated, key=lambda p: p.lag)
        why["max_lag_seconds"] = worst.lag_seconds_unknown or "unknown"
    if lost:
        why["min_time_to_loss_seconds"] = max(lost, key=lambda found: found[0].lag)[1]
    return {measure: reason for measure, reason in why.items() if reason is not None}


OFFSETS_NOT_RECORDS = (
    "lag counts offsets, not records: on transactional topics each commit or abort marker and "
    "every record of an aborted transaction takes an offset, so a consumer reads fewer records "
    "than the lag says"
)


def single_cluster_warning(report: LagReport) -> str | None:
    """The warning of several Kafka sources all measured against one cluster."""
    if not report.single_cluster_assumed:
        return None
    ids = ", ".join(s.source_id for s in report.kafka_sources)
    return (
        f"all {len(report.kafka_sources)} Kafka sources ({ids}) were measured against one "
        "cluster: the checkpoint does not record which cluster a source reads; if they read "
        "different clusters, map each to its own (--source-servers SOURCE=SERVERS, "
        "source_kafka_conn_ids; docs/multi-cluster.md)"
    )


def first_five(names: Sequence[str]) -> str:
    """``a, b, c, d, e (+3 more)``: names in a note, never a thousand of them."""
    more = f" (+{len(names) - 5} more)" if len(names) > 5 else ""
    return ", ".join(names[:5]) + more


UNREAD_TOPICS = (
    "topics the query has not read yet are not counted: if it subscribes by pattern, give the "
    "pattern (--subscribe-pattern, subscribe_pattern; docs/lag-and-health.md#subscriptions)"
)


def _one_family(topics: Sequence[str]) -> bool:
    """Do two of ``topics`` share their first or last word (split at ``.``, ``-``, ``_``:
    ``orders.eu``, ``orders.us``): what a pattern reads, where a list names unrelated topics."""
    words = [[w for w in re.split(r"[._-]", t) if w] or [t] for t in topics]
    stems = [(w[0], w[-1]) for w in words]
    return any(a[0] == b[0] or a[1] == b[1] for i, a in enumerate(stems) for b in stems[i + 1 :])


def fixed_partitions_note(report: LagReport) -> str | None:
    """Partitions a source does not read because the ones it lists skip one (not ``assign``)."""
    if report.assign:
        return None
    left = [f"{t.topic}:{p}" for s in report.kafka_sources for t in s.topics for p in t.not_read]
    if not left:
        return None
    return (
        f"partitions not read by the query, not counted: {first_five(left)}; the partitions "
        "the checkpoint lists for their source skip one, and only a query of fixed partitions "
        "(assign) does that: Kafka numbers partitions from 0 and only adds them at the end, "
        "and Spark records every partition a subscribing query reads "
        "(docs/lag-and-health.md#subscriptions)"
    )


def new_partitions_note(report: LagReport) -> str | None:
    """Partitions of read topics the checkpoint lacks, counted from their log start: wrong for
    a query of fixed partitions (`assign`) whose listed partitions have no gap."""
    added = [
        f"{t.topic}:{p.partition}"
        for s in report.kafka_sources
        for t in s.topics
        if not t.new_topic
        for p in t.partitions
        if p.new_partition
    ]
    if not added:
        return None
    return (
        f"partitions not in the checkpoint counted from their log start ({first_five(added)}), "
        "as a subscribing query reads them; a query of fixed partitions (assign) never does: "
        "give --assign (assign=True; docs/lag-and-health.md#subscriptions)"
    )


def subscription_note(report: LagReport) -> str | None:
    """What the report says about topics the query has not read yet (counted only by a given
    pattern that fits a source)."""
    read = [s for s in report.kafka_sources if s.topics]
    pattern = report.subscribe_pattern
    if not read or report.assign:
        return None
    if pattern is None:
        looks_patterned = any(
            _one_family([t.topic for t in s.topics])
            for s in read
            if not any(t.not_read for t in s.topics)  # fixed partitions: not a pattern
        )
        return UNREAD_TOPICS if looks_patterned else None
    if not any(s.pattern for s in read):
        topics = first_five(sorted({t.topic for s in read for t in s.topics}))
        return (
            f"subscribe_pattern '{pattern}' is not found in every topic of any source ({topics}): "
            "not applied, topics the query has not read yet are not counted"
        )
    new = sorted({t.topic for s in read if s.pattern for t in s.topics if t.new_topic})
    if not new:
        return None
    return (
        f"subscribePattern '{pattern}': {len(new)} topic(s) the query has not read yet wait "
        f"from their log start: {first_five(new)}"
    )


def _notes(report: LagReport, source_starts: Offsets | None) -> tuple[str, ...]:
    """What a reader of the numbers must know, in the report itself."""
    notes = [single_cluster_warning(report)]
    open_tx = [
        p
        for p in report.partitions()
        if p.last_stable_offset is not None
        and p.log_end_offset is not None
        and p.last_stable_offset < p.log_end_offset
    ]
    if report.read_committed:
        notes.append(
            f"read_committed: lag measured to the last stable offset; {OFFSETS_NOT_RECORDS}"
        )
    elif open_tx:
        notes.append(f"read_uncommitted: lag measured to the high watermark; {OFFSETS_NOT_RECORDS}")
    if open_tx:
        shown = first_five(
            [f"{p.topic}:{p.partition} {p.last_stable_offset}<{p.log_end_offset}" for p in open_tx]
        )
        notes.append(f"open transactions: last stable offset below the high watermark on {shown}")
    if report.committed_batch_id is None and report.in_flight is not None:
        starts_known = source_starts is not None and all(
            s.source_id in source_starts for s in report.kafka_sources
        )
        flight = f"no batch committed yet: batch {report.in_flight.batch_id} is in flight"
        if starts_known:
            notes.append(f"{flight}; lag counted from the offsets the query started at")
        else:
            not_read = "the query's starting offsets were not read, so its lag is not measured"
            notes.append(f"{flight} and {not_read}")
    notes += [subscription_note(report), fixed_partitions_note(report), new_partitions_note(report)]
    return tuple(note for note in notes if note is not None)


def answered(
    report: LagReport,
    ends: Sequence[Offsets | None] | None,
    retention: Mapping[str, Mapping[str, TopicRetention | None]] | None,
) -> LagReport:
    """``report`` with what Kafka answered, each partition made once, then every total again.

    ``ends`` (a real-time query's): ``ends[i]`` is Kafka's log end when ``history[i]``'s
    offsets file was written (None: not asked), the last the newest's: each lag becomes the
    lag as of the newest checkpoint. ``retention``: source id -> topic -> its retention."""
    real_time = report.real_time
    newest = ends[-1] if real_time is not None and ends else None
    if newest is None and retention is None:
        return report
    behind = 0.0 if real_time is None else real_time.checkpoint_at - report.generated_at

    def partition_answered(source_id: str, p: PartitionLag) -> PartitionLag:
        if newest is not None:
            end = newest.get(source_id, {}).get(p.topic, {}).get(p.partition)
            p = _at_checkpoint(p, end, behind, report.time_lag_mode)
        if retention is None:
            return p
        settings = retention.get(source_id, {}).get(p.topic)
        return dataclasses.replace(
            p,
            time_to_loss_seconds=time_to_loss(p, settings),
            retention_seconds=None if settings is None else settings.seconds,
        )

    sources = []
    for source in report.sources:
        topics = []
        for topic in source.topics:
            if not topic.missing:
                parts = tuple(partition_answered(source.source_id, p) for p in topic.partitions)
                topic = dataclasses.replace(topic, partitions=parts, **sum_lags(parts))
            topics.append(topic)
        lag = None if source.lag is None else sum(t.lag or 0 for t in topics)
        sources.append(dataclasses.replace(source, topics=tuple(topics), lag=lag))
    every = [p for s in sources for t in s.topics for p in t.partitions]
    totals = sum_lags(every, report=True)
    if retention is not None:
        known = (p.time_to_loss_seconds for p in every if p.time_to_loss_seconds is not None)
        totals["min_time_to_loss_seconds"] = min(known, default=None)
    if newest is not None and real_time is not None:
        # The total lag as of each older checkpoint asked: Kafka's ends then minus its offsets.
        series = positions_of(report)[0]
        lags = tuple(
            None if e is None else records_between(series[i], e) if i < len(series) else 0
            for i, e in enumerate(ends[:-1] if ends else ())
        )
        lags += (totals["total_lag"],)
        since = sum(p.since_checkpoint or 0 for p in every)  # only _at_checkpoint sets it
        totals["real_time"] = dataclasses.replace(
            real_time, checkpoint_lags=lags, produced_since=since
        )
    return dataclasses.replace(
        report,
        sources=tuple(sources),
        **totals,
        catch_up_seconds=catch_up_seconds(
            totals["total_lag"], bool(sources), report.consumption_rate, report.production_rate
        ),
    )


def _at_checkpoint(p: PartitionLag, end: int | None, behind: float, mode: str) -> PartitionLag:
    """``p`` as of a real-time query's newest checkpoint, ``behind`` s before the report."""
    if end is None or p.committed_offset is None or p.data_loss or p.log_end_offset is None:
        return p
    live = p.committed_offset + p.lag  # the reference end the live lag was measured to
    end = min(end, live)
    lag = max(0, end - p.committed_offset)
    produced = max(0, live - max(end, p.committed_offset))
    seconds: float | None = 0.0
    unknown = None
    if lag and mode == "exact" and p.lag_seconds is not None:
        seconds = max(0.0, p.lag_seconds + behind)
    elif lag:
        seconds, unknown = None, p.lag_seconds_unknown or REAL_TIME_AGE
    return dataclasses.replace(
        p, lag=lag, lag_seconds=seconds, lag_seconds_unknown=unknown, since_checkpoint=produced
    )


def time_to_loss(p: PartitionLag, retention: TopicRetention | None) -> float | None:
    """Seconds until retention deletes ``p``'s oldest unread record: ``retention.ms`` minus its
    age, at least 0. A lower bound: Kafka deletes a segment once its NEWEST record is older than
    retention.ms. math.inf when records are not deleted; None: no lag, or unknown."""
    if p.data_loss:
        return 0.0
    if p.lag <= 0 or _loss_unknown(p, retention) is not None:
        return None
    assert retention is not None  # _loss_unknown: read
    limit = retention.seconds
    if limit is None or not retention.deletes:
        return math.inf
    return max(0.0, limit - (p.lag_seconds or 0.0))


def _loss_unknown(p: PartitionLag, retention: TopicRetention | None) -> str | None:
    """Why a lagging partition's time to data loss is unknown (deletion by size depends on
    the production volume, which the checkpoint does not record); None when it is known."""
    if retention is None:
        return RETENTION_NOT_READ
    if not retention.deletes:
        return None  # never deleted
    if retention.retention_bytes is not None:
        return DELETED_BY_SIZE
    if retention.seconds is not None and p.lag_seconds is None:
        return AGE_UNKNOWN
    return None


def run_start(report: LagReport) -> float | None:
    """When a declared scheduled job's last run started, if its completeness can be measured."""
    schedule = report.schedule
    run = schedule.last_run if schedule is not None else None
    if schedule is None or run is None or not run.start_known or run.started_at is None:
        return None
    if report.committed_batch_id is None or run.first_batch_id > report.committed_batch_id:
        return None  # nothing of this run committed yet: "not yet", nothing to compare
    return run.started_at


def completeness(report: LagReport, targets: Offsets) -> Schedule | None:
    """The schedule with its last run's completeness: its committed offsets against Kafka's
    offsets as of its start (``targets``)."""
    schedule = report.schedule
    if schedule is None or schedule.last_run is None or run_start(report) is None:
        return schedule
    left = 0
    for source in report.kafka_sources:
        for p in (p for topic in source.topics for p in topic.partitions):
            target = offset_at(targets, source.source_id, p.topic, p.partition)
            position = p.committed_offset if p.committed_offset is not None else p.log_start_offset
            if target is not None and position is not None:
                left += max(0, target - position)
    done = dataclasses.replace(schedule.last_run, complete=left == 0, records_left=left)
    return dataclasses.replace(schedule, last_run=done)


# Records that waited this long (or 3 busy intervals) before the first batch of a run read them
# show a scheduled job, not a streaming one that reacts to arrivals.
WAITED_MIN_SECONDS = 10.0


def waiting_probe(report: LagReport) -> tuple[int, int] | None:
    """(when, before): the moment (epoch ms) to ask Kafka's offsets at to learn whether records
    waited before the first batch after the newest long pause, and the index in ``history`` of
    the batch before the pause; None without such a pause."""
    history = report.history
    gap = run_gap(history, None)
    edges = last_gap(history, gap) if gap is not None else None
    busy = busy_interval(history)
    if edges is None or busy is None:
        return None
    before, after = edges
    after_ms = history[after].timestamp_ms
    if after_ms is None:
        return None
    return int(after_ms - max(WAITED_MIN_SECONDS, 3 * busy) * 1000), before


def records_waited(report: LagReport, waiting: Offsets, before: int) -> bool:
    """Did Kafka hold records before the run beyond what the batch before the pause read? A
    streaming query reacts within its trigger; a scheduled one leaves them for the next run."""
    for source in report.kafka_sources:
        for p in (p for topic in source.topics for p in topic.partitions):
            end = p.offset_history[before] if len(p.offset_history) > before else None
            if (
                end is not None
                and offset_at(waiting, source.source_id, p.topic, p.partition, end) > end
            ):
                return True
    return False


def looks_scheduled(report: LagReport) -> Schedule:
    """The runs of an undeclared job whose records waited between its runs."""
    flight = report.in_flight
    return schedule_of(
        report.history,
        runs_every=None,
        in_flight=None if flight is None else (flight.batch_id, flight.started_at),
        committed_at=report.committed_at,
        looks_scheduled=True,
    )
