"""Plain-text rendering of a check result: the CLI's table and the operators' failure summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_sparklag.health import HealthVerdict
    from airflow_sparklag.lag import LagReport, PartitionLag


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


def flags(partition: PartitionLag) -> str:
    names = []
    if partition.new_partition:
        names.append("new_partition")
    if partition.removed_partition:
        names.append("removed_partition")
    if partition.data_loss:
        names.append(f"data_loss({partition.records_lost} lost)")
    if partition.ahead_of_log:
        names.append("ahead_of_log")
    return ",".join(names)


def partition_table(report: LagReport) -> str:
    """One row per Kafka partition of every Kafka source."""
    header = (
        "source",
        "topic",
        "part",
        "committed",
        "planned",
        "log_end",
        "log_start",
        "lag",
        "lag_time",
        "flags",
    )
    rows: list[tuple[str, ...]] = [header]
    for source in report.sources:
        if not source.is_kafka:
            continue
        for topic in source.topics:
            for p in topic.partitions:
                rows.append(
                    (
                        source.source_id,
                        p.topic,
                        str(p.partition),
                        _num(p.committed_offset),
                        _num(p.planned_offset),
                        _num(p.last_stable_offset if report.read_committed else p.log_end_offset),
                        _num(p.log_start_offset),
                        str(p.lag),
                        _time_lag(p.lag_seconds, report.time_lag_mode),
                        flags(p),
                    )
                )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def summary_lines(report: LagReport) -> list[str]:
    lines = [
        f"checkpoint  {report.location}",
        f"query id    {report.query_id or 'unknown'}",
        f"committed   batch {_num(report.committed_batch_id)}, "
        f"{_secs(report.commit_age_seconds)} ago",
    ]
    if report.in_flight is not None:
        lines.append(
            f"in flight   batch {report.in_flight.batch_id}, {report.in_flight.planned_records} "
            f"records planned, running for {_secs(report.in_flight.age_seconds)}"
        )
    for source in report.sources:
        if not source.is_kafka:
            lines.append(f"source {source.source_id}   not Kafka ({source.kind}): no lag measured")
    lines.append(
        f"lag         {report.total_lag} records (max {report.max_lag} on "
        f"{report.max_lag_topic or '-'}/{_num(report.max_lag_partition)}), time lag "
        f"{_time_lag(report.max_lag_seconds, report.time_lag_mode)} ({report.time_lag_mode})"
    )
    if report.rate_limited and report.time_lag_mode == "estimate":
        lines.append(
            "note        batches look capped by a rate limit (maxOffsetsPerTrigger): the "
            "checkpoint cannot date the waiting records; --exact reads their timestamps"
        )
    if report.consumption_rate is not None:
        catch_up = (
            _secs(report.catch_up_seconds) if report.catch_up_seconds is not None else "unknown"
        )
        lines.append(
            f"rate        {report.consumption_rate:.1f} records/s consumed, catch-up {catch_up}"
        )
    if report.missing_topics:
        lines.append(f"missing     topics not in Kafka: {', '.join(report.missing_topics)}")
    return lines


def render(report: LagReport, verdict: HealthVerdict) -> str:
    """The full human-readable report: summary, partition table, verdict."""
    return "\n".join(
        [
            *summary_lines(report),
            "",
            partition_table(report),
            "",
            f"health      {verdict.health.value}: {verdict.reason}",
        ]
    )


def breach_summary(report: LagReport, verdict: HealthVerdict, limit: int = 10) -> str:
    """A short failure message: the verdict and the worst partitions (for operator failures)."""
    worst = sorted(
        (p for s in report.sources if s.is_kafka for t in s.topics for p in t.partitions),
        key=lambda p: (not p.data_loss, -p.lag),
    )[:limit]
    parts = [
        f"{p.topic}[{p.partition}] lag={p.lag} committed={_num(p.committed_offset)} "
        f"end={_num(p.log_end_offset)}" + (f" {flags(p)}" if flags(p) else "")
        for p in worst
    ]
    return (
        f"{report.location}: {verdict.health.value}: {verdict.reason}. Total lag "
        f"{report.total_lag}. " + "; ".join(parts)
    )
