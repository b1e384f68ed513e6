"""Restart a Spark streaming job when it turns unhealthy (Airflow 3: event-driven scheduling).

    asset sparklag_job_health  <- AssetWatcher(SparkLagEventTrigger), in the triggerer
        |  one asset event per health transition (OK -> LAGGING, LAGGING -> OK, ...)
        v
    read_event ──unhealthy──> restart_job ──> wait_caught_up
         └──recovered──> (the rest skipped)

The triggerer polls the job every ``poll_interval`` seconds and fires once when its verdict
crosses into ``unhealthy`` (default LAGGING, STALLED, STOPPED, REWIND, DATA_LOSS), and once
when it leaves it again (``fire_on_recovery``, default true here): each event starts one run.
A verdict that persists starts nothing, and a restarted triggerer does not fire the same
transition again (docs/events.md).

1. ``read_event`` reads the event's payload (``status``, ``job``, ``health``, ``message``, the
   check's report); a "recovered" event ends the run here (the rest is skipped), and so does
   a manual run (it has no event: it logs that and restarts nothing).
2. ``restart_job`` stops the running job (if any) and starts it again on its checkpoint
   (``dags/jobs/kafka_stream_job.py`` here; on a cluster SparkSubmitOperator), recording when.
3. ``wait_caught_up`` (deferred) waits until everything produced before the restart is
   processed.

The job is configured by the Airflow Variable ``sparklag_remediation`` (JSON), read when the
DAG file is parsed (a watcher is part of the DAG's definition)::

    {"job_name": "orders", "checkpoint": "s3a://lake/ck/orders", "topics": "orders",
     "kafka_config_id": "kafka_default", "aws_conn_id": null,
     "thresholds": {"max_lag_seconds": 600}, "unhealthy": ["LAGGING", "STALLED", "STOPPED"],
     "fire_on_recovery": true, "poll_interval": 60,
     "run_dir": "/var/run/sparklag", "spark_classpath": ""}

Without it the asset has no watcher and the DAG never runs (its description says so). On
Airflow 2 this file defines no DAG: event-driven scheduling needs Airflow 3.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from typing import Any

from airflow_sparklag.triggers.events import airflow_version

CONFIG_VARIABLE = "sparklag_remediation"
ASSET = "sparklag_job_health"
log = logging.getLogger("sparklag.remediation")


def load_config() -> dict[str, Any]:
    """The Variable's JSON, or {} when it is not set (or unreadable, or not a JSON object:
    logged)."""
    from airflow.providers.common.compat.sdk import Variable

    try:
        text = Variable.get(CONFIG_VARIABLE, None)
    except Exception as exc:  # e.g. Airflow 3.0 parsing outside the dag-processor
        log.warning("Variable %s unreadable (%s): no watcher", CONFIG_VARIABLE, exc)
        return {}
    try:
        config = json.loads(text) if text else {}
    except ValueError as exc:
        log.error("Variable %s is not JSON (%s): no watcher", CONFIG_VARIABLE, exc)
        return {}
    return config if isinstance(config, dict) else {}


def watchers(config: dict[str, Any]) -> list[Any]:
    """The asset's watcher of the configured job, or none."""
    if not config.get("checkpoint"):
        return []
    from airflow.sdk import AssetWatcher

    from airflow_sparklag.triggers.events import DEFAULT_UNHEALTHY, SparkLagEventTrigger

    trigger = SparkLagEventTrigger(
        config["checkpoint"],
        thresholds=config.get("thresholds"),
        unhealthy=config.get("unhealthy", DEFAULT_UNHEALTHY),
        fire_on_recovery=config.get("fire_on_recovery", True),
        poll_interval=config.get("poll_interval", 60),
        kafka_config_id=config.get("kafka_config_id", "kafka_default"),
        aws_conn_id=config.get("aws_conn_id"),
        webhdfs_conn_id=config.get("webhdfs_conn_id"),
    )
    return [AssetWatcher(name=f"{ASSET}_watcher", trigger=trigger)]


def build_dag(config: dict[str, Any]) -> Any:
    from airflow.sdk import DAG, Asset, task

    from airflow_sparklag.sensors.sparklag import SparkKafkaCatchUpSensor

    health = Asset(ASSET, watchers=watchers(config))
    configured = bool(health.watchers)
    with DAG(
        dag_id="sparklag_remediation",
        description="Restart a streaming job when it turns unhealthy"
        if configured
        else f"Not configured: set the Variable {CONFIG_VARIABLE} (see the DAG's docs)",
        schedule=[health],
        start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
        catchup=False,
        max_active_runs=1,  # one restart at a time; events that come meanwhile wait
        tags=["sparklag", "example"],
        doc_md=__doc__,
    ) as dag:

        @task.short_circuit
        def read_event(triggering_asset_events=None) -> dict[str, Any] | None:  # type: ignore[no-untyped-def]
            events = triggering_asset_events[health] if triggering_asset_events else []
            if not events:  # a manual run: no transition to act on
                log.warning(
                    "no asset event (a manual run): nothing to restart. This DAG runs when its "
                    "watcher sees the job's health change%s",
                    "" if configured else f"; set the Variable {CONFIG_VARIABLE} to configure it",
                )
                return None
            event = events[-1]
            payload: dict[str, Any] = event.extra.get("payload") or {}
            log.info(
                "%s: %s -> %s: %s",
                payload.get("job"),
                payload.get("previous"),
                payload.get("health"),
                payload.get("message"),
            )
            return payload if payload.get("status") == "unhealthy" else None

        @task
        def restart_job(payload: dict[str, Any]) -> float:
            from jobs.process_control import start_job, stop_job

            from airflow_sparklag.hooks.sparklag import SparkLagHook

            name, run_dir = config.get("job_name", "job"), config["run_dir"]
            stop_job(run_dir, name)
            restarted_at = time.time()
            hook = SparkLagHook(kafka_config_id=config.get("kafka_config_id", "kafka_default"))
            bootstrap = hook.get_conn().kafka_config["bootstrap.servers"]
            job_args = ["--bootstrap", bootstrap, "--topics", config["topics"]]
            job_args += ["--checkpoint", config["checkpoint"]]
            if config.get("spark_classpath"):
                job_args += ["--classpath", config["spark_classpath"]]
            version = f"restarted-{int(restarted_at)}"
            pid = start_job(run_dir, name, version, job_args)
            log.info("%s restarted (pid %d) after %s", name, pid, payload.get("health"))
            return restarted_at

        restarted_at = restart_job(read_event())
        restarted_at >> SparkKafkaCatchUpSensor(
            task_id="wait_caught_up",
            # No job configured: nothing triggers the DAG (no watcher); a checkpoint read
            # when the task runs keeps the file importable (arguments are read at parse time).
            location=config.get("checkpoint") or f"{{{{ var.json.{CONFIG_VARIABLE}.checkpoint }}}}",
            target_time="{{ ti.xcom_pull(task_ids='restart_job') }}",
            deferrable=True,
            poke_interval=5,
            timeout=900,
            kafka_config_id=config.get("kafka_config_id", "kafka_default"),
            aws_conn_id=config.get("aws_conn_id"),
            webhdfs_conn_id=config.get("webhdfs_conn_id"),
        )
    return dag


if airflow_version() >= (3, 0):
    dag = build_dag(load_config())
