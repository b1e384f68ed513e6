"""Plain-text rendering of a check result: the CLI's table and the operators' failure summary."""

from __future__ import annotations

import datetime
import math
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow_sparklag.forecast import breach_text
from airflow_sparklag.pace import pace_text

if TYPE_CHECKING:
    from airflow_sparklag.history import HistoryPoint, LagHistory
    from airflow_sparklag.model.report import LagReport, PartitionLag
    from airflow_sparklag.model.result import CheckResult
    from airflow_sparklag.model.verdict import HealthVerdict


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


def _secs(value: float | None) -> str:
    if value is None:
        return "unknown"
    if value < 120:
        return f"{value:.1f}s"
    if value < 7200:
        return f"{value / 60:.1f}m"
    return f"{value / 3600:.1f}h"


def seconds_text(value: float | None) -> str:
    """A duration for people: ``42.0s``, ``3.5m``, ``2.1h``; ``-`` when unknown."""
    return "-" if value is None else _secs(value)


def _time_lag(value: float | None, mode: str) -> str:
    # An estimate interpolates the checkpoint's own (offset, batch time) points and the live log
    # end: it assumes steady production between them, so bursts and rate-limited jobs make it
    # approximate either way. Exact mode reads the record's own timestamp.
    if value is None or mode != "estimate" or value == 0:
        return _secs(value)
    return f"~{_secs(value)}"


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as lines of left-aligned columns, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def flags(p: PartitionLag) -> str:
    shown = (
        (p.start_offset is not None, f"not_committed(started at {p.start_offset})"),
        (p.new_partition, "new_partition"),
        (p.removed_partition, "removed_partition"),
        (p.data_loss, f"data_loss({p.records_lost} lost)"),
        (p.ahead_of_log, "ahead_of_log"),
        (bool(p.since_checkpoint), f"+{p.since_checkpoint}_since_checkpoint"),
    )
    return ",".join(name for flagged, name in shown if flagged)


def partition_table(report: LagReport) -> str:
    """One row per Kafka partition of every Kafka source (``lso``: the last stable offset)."""
    header = "source topic part committed planned log_end lso log_start lag lag_time flags"
    rows: list[tuple[str, ...]] = [tuple(header.split())]
    for source in report.sources:
        if not source.is_kafka:
            continue
        for topic in source.topics:
            for partition, offset in sorted(topic.checkpoint_offsets.items()):
                # A topic its cluster lacks: where the query stands, lag unknown.
                row = (source.source_id, topic.topic, str(partition), str(offset))
                rows.append((*row, "-", "-", "-", "-", "?", "unknown", "topic_missing"))
            for p in topic.partitions:
                row = (source.source_id, p.topic, str(p.partition), _num(p.committed_offset))
                ends = (
                    p.planned_offset,
                    p.log_end_offset,
                    p.last_stable_offset,
                    p.log_start_offset,
                )
                time_lag = _time_lag(p.lag_seconds, report.time_lag_mode)
                rows.append((*row, *map(_num, ends), str(p.lag), time_lag, flags(p)))
    return "\n".join(table(rows))


