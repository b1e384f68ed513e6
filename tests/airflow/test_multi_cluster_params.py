"""``source_kafka_conn_ids``: declared once by the hook mixin, templated on every check, branch,
fleet and sensor task, read through params.py (a value it cannot read fails the task naming
it), handed to the hook, and carried by the sensors' triggers to the triggerer's hook.
Snapshots and migrations read one cluster: they refuse a mapping instead of ignoring it.
The numbers against two real clusters are in tests/integration/test_multi_cluster.py."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from airflow_sparklag.operators.fleet import SparkLagFleetCheckOperator
from airflow_sparklag.operators.snapshot import (
    CheckpointMigrationOperator,
    CheckpointSnapshotOperator,
    ConsumerGroupExportOperator,
)
from airflow_sparklag.operators.sparklag import SparkLagBranchOperator, SparkLagCheckOperator
from airflow_sparklag.sensors.sparklag import (
    SparkCheckpointProgressSensor,
    SparkKafkaCatchUpSensor,
    SparkLagSensor,
)
from airflow_sparklag.triggers.sparklag import SparkKafkaCatchUpTrigger, SparkLagTrigger

TASKS: dict[str, Callable[..., Any]] = {
    "check": lambda **kw: SparkLagCheckOperator(task_id="t", location="/ck", **kw),
    "branch": lambda **kw: SparkLagBranchOperator(
        task_id="t", location="/ck", default_task_id="x", **kw
    ),
    "fleet": lambda **kw: SparkLagFleetCheckOperator(task_id="t", locations=["/ck"], **kw),
    "health": lambda **kw: SparkLagSensor(task_id="t", location="/ck", **kw),
    "progress": lambda **kw: SparkCheckpointProgressSensor(task_id="t", location="/ck", **kw),
    "catch_up": lambda **kw: SparkKafkaCatchUpSensor(
        task_id="t", location="/ck", target_time=0, **kw
    ),
}


def rendered(make: Callable[..., Any], value: Any) -> Any:
    """The task with ``source_kafka_conn_ids`` templated from DAG params and rendered."""
    with DAG(f"multi_cluster_{uuid.uuid4().hex[:8]}", schedule=None, params={"m": value}):
        task = make(source_kafka_conn_ids="{{ params.m }}")
    task.render_template_fields({"params": {"m": value}})
    return task


@pytest.mark.parametrize("kind", sorted(TASKS))
def test_every_check_and_sensor_hands_the_mapping_to_its_hook(kind: str) -> None:
    task = rendered(TASKS[kind], {"1": "kafka_b", "orders_src": "kafka_c"})
    assert "source_kafka_conn_ids" in task.template_fields
    assert task.hook.source_kafka_conn_ids == {"1": "kafka_b", "orders_src": "kafka_c"}
    assert TASKS[kind]().hook.source_kafka_conn_ids == {}  # none: one cluster


@pytest.mark.parametrize("bad", ["kafka_b", {"1": ""}, ["1", "kafka_b"]])
def test_a_mapping_that_cannot_be_read_fails_naming_it(bad: Any) -> None:
    task = rendered(TASKS["check"], bad)
    with pytest.raises(AirflowFailException, match="invalid parameter source_kafka_conn_ids"):
        _ = task.hook


def test_snapshots_and_migrations_take_a_mapping() -> None:
    # Each Kafka source is snapshotted, validated and exported on its own cluster.
    for task in (
        CheckpointSnapshotOperator(
            task_id="t", location="/ck", snapshot_root="/s", source_kafka_conn_ids=M
        ),
        ConsumerGroupExportOperator(
            task_id="t", location="/ck", consumer_group="g", source_kafka_conn_ids=M
        ),
        CheckpointMigrationOperator(
            task_id="t", location="/ck", archive_root="/a", source_kafka_conn_ids=M
        ),
    ):
        assert task.hook.source_kafka_conn_ids == {"1": "kafka_b"}


M = {"1": "kafka_b"}


@pytest.mark.parametrize("kind", ["health", "catch_up"])
def test_the_trigger_carries_the_mapping_to_the_triggerers_hook(kind: str) -> None:
    task = rendered(TASKS[kind], {"1": "kafka_b"})
    _ = task._condition
    trigger = task._trigger(time.time() + 60)
    assert isinstance(trigger, (SparkLagTrigger, SparkKafkaCatchUpTrigger))
    classpath, kwargs = trigger.serialize()
    assert kwargs["connections"]["source_kafka_conn_ids"] == {"1": "kafka_b"}
    rebuilt = type(trigger)(**json.loads(json.dumps(kwargs)))
    assert rebuilt.serialize() == (classpath, kwargs)
    assert rebuilt._hook().source_kafka_conn_ids == {"1": "kafka_b"}
    # Without a mapping the kwargs say so plainly.
    plain = TASKS[kind]()
    _ = plain._condition
    assert (
        plain._trigger(time.time() + 60).serialize()[1]["connections"]["source_kafka_conn_ids"]
        is None
    )
