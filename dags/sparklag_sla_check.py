"""Check every streaming job's lag against its SLA, one mapped task per job.

    load_jobs -> check_sla[job] (mapped) -> summary

The job list is the Variable ``sparklag_sla_jobs`` (JSON) when it is set, else the JSON file in
the ``jobs_file`` param (default ``dags/config/sla_jobs.json``)::

    {"kafka_config_id": "kafka_default",
     "jobs": [{"name": "orders", "location": "s3a://lake/checkpoints/orders",
               "aws_conn_id": "aws_default", "thresholds": {"max_lag_seconds": 600},
               "subscribe_pattern": "^orders\\..*$"}]}

(``subscribe_pattern``: only for a job that subscribes by pattern; docs/lag-and-health.md,
"Subscriptions".)

The shipped ``dags/config/sla_jobs.json`` is a sample (``"example": true``): while the
configuration says so, ``load_jobs`` skips the run and logs how to configure it, so unpausing
the DAG before configuring it makes skipped runs, not failed ones.

A job breaching its SLA fails its own mapped task (the others still run) and calls
``alert_sla_breach``, which logs the job's name and verdict and, when the ``alert_file`` param
is set, appends it there as one JSON line: replace it with a notifier (Slack, email,
PagerDuty) of your own. ``summary`` runs whatever happened, logs one line per job and fails
the run when any job breached (or could not be checked).
"""

from __future__ import annotations

import datetime
import json
import logging
from pathlib import Path
from typing import Any

from airflow.providers.common.compat.sdk import DAG, Param, task

from airflow_sparklag.operators.sparklag import SparkLagCheckOperator

DEFAULT_JOBS_FILE = str(Path(__file__).resolve().parent / "config" / "sla_jobs.json")
JOBS_VARIABLE = "sparklag_sla_jobs"
log = logging.getLogger("sparklag.sla_check")  # a DAG module's __name__ is mangled


def only_result(document: dict[str, Any] | None) -> dict[str, Any]:
    """The one result of a check task's XCom document (docs/json.md); {} when it has none."""
    return ((document or {}).get("results") or [{}])[0]


def whole_seconds(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds)


def describe(seconds: float | None) -> str:
    """A duration for a log line: ``12 s``, or ``unknown`` when it could not be measured."""
    return "unknown" if seconds is None else f"{round(seconds)} s"


def job_kwargs(job: Any, index: int, defaults: dict[str, Any], source: str) -> dict[str, Any]:
    """One mapped check's arguments from one entry of the job list (checked)."""
    from airflow.providers.common.compat.sdk import AirflowFailException

    if not isinstance(job, dict) or not job.get("location"):
        raise AirflowFailException(f'{source}: jobs[{index}] needs a "location", got {job!r}')
    return {
        "location": job["location"],
        "thresholds": job.get("thresholds") or {},
        "subscribe_pattern": job.get("subscribe_pattern"),  # a job that subscribes by pattern
        "metric_name": job.get("name") or job["location"],
        "kafka_config_id": job.get("kafka_config_id", defaults["kafka_config_id"]),
        "aws_conn_id": job.get("aws_conn_id"),
        "webhdfs_conn_id": job.get("webhdfs_conn_id"),
    }


def alert_sla_breach(context: dict[str, Any]) -> None:
    """on_failure_callback: one alert per breaching job, named by the job's name (no secrets:
    the verdict and the lag)."""
    ti = context["ti"]
    task = context.get("task")
    result = only_result(ti.xcom_pull(task_ids=ti.task_id, map_indexes=ti.map_index))
    verdict, report = result.get("verdict") or {}, result.get("report") or {}
    location = getattr(task, "location", None) or result.get("location")
    alert = {
        "dag_id": ti.dag_id,
        "run_id": ti.run_id,
        "job": getattr(task, "metric_name", None) or location or ti.task_id,
        "location": location,
        "health": verdict.get("health", "CHECK_FAILED"),
        "reason": verdict.get("reason") or str(context.get("exception")),
        "total_lag": report.get("total_lag"),
        "max_lag_seconds": whole_seconds(report.get("max_lag_seconds")),
        "last_commit": (report.get("committed_at") or "never") if report else None,
    }
    log.warning(
        "SLA breach: job %s is %s: %s (total lag %s records, max lag %s, last commit %s)",
        alert["job"],
        alert["health"],
        alert["reason"],
        alert["total_lag"] if alert["total_lag"] is not None else "unknown",
        describe(report.get("max_lag_seconds")),
        alert["last_commit"] or "unknown",
    )
    alert_file = (context.get("params") or {}).get("alert_file")
    if alert_file:
        with open(alert_file, "a") as out:
            out.write(json.dumps(alert) + "\n")


