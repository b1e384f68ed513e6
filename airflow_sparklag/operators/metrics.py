"""Airflow metrics from every class: checks, branches, fleet checks, sensors and triggers.

A job is named by ``metric_name`` when given, else ``<dag_id>__<task_id>`` (a fleet job by its
checkpoint location); health is a gauge (``Health.metric_value``), never a tag. Sent through
Airflow's own ``Stats``; the per-partition gauges (told apart by tags) only when the backend
keeps tags (OpenTelemetry, Datadog, InfluxDB-style). docs/metrics.md lists every metric.
Metrics never fail a task: a broken backend is logged.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from airflow_sparklag.compact import partition_rows

PREFIX = "sparklag"
# A job's gauge -> the report field (XCom key) it sends. A metric has one name: the exporter's
# sparklag_job_<name> is sparklag.<job>.<name> here, sparklag_partition_<name> is
# sparklag.partition_<name> (docs/names.md).
JOB_GAUGES = {
    "lag_records": "total_lag",
    "max_partition_lag_records": "max_lag",
    "max_lag_seconds": "max_lag_seconds",
    "commit_age_seconds": "commit_age_seconds",
}
PARTITION_GAUGES = {"partition_lag_records": "lag", "partition_lag_seconds": "lag_seconds"}
# Old name -> the name now: both are sent until the next release (docs/metrics.md).
RENAMED = {
    "total_lag": "lag_records",
    "max_lag": "max_partition_lag_records",
    "check_failed": "check_errors",
    "partition_lag": "partition_lag_records",
}
_OLD_NAME = {new: old for old, new in RENAMED.items()}
log = logging.getLogger(__name__)


def _stats() -> Any:
    from airflow.providers.common.compat.sdk import Stats

    return Stats


def metric_safe(name: str) -> str:
    """StatsD-safe metric segment: ``orders-v2/eu`` -> ``orders_v2_eu``."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "job"


def job_name(task: Any, metric_name: str | None = None) -> str:
    """``metric_name`` or ``<dag_id>__<task_id>`` (two DAGs' ``check`` tasks stay apart)."""
    if metric_name:
        return metric_safe(metric_name)
    # A task outside a DAG reports an "adhoc_<owner>" dag_id: not a name to keep.
    has_dag = getattr(task, "has_dag", lambda: False)()
    dag_id = getattr(task, "dag_id", None) if has_dag else None
    task_id = metric_safe(task.task_id)
    return f"{metric_safe(dag_id)}__{task_id}" if dag_id else task_id


def location_job(location: str) -> str:
    """A fleet job's name: its checkpoint location without the scheme."""
    return metric_safe(location.split("://", 1)[-1])


def backend_keeps_tags() -> bool:
    from airflow.providers.common.compat.sdk import conf

    return any(
        conf.getboolean("metrics", option, fallback=False)
        for option in ("otel_on", "statsd_datadog_enabled", "statsd_influxdb_enabled")
    )


def _send(send: Any, prefix: str, job: str | None, name: str, value: float, tags: Any) -> None:
    """``send`` (a gauge or incr of ``Stats``) the metric ``name`` of ``job`` (None: of every
    job), and under its old name too while that is still sent."""
    for metric in (name, _OLD_NAME.get(name)):
        if metric is not None:
            send(f"{prefix}.{job}.{metric}" if job else f"{prefix}.{metric}", value, tags=tags)


def emit_result(job: str, result: Mapping[str, Any], prefix: str = PREFIX) -> None:
    """Gauges of one check (``CheckResult.to_dict()``); a failed check counts as a failure."""
    try:
        if result.get("error") or not result.get("report"):
            emit_failure(job, str(result.get("error") or "no report").split(":", 1)[0], prefix)
            return
        _emit_report(job, result["report"], result.get("verdict") or {}, prefix)
    except Exception:  # metrics must never fail a check
        log.warning("sparklag: could not send metrics for %s", job, exc_info=True)


def _emit_report(
    job: str, report: Mapping[str, Any], verdict: Mapping[str, Any], prefix: str
) -> None:
    from airflow_sparklag.model.verdict import Health

    gauge = _stats().gauge
    tags = {"job": job}
    for name, key in JOB_GAUGES.items():
        if report.get(key) is not None:
            _send(gauge, prefix, job, name, float(report[key]), tags)
    health = Health.parse(str(verdict.get("health", "UNKNOWN")))
    gauge(f"{prefix}.{job}.health", float(health.metric_value), tags=tags)
    if backend_keeps_tags():
        for part in partition_rows(report):  # a full report, or a compact one (an XCom)
            ptags = {**tags, "topic": str(part["topic"]), "partition": str(part["partition"])}
            for name, key in PARTITION_GAUGES.items():
                if part.get(key) is not None:
                    _send(gauge, prefix, None, name, float(part[key]), ptags)


def emit_failure(job: str, reason: str, prefix: str = PREFIX) -> None:
    """One check that could not be made (``reason``: the error class, or the verdict)."""
    try:
        incr = _stats().incr
        _send(incr, prefix, job, "check_errors", 1, {"job": job})
        _send(incr, prefix, None, "check_errors", 1, {"job": job, "reason": metric_safe(reason)})
    except Exception:
        log.warning("sparklag: could not send metrics for %s", job, exc_info=True)


def emit_probe(job: str, kind: str, payload: Mapping[str, Any]) -> None:
    """A wait condition's poll: a health probe carries a whole check; a catch-up probe the
    records still to process (``sparklag.<job>.records_behind``). ``payload``: the probe's
    document, whose one result is what it saw."""
    payload = (payload.get("results") or [{}])[0]
    if kind == "health":
        emit_result(job, payload)
    elif kind == "catch_up" and payload.get("records_behind") is not None:
        try:
            value = float(payload["records_behind"])
            _stats().gauge(f"{PREFIX}.{job}.records_behind", value, tags={"job": job})
        except Exception:
            log.warning("sparklag: could not send metrics for %s", job, exc_info=True)
