"""Migrate a Spark streaming job's checkpoint: check, record the committed offsets, (snapshot).

    check_health -> record_offsets

``check_health`` refuses to go on when the checkpoint is damaged or the job lost data or
rewound (a migration would carry the damage along); lag alone is fine. ``record_offsets`` puts
the committed batch and its Kafka offsets in XCom: the exact position to restore (Spark's
``startingOffsets``) if the migrated checkpoint has to be rebuilt. Snapshot and copy steps come
with the snapshot operators.
"""

from __future__ import annotations

import datetime

from airflow.sdk import DAG, Param, task

from airflow_sparklag.operators.sparklag import SparkLagCheckOperator

with DAG(
    dag_id="sparklag_checkpoint_migration",
    description="Check a checkpoint and record its committed offsets before migrating it",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["sparklag", "example"],
    params={
        "checkpoint": Param("/tmp/sparklag/checkpoints/orders", type="string"),
        "kafka_config_id": Param("kafka_default", type="string"),
        "aws_conn_id": Param("", type="string"),
        "webhdfs_conn_id": Param("", type="string"),
    },
) as dag:
    check_health = SparkLagCheckOperator(
        task_id="check_health",
        location="{{ params.checkpoint }}",
        fail_on=["DATA_LOSS", "REWIND"],
        kafka_config_id="{{ params.kafka_config_id }}",
        aws_conn_id="{{ params.aws_conn_id or None }}",
        webhdfs_conn_id="{{ params.webhdfs_conn_id or None }}",
    )

    @task
    def record_offsets(params=None) -> dict:  # type: ignore[no-untyped-def]
        from airflow_sparklag.hooks.sparklag import SparkLagHook

        hook = SparkLagHook(
            kafka_config_id=params["kafka_config_id"],
            aws_conn_id=params["aws_conn_id"] or None,
            webhdfs_conn_id=params["webhdfs_conn_id"] or None,
        )
        return hook.committed_offsets(params["checkpoint"])

    check_health >> record_offsets()