def summary_lines(report: LagReport) -> list[str]:
    lines = [
        f"checkpoint  {report.location}",
        *([f"query id    {report.query_id}"] if report.query_id else []),
        f"committed   batch {_num(report.committed_batch_id)}, "
        f"{_secs(report.commit_age_seconds)} ago"
        if report.committed_batch_id is not None
        else "committed   nothing yet",
    ]
    real_time = report.real_time
    if real_time is not None:
        lines.append(
            f"trigger     real-time, a checkpoint every {_secs(real_time.interval_seconds)}: lag "
            f"as of the newest ({_when(real_time.checkpoint_at)}); "
            f"{_num(real_time.produced_since)} record(s) produced since, read as they arrive "
            "(an upper bound of those waiting, not lag)"
        )
    if report.in_flight is not None:
        lines.append(
            f"in flight   batch {report.in_flight.batch_id}, {report.in_flight.planned_records} "
            f"records planned, running for {_secs(report.in_flight.age_seconds)}"
        )
    for source in report.sources:
        if not source.is_kafka:
            lines.append(f"source {source.source_id}   not Kafka ({source.kind}): no lag measured")
        elif source.lag_unknown:
            lines.append(f"source {source.source_id}   lag unknown: {source.lag_unknown}")
        elif source.cluster is not None:
            lines.append(f"source {source.source_id}   measured against cluster {source.cluster}")
    lines.append(
        f"lag         {report.total_lag} records (max {report.max_lag} on "
        f"{report.max_lag_topic or '-'}/{_num(report.max_lag_partition)}), time lag "
        f"{_time_lag(report.max_lag_seconds, report.time_lag_mode)} ({report.time_lag_mode})"
    )
    unknown = _time_lag_unknown(report)
    if unknown:
        lines.append(f"time lag    unknown: {unknown}")
    lines += _loss_lines(report)
    lines += [f"note        {note}" for note in report.notes]
    lines += _schedule_lines(report)
    lines += _rate_lines(report)
    if report.pace is not None:
        lines.append(f"batches     {pace_text(report.pace)}")
    lines += [f"forecast    {breach_text(b)}" for b in report.time_to_breach]
    if report.missing_topics:
        lines.append(f"missing     topics not in Kafka: {', '.join(report.missing_topics)}")
    return lines


def _time_lag_unknown(report: LagReport) -> str:
    """Why the most lagging undated partition has no time lag, and what else tells it."""
    why = report.unknown.get("max_lag_seconds")
    undated = [p for p in report.partitions() if p.lag > 0 and p.lag_seconds is None]
    if why is None or not undated:
        return ""
    worst = max(undated, key=lambda p: p.lag)
    named = f"{why} ({worst.topic}:{worst.partition})"
    if report.time_lag_mode != "estimate":
        return named
    return f"{named}; --exact-time-lag reads the records' timestamps"


def _loss_lines(report: LagReport) -> list[str]:
    """When retention deletes the oldest unread records, or why that is unknown."""
    loss = report.min_time_to_loss_seconds
    why = report.unknown.get("min_time_to_loss_seconds")
    lines = []
    if loss is not None:
        when = "never (retention keeps them)" if math.isinf(loss) else f"in {_secs(loss)} or later"
        lines.append(f"data loss   the oldest unread records are deleted {when}")
    if why is not None:
        what = "of other partitions " if loss is not None else ""
        lines.append(f"data loss   {what}unknown: {why}")
    return lines


def _rate_lines(report: LagReport) -> list[str]:
    """The consumption rate over the batches read and the catch-up time, or why unknown."""
    why = report.unknown.get("catch_up_seconds")
    catch_up = f"unknown: {why}" if why is not None else _secs(report.catch_up_seconds)
    consumed = report.consumption_rate
    if consumed is None:
        return [f"catch-up    {catch_up}"] if why is not None and report.total_lag else []
    span = ""
    if len(report.history) > 1:
        span = f" over batches {report.history[0].batch_id}-{report.history[-1].batch_id}"
    produced = report.production_rate
    if why is not None and produced is not None and produced >= consumed:
        catch_up += f" (up to {produced:.1f} records/s produced: an upper bound)"
    return [f"rate        {consumed:.1f} records/s consumed{span}, catch-up {catch_up}"]


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "unknown"
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _schedule_lines(report: LagReport) -> list[str]:
    schedule = report.schedule
    if schedule is None:
        return []
    if schedule.runs_every is not None:
        shape = f"every {_secs(schedule.runs_every)} (+{_secs(schedule.grace)} grace)"
    else:
        shape = "looks scheduled (runs with records waiting between them): declare --runs-every"
    lines = [f"schedule    {shape}, {schedule.runs_seen} run(s) in the history read"]
    run = schedule.last_run
    if run is None:
        return lines
    if run.in_progress:
        state = "in progress"
    elif run.complete is None:
        state = "completeness unknown" if run.start_known else "started before the history read"
    elif run.complete:
        state = "complete"
    else:
        state = f"INCOMPLETE: {run.records_left} record(s) produced before it were left behind"
    lines.append(
        f"last run    batches {run.first_batch_id}..{run.last_batch_id} ({run.batches}), "
        f"started {_when(run.started_at)}, ended {_when(run.ended_at)}: {state}"
    )
    return lines


