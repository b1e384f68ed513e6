"""Deploy a new version of a Spark streaming job only when the running one is healthy.

    check_health ──healthy──────────────────────────┐
         ├──lagging──> wait_until_healthy ──────────┤
         └──other────> abort                        v
                                stop_old_job -> record_offsets -> start_new_job
                                -> wait_for_catch_up -> wait_new_version_healthy

1. ``check_health`` reads the checkpoint and Kafka: healthy -> deploy now, lagging -> wait
   (deferred) until healthy, anything else (stalled, stopped, data loss, ...) -> abort.
2. ``stop_old_job`` stops the running version cleanly; only then are the committed offsets
   final, so ``record_offsets`` records them and the stop time (XCom ``stopped_at``, ISO-8601):
   the rollback point and the catch-up target.
3. ``start_new_job`` starts the new version on the same checkpoint and returns once its query
   runs (``QUERY_STARTED``).
4. The gate is "started and caught up", not "traffic": ``wait_for_catch_up`` (deferred) waits
   until everything produced before the stop is processed, then ``wait_new_version_healthy``
   (deferred) until the verdict is OK under the same thresholds. A new version with nothing to
   read and nothing waiting passes at once: on a quiet topic Spark commits no new batch, and
   waiting for one would fail a healthy deploy at its timeout.

Everything comes from params and connections (``kafka_config_id``, ``aws_conn_id``,
``webhdfs_conn_id``). The job runs locally via ``dags/jobs/kafka_stream_job.py``; on a cluster
use SparkSubmitOperator for ``start_new_job`` (docs/operators/gated-deploy.md).
"""

from __future__ import annotations

import datetime
import time

from airflow.providers.common.compat.sdk import DAG, AirflowFailException, Param, task

from airflow_sparklag.operators.sparklag import SparkLagBranchOperator
from airflow_sparklag.sensors.sparklag import SparkKafkaCatchUpSensor, SparkLagSensor

CONNECTIONS = {
    "kafka_config_id": "{{ params.kafka_config_id }}",
    "aws_conn_id": "{{ params.aws_conn_id or None }}",
    "webhdfs_conn_id": "{{ params.webhdfs_conn_id or None }}",
}
CHECKPOINT = "{{ params.checkpoint }}"
RECORDED = "ti.xcom_pull(task_ids='record_offsets')"


def iso_time(epoch: float | None, timespec: str = "seconds") -> str:
    """``1795345663.27`` -> ``2026-11-22T10:27:43Z``; None -> ``never``."""
    if epoch is None:
        return "never"
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")


def _hook(params: dict):  # type: ignore[no-untyped-def]
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    return SparkLagHook(
        kafka_config_id=params["kafka_config_id"],
        aws_conn_id=params["aws_conn_id"] or None,
        webhdfs_conn_id=params["webhdfs_conn_id"] or None,
    )


with DAG(
    dag_id="sparklag_gated_deploy",
    description="Deploy a new Spark job version only when the old one is healthy",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["sparklag", "example"],
    params={
        "checkpoint": Param("/tmp/sparklag/checkpoints/orders", type="string"),
        "topics": Param("orders", type="string", description="comma-separated"),
        "job_name": Param("orders", type="string"),
        "new_version": Param("v2", type="string"),
        "run_dir": Param("/tmp/sparklag/run", type="string", description="pid and log files"),
        "spark_classpath": Param("", type="string", description="connector jars (local runs)"),
        "thresholds": Param({"max_lag_records_total": 100000}, type="object"),
        "kafka_config_id": Param("kafka_default", type="string"),
        "aws_conn_id": Param("", type="string"),
        "webhdfs_conn_id": Param("", type="string"),
    },
) as dag:
    check_health = SparkLagBranchOperator(
        task_id="check_health",
        location=CHECKPOINT,
        thresholds="{{ params.thresholds }}",
        healthy_task_id="stop_old_job",
        lagging_task_id="wait_until_healthy",
        default_task_id="abort",
        check_failed_task_id="abort",  # no checkpoint there, Kafka down: do not deploy
        **CONNECTIONS,
    )
    wait_until_healthy = SparkLagSensor(
        task_id="wait_until_healthy",
        location=CHECKPOINT,
        thresholds="{{ params.thresholds }}",
        deferrable=True,
        poke_interval=15,
        timeout=1800,
        **CONNECTIONS,
    )

    @task
    def abort(ti=None) -> None:  # type: ignore[no-untyped-def]
        document = ti.xcom_pull(task_ids="check_health", key="report") or {}
        verdict = (document.get("results") or [{}])[0].get("verdict", {})
        raise AirflowFailException(
            f"deploy aborted: the running job is {verdict.get('health')}: {verdict.get('reason')}"
        )

    @task(trigger_rule="none_failed_min_one_success")
    def stop_old_job(params=None) -> int | None:  # type: ignore[no-untyped-def]
        from jobs.process_control import stop_job

        return stop_job(params["run_dir"], params["job_name"])

    @task(show_return_value_in_logs=False)  # logged below, with times as ISO-8601
    def record_offsets(params=None) -> dict:  # type: ignore[no-untyped-def]
        import logging

        recorded = _hook(params).committed_offsets(params["checkpoint"])
        # The old version is stopped: everything produced until now is the catch-up target.
        recorded["stopped_at"] = iso_time(time.time(), "milliseconds")
        logging.getLogger("sparklag.gated_deploy").info(
            "old version stopped at %s, its last batch %s committed at %s; the new version "
            "must process everything produced before the stop",
            recorded["stopped_at"],
            recorded["committed_batch_id"],
            recorded["committed_at"] or "never",
        )
        return recorded

    @task
    def start_new_job(params=None) -> int:  # type: ignore[no-untyped-def]
        from jobs.process_control import start_job

        bootstrap = _hook(params).get_conn().kafka_config["bootstrap.servers"]
        job_args = ["--bootstrap", bootstrap, "--topics", params["topics"]]
        job_args += ["--checkpoint", params["checkpoint"]]
        if params["spark_classpath"]:
            job_args += ["--classpath", params["spark_classpath"]]
        return start_job(params["run_dir"], params["job_name"], params["new_version"], job_args)

    wait_for_catch_up = SparkKafkaCatchUpSensor(
        task_id="wait_for_catch_up",
        location=CHECKPOINT,
        target_time="{{ " + RECORDED + "['stopped_at'] }}",
        deferrable=True,
        poke_interval=5,
        timeout=900,
        **CONNECTIONS,
    )
    wait_new_version_healthy = SparkLagSensor(
        task_id="wait_new_version_healthy",
        location=CHECKPOINT,
        thresholds="{{ params.thresholds }}",
        deferrable=True,
        poke_interval=5,
        timeout=600,
        **CONNECTIONS,
    )

    stop = stop_old_job()
    check_health >> [stop, wait_until_healthy, abort()]
    wait_until_healthy >> stop
    stop >> record_offsets() >> start_new_job() >> wait_for_catch_up >> wait_new_version_healthy