with DAG(
    dag_id="sparklag_sla_check",
    description="Lag SLA of every Spark streaming job, one mapped task per job",
    schedule="*/15 * * * *",
    start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    tags=["sparklag", "example"],
    params={
        "jobs_file": Param(
            DEFAULT_JOBS_FILE,
            type="string",
            description=f"JSON job list, used when the Variable {JOBS_VARIABLE} is not set",
        ),
        "alert_file": Param("", type="string", description="append alerts here (JSON lines)"),
    },
) as dag:

    @task
    def load_jobs(params=None) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
        from airflow.providers.common.compat.sdk import (
            AirflowFailException,
            AirflowSkipException,
            Variable,
        )

        text = Variable.get(JOBS_VARIABLE, None)  # default: positional on 2.11 and 3.x
        source = f"Variable {JOBS_VARIABLE}"
        if text is None:
            source = f"jobs_file {params['jobs_file']}"
            try:
                text = Path(params["jobs_file"]).read_text()
            except OSError as exc:
                raise AirflowFailException(
                    f"cannot read {source}: {exc.strerror}; set the Variable {JOBS_VARIABLE} "
                    "or give the jobs_file param a readable JSON job list"
                ) from None
        try:
            config = json.loads(text)
        except json.JSONDecodeError as exc:
            raise AirflowFailException(f"{source} is not valid JSON: {exc}") from None
        if config.get("example"):
            message = (
                f'{source} is the shipped sample configuration ("example": true), nothing '
                f"to check. To check your jobs, set the Airflow Variable {JOBS_VARIABLE} to "
                "your JSON job list, or trigger with the jobs_file param pointing at your own "
                'file (same format, without "example"); see dags/sparklag_sla_check.py'
            )
            log.warning("%s", message)
            raise AirflowSkipException(message)
        defaults = {"kafka_config_id": config.get("kafka_config_id", "kafka_default")}
        jobs = [job_kwargs(j, i, defaults, source) for i, j in enumerate(config.get("jobs", []))]
        log.info("%d job(s) from %s", len(jobs), source)
        return jobs

    check_sla = SparkLagCheckOperator.partial(
        task_id="check_sla",
        map_index_template="{{ task.metric_name }}",
        on_failure_callback=alert_sla_breach,
        retries=0,
    ).expand_kwargs(load_jobs())

    @task(trigger_rule="all_done")
    def summary(ti=None) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
        """One line per job; fails the run (after logging all) when any job breached."""
        from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

        from airflow_sparklag.operators.sparklag import DEFAULT_FAIL_ON

        jobs = ti.xcom_pull(task_ids="load_jobs") or []
        if not jobs:
            log.info("no jobs were checked (see load_jobs)")
            raise AirflowSkipException("no jobs were checked (see load_jobs)")
        documents = ti.xcom_pull(task_ids="check_sla") or []
        if isinstance(documents, dict):  # a single mapped instance comes back unwrapped
            documents = [documents]
        results = [only_result(d) for d in documents]
        by_location = {r["location"]: r for r in results if r}
        lines, breaches = [], []
        for job in jobs:
            result = by_location.get(job["location"]) or {}
            verdict, report = result.get("verdict") or {}, result.get("report") or {}
            line = {
                "job": job["metric_name"],
                "location": job["location"],
                "health": verdict.get("health", "CHECK_FAILED"),
                "total_lag": report.get("total_lag"),
                "max_lag_seconds": whole_seconds(report.get("max_lag_seconds")),
                "last_commit": (report.get("committed_at") or "never") if report else None,
            }
            log.info(
                "%s: %s, total lag %s records, max lag %s, last commit %s (%s)",
                line["job"],
                line["health"],
                line["total_lag"] if line["total_lag"] is not None else "unknown",
                describe(report.get("max_lag_seconds")),
                line["last_commit"] or "unknown",
                line["location"],
            )
            lines.append(line)
            if line["health"] in DEFAULT_FAIL_ON or line["health"] == "CHECK_FAILED":
                breaches.append(f"{line['job']} {line['health']}")
        if breaches:
            raise AirflowFailException(
                f"{len(breaches)} of {len(jobs)} job(s) breach their SLA: {', '.join(breaches)}"
            )
        return lines

    check_sla >> summary()
