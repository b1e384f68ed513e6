"""Move a Spark streaming job to a fresh checkpoint without losing data.

    check_health -> check_inputs -> stop_old_job -> snapshot -> migrate -> start_new_job
        -> wait_first_batch

1. ``check_health`` refuses to go on when the checkpoint is damaged or the job lost data or
   rewound (a migration would carry the damage along); lag alone is fine. ``check_inputs``
   reads the migration's parameters (roots, quiet period, output path, flags) as ``migrate``
   will, so a value it cannot read fails the run BEFORE the job is stopped.
2. ``stop_old_job`` stops the running version (pid file ``<run_dir>/<old_job_name>.pid``, as in
   the gated deploy DAG); skipped when ``old_job_name`` is empty (stop it yourself: the
   migration's quiet period refuses a checkpoint that still moves).
3. ``snapshot`` writes a verified snapshot of the committed offsets to ``snapshot_root`` and,
   when ``consumer_group`` is set, exports them to that (idle) Kafka group. It runs AFTER the
   stop: a snapshot of a running query is stale by the time it is used, and starting from it
   would replay the batches committed in between.
4. ``migrate`` validates the snapshot against Kafka (data loss refused unless
   ``allow_data_loss``; the file-sink guard checks ``output_path``), archives the old
   checkpoint under ``archive_root`` and returns the new query's ``startingOffsets``.
5. ``start_new_job`` starts ``new_version`` on ``new_checkpoint`` (default: the old location,
   now empty) with those ``startingOffsets`` (``dags/jobs/kafka_stream_job.py``, a local
   PySpark process; on a cluster use SparkSubmitOperator, docs/operators/checkpoint-migration.md).
6. ``wait_first_batch`` (deferred) waits until the new checkpoint commits its first batch.

Connections come from params by id (``kafka_config_id``, ``aws_conn_id``, ``webhdfs_conn_id``).
"""

from __future__ import annotations

import datetime
import logging

from airflow.providers.common.compat.sdk import (
    DAG,
    AirflowFailException,
    AirflowSkipException,
    Param,
    task,
)

from airflow_sparklag.operators.snapshot import (
    CheckpointMigrationOperator,
    CheckpointSnapshotOperator,
)
from airflow_sparklag.operators.sparklag import SparkLagCheckOperator
from airflow_sparklag.sensors.sparklag import SparkCheckpointProgressSensor

log = logging.getLogger("sparklag.checkpoint_migration")  # a DAG module's __name__ is mangled

CONNECTIONS = {
    "kafka_config_id": "{{ params.kafka_config_id }}",
    "aws_conn_id": "{{ params.aws_conn_id or None }}",
    "webhdfs_conn_id": "{{ params.webhdfs_conn_id or None }}",
}
CHECKPOINT = "{{ params.checkpoint }}"
NEW_CHECKPOINT = "{{ params.new_checkpoint or params.checkpoint }}"


def _hook(params: dict):  # type: ignore[no-untyped-def]
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    return SparkLagHook(
        kafka_config_id=params["kafka_config_id"],
        aws_conn_id=params["aws_conn_id"] or None,
        webhdfs_conn_id=params["webhdfs_conn_id"] or None,
    )


