"""Check every streaming job's lag against its SLA, one mapped task per job.

    load_jobs -> check_sla[job] (mapped) -> summary

The job list is the Variable ``sparklag_sla_jobs`` (JSON) when it is set, else the JSON file in
the ``jobs_file`` param (default ``dags/config/sla_jobs.json``)::

    {"kafka_config_id": "kafka_default",
     "jobs": [{"name": "orders", "location": "s3a://lake/checkpoints/orders",
               "aws_conn_id": "aws_default", "thresholds": {"max_lag_seconds": 600}}]}

A job breaching its SLA fails its own mapped task (the others still run) and calls
``alert_sla_breach``, which logs the verdict and, when the ``alert_file`` param is set, appends
it there as one JSON line: replace it with a notifier (Slack, email, PagerDuty) of your own.
``summary`` runs whatever happened, logs one line per job and fails the run when any job
breached (or could not be checked).
"""

from __future__ import annotations

import datetime
import json
import logging
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_sparklag.operators.sparklag import SparkLagCheckOperator

DEFAULT_JOBS_FILE = str(Path(__file__).resolve().parent / "config" / "sla_jobs.json")
JOBS_VARIABLE = "sparklag_sla_jobs"
log = logging.getLogger(__name__)


def alert_sla_breach(context: dict[str, Any]) -> None:
    """on_failure_callback: one alert per breaching job (no secrets: the verdict and the lag)."""
    ti = context["ti"]
    result = ti.xcom_pull(task_ids=ti.task_id, map_indexes=ti.map_index) or {}
    verdict = result.get("verdict") or {}
    alert = {
        "dag_id": ti.dag_id,
        "run_id": ti.run_id,
        "job": result.get("location") or str(context.get("exception")),
        "health": verdict.get("health"),
        "reason": verdict.get("reason") or str(context.get("exception")),
        "total_lag": (result.get("report") or {}).get("total_lag"),
    }
    log.warning("SLA breach: %s", alert)
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
        "jobs_file": Param(DEFAULT_JOBS_FILE, type="string"),
        "alert_file": Param("", type="string"),
    },
) as dag:

    @task
    def load_jobs(params=None) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
        from airflow.sdk import Variable

        text = Variable.get(JOBS_VARIABLE, default=None)
        if text is None:
            text = Path(params["jobs_file"]).read_text()
        config = json.loads(text)
        kafka_config_id = config.get("kafka_config_id", "kafka_default")
        return [
            {
                "location": job["location"],
                "thresholds": job.get("thresholds") or {},
                "metric_name": job.get("name") or job["location"],
                "kafka_config_id": job.get("kafka_config_id", kafka_config_id),
                "aws_conn_id": job.get("aws_conn_id"),
                "webhdfs_conn_id": job.get("webhdfs_conn_id"),
            }
            for job in config["jobs"]
        ]

    check_sla = SparkLagCheckOperator.partial(
        task_id="check_sla",
        map_index_template="{{ task.metric_name }}",
        on_failure_callback=alert_sla_breach,
        retries=0,
    ).expand_kwargs(load_jobs())

    @task(trigger_rule="all_done")
    def summary(ti=None) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
        """One line per job; fails the run (after logging all) when any job breached."""
        from airflow.sdk.exceptions import AirflowFailException

        from airflow_sparklag.operators.sparklag import DEFAULT_FAIL_ON

        jobs = ti.xcom_pull(task_ids="load_jobs") or []
        results = ti.xcom_pull(task_ids="check_sla") or []
        if isinstance(results, dict):  # a single mapped instance comes back unwrapped
            results = [results]
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
                "max_lag_seconds": report.get("max_lag_seconds"),
            }
            log.info("%s", line)
            lines.append(line)
            if line["health"] in DEFAULT_FAIL_ON or line["health"] == "CHECK_FAILED":
                breaches.append(f"{line['job']} {line['health']}")
        if breaches:
            raise AirflowFailException(
                f"{len(breaches)} of {len(jobs)} job(s) breach their SLA: {', '.join(breaches)}"
            )
        return lines

    check_sla >> summary()