def render(report: LagReport, verdict: HealthVerdict) -> str:
    """The full human-readable report: summary, partition table, verdict."""
    health = f"health      {verdict.health.value}: {verdict.reason}"
    return "\n".join([*summary_lines(report), "", partition_table(report), "", health])


def breach_message(result: CheckResult) -> str:
    """A short failure message: the verdict and the five worst partitions (operator failures)."""
    report, verdict = result.report, result.verdict
    if report is None:  # unreadable checkpoint in a multi-checkpoint check
        return f"{result.location}: {result.error}"
    worst = sorted(
        (p for s in report.sources if s.is_kafka for t in s.topics for p in t.partitions),
        key=lambda p: (not p.data_loss, -p.lag),
    )[:5]
    parts = [
        f"{p.topic}[{p.partition}] lag={p.lag} committed={_num(p.committed_offset)} "
        f"end={_num(p.log_end_offset)}" + (f" {flags(p)}" if flags(p) else "")
        for p in worst
    ]
    return (
        f"{report.location}: {verdict.health.value}: {verdict.reason}. Total lag "
        f"{report.total_lag}. " + "; ".join(parts)
    )


def _utc(time_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(time_ms / 1000.0, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _history_seconds(point: HistoryPoint) -> str:
    known = [p for p in point.partitions if p.lag_seconds is not None]
    if not known:
        floors = [p.lag_seconds_min for p in point.partitions if p.lag_seconds_min is not None]
        return f">= {_secs(max(floors))}" if floors else "unknown"
    worst = max(known, key=lambda p: p.lag_seconds or 0.0)
    if worst.lag_seconds == 0:
        return "0.0s"
    bracket = f"{seconds_text(worst.lag_seconds_min)}..{seconds_text(worst.lag_seconds_max)}"
    return f"~{_secs(worst.lag_seconds or 0.0)} ({bracket})"


def history_table(history: LagHistory, *, max_partitions: int = 4) -> str:
    """``sparklag history``: one row per point (batch or now), then why some numbers are
    unknown and what the reconstruction assumes."""
    if history.verdict is not None:  # nothing to rebuild: status's verdict, as status says it
        health, reason = history.verdict.health.value, history.verdict.reason
        return f"checkpoint  {history.location}\nhealth      {health}: {reason}"
    batch_ids = [p.batch_id for p in history.points if p.batch_id is not None]
    span = f"batches {batch_ids[0]} .. {batch_ids[-1]}" if batch_ids else "no batch"
    lines = [
        f"checkpoint  {history.location}",
        f"points      {len(history.points)} ({span}); {history.kafka_calls} Kafka "
        "ListOffsets-by-time calls",
    ]
    if history.unknown:
        lines.append(f"unknown     {history.unknown}")
    rows = [("time (UTC)", "batch", "kind", "lag", "lag time (bracket)", "partitions (lag)")]
    for point in history.points:
        ranked = sorted(point.partitions, key=lambda p: -1 if p.lag is None else -p.lag)
        cells = [f"{p.topic}-{p.partition}={_num(p.lag)}" for p in ranked[:max_partitions]]
        if len(ranked) > max_partitions:
            cells.append(f"+{len(ranked) - max_partitions} more")
        lag = "?" if point.total_lag is None else str(point.total_lag)
        row = (_utc(point.time_ms), _num(point.batch_id), point.kind, lag)
        rows.append((*row, _history_seconds(point), " ".join(cells)))
    lines += ["", *table(rows)]
    reasons = Counter(
        part.unknown for pt in history.points for part in pt.partitions if part.unknown
    )
    if reasons:
        lines += ["", "unknown because:"]
        lines += [f"  - {reason} ({count}x)" for reason, count in reasons.items()]
    lines += ["", "approximate:"] + [f"  - {text}" for text in history.approximations]
    return "\n".join(lines)