with DAG(
    dag_id="sparklag_checkpoint_migration",
    description="Snapshot, archive and replace a Spark job's checkpoint without losing data",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["sparklag", "example"],
    params={
        "checkpoint": Param("/tmp/sparklag/checkpoints/orders", type="string"),
        "new_checkpoint": Param("", type="string", description="default: the old location"),
        "snapshot_root": Param("/tmp/sparklag/snapshots", type="string"),
        "archive_root": Param("/tmp/sparklag/archive", type="string"),
        "consumer_group": Param("", type="string", description="export offsets to this group"),
        "output_path": Param("", type="string", description="new job's parquet output"),
        "allow_data_loss": Param(False, type="boolean"),
        "move_sink_log": Param(False, type="boolean"),
        "quiet_period": Param(60, type="number", description="s; 0 once stop_old_job stopped it"),
        "topics": Param("", type="string", description="default: the checkpoint's topics"),
        "run_dir": Param("/tmp/sparklag/run", type="string", description="pid and log files"),
        "old_job_name": Param("", type="string", description="pid file to stop; empty: skip"),
        "job_name": Param("orders", type="string"),
        "new_version": Param("v2", type="string"),
        "spark_classpath": Param("", type="string", description="connector jars (local runs)"),
        "kafka_config_id": Param("kafka_default", type="string"),
        "aws_conn_id": Param("", type="string"),
        "webhdfs_conn_id": Param("", type="string"),
    },
) as dag:
    check_health = SparkLagCheckOperator(
        task_id="check_health",
        location=CHECKPOINT,
        fail_on=["DATA_LOSS", "REWIND"],
        **CONNECTIONS,
    )

    @task
    def check_inputs(params=None) -> None:  # type: ignore[no-untyped-def]
        """What ``migrate`` will read, read now: a bad value must not leave the job stopped."""
        from airflow_sparklag import params as read
        from airflow_sparklag.errors import InvalidParameter
        from airflow_sparklag.migration import MigrationOptions
        from airflow_sparklag.snapshot import outside_checkpoint

        try:
            checkpoint = read.location("checkpoint", params["checkpoint"])
            for name in ("archive_root", "snapshot_root"):
                outside_checkpoint(name, read.location(name, params[name]), checkpoint)
            read.options(
                MigrationOptions,
                {
                    "quiet_period": params["quiet_period"],
                    "allow_data_loss": params["allow_data_loss"],
                    "move_sink_log": params["move_sink_log"],
                    "file_sink_paths": params["output_path"],
                },
            )
        except InvalidParameter as exc:
            raise AirflowFailException(str(exc)) from None

    @task
    def stop_old_job(params=None) -> int | None:  # type: ignore[no-untyped-def]
        if not params["old_job_name"]:
            reason = "no old_job_name: the job is stopped outside this DAG"
            log.info("%s", reason)  # Airflow 3 logs a skip without its reason
            raise AirflowSkipException(reason)
        from jobs.process_control import stop_job

        return stop_job(params["run_dir"], params["old_job_name"])

    snapshot = CheckpointSnapshotOperator(
        task_id="snapshot",
        location=CHECKPOINT,
        snapshot_root="{{ params.snapshot_root }}",
        consumer_group="{{ params.consumer_group or None }}",
        trigger_rule="none_failed",  # stop_old_job may be skipped
        **CONNECTIONS,
    )
    migrate = CheckpointMigrationOperator(
        task_id="migrate",
        location=CHECKPOINT,
        archive_root="{{ params.archive_root }}",
        snapshot="{{ ti.xcom_pull(task_ids='snapshot')['results'][0]['path'] }}",
        # A job this run stopped (its process is gone) cannot commit again: no quiet period.
        quiet_period="{{ 0 if ti.xcom_pull(task_ids='stop_old_job') else params.quiet_period }}",
        allow_data_loss="{{ params.allow_data_loss }}",
        move_sink_log="{{ params.move_sink_log }}",
        file_sink_paths="{{ params.output_path }}",  # empty: no file sink (noop)
        **CONNECTIONS,
    )

    @task
    def start_new_job(params=None, ti=None) -> int:  # type: ignore[no-untyped-def]
        import json
        import logging

        from jobs.process_control import start_job

        from airflow_sparklag.errors import CheckpointNotFound

        migration = ti.xcom_pull(task_ids="migrate")["results"][0]  # docs/json.md
        starting = migration["starting_offsets_json"]
        if not starting:
            raise AirflowFailException(
                f"{len(migration['starting_offsets'])} Kafka sources in the checkpoint: give "
                "each its startingOffsets yourself (migrate's XCom 'starting_offsets')"
            )
        hook = _hook(params)
        checkpoint = params["new_checkpoint"] or params["checkpoint"]
        try:
            existing = hook.read_checkpoint(checkpoint).committed_batch_id
        except CheckpointNotFound:
            existing = None
        if existing is not None:  # a re-run: the new job already has progress of its own
            logging.getLogger("sparklag.checkpoint_migration").warning(
                "%s has batch %s: Spark resumes from it, startingOffsets unused",
                checkpoint,
                existing,
            )
        topics = params["topics"] or ",".join(sorted(json.loads(starting)))
        job_args = ["--bootstrap", hook.get_conn().kafka_config["bootstrap.servers"]]
        job_args += ["--topics", topics, "--checkpoint", checkpoint]
        job_args += ["--starting-offsets", starting]
        if params["output_path"]:
            job_args += ["--sink", "parquet", "--output", params["output_path"]]
        if params["spark_classpath"]:
            job_args += ["--classpath", params["spark_classpath"]]
        return start_job(params["run_dir"], params["job_name"], params["new_version"], job_args)

    wait_first_batch = SparkCheckpointProgressSensor(
        task_id="wait_first_batch",
        location=NEW_CHECKPOINT,
        deferrable=True,
        poke_interval=5,
        timeout=600,
        **CONNECTIONS,
    )

    check_health >> check_inputs() >> stop_old_job() >> snapshot >> migrate
    migrate >> start_new_job() >> wait_first_batch
