"""Sensors and operators on real checkpoints: poke, deferral round trip, failures, templating.

Tasks are executed directly with a small context; the whole-DAG runs in ``test_dags.py`` cover
the same classes inside Airflow's own task runner.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import socket
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from airflow.providers.common.compat.sdk import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)

from airflow_sparklag.operators.sparklag import SparkLagBranchOperator, SparkLagCheckOperator
from airflow_sparklag.sensors.sparklag import (
    SparkCheckpointProgressSensor,
    SparkKafkaCatchUpSensor,
    SparkLagSensor,
)
from airflow_sparklag.triggers.sparklag import (
    SparkCheckpointProgressTrigger,
    SparkKafkaCatchUpTrigger,
    SparkLagTrigger,
)
from tests.airflow.conftest import conn_env, kafka_connection

pytestmark = pytest.mark.testbed


class XComRecorder:
    """Stands in for the task instance in ``context["ti"]``: keeps what the task pushes."""

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def context() -> dict[str, Any]:
    return {"ti": XComRecorder()}


SCHEMA = json.loads((Path(__file__).parents[2] / "docs/schema/sparklag-1.json").read_text())


def only(document: Any) -> dict[str, Any]:
    """The one result of a task's XCom document, checked against the published JSON Schema."""
    jsonschema.validate(document, SCHEMA)
    (result,) = document["results"]
    assert document["summary"]["jobs"] == 1
    return result


def run_deferred(sensor, ctx) -> Any:
    """execute() -> TaskDeferred -> trigger.run() -> execute_complete(event), like the runner."""
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(ctx)
    assert deferred.value.method_name == "execute_complete"

    async def first_event():
        async for event in deferred.value.trigger.run():
            return event.payload

    event = asyncio.run(asyncio.wait_for(first_event(), 60))
    return deferred.value.trigger, sensor.execute_complete(ctx, event)


# -- SparkLagSensor ----------------------------------------------------------------------------


def test_lag_sensor_poke_mode_returns_the_report(kafka_conn, healthy_job):
    sensor = SparkLagSensor(
        task_id="s", location=healthy_job.location, kafka_config_id=kafka_conn, deferrable=False
    )
    payload = only(sensor.execute(context()))
    assert payload["verdict"]["health"] == "OK"
    assert payload["report"]["total_lag"] == 0


@pytest.mark.airflow_compat
def test_lag_sensor_deferrable_round_trip(kafka_conn, lagging_job):
    def lag_sensor(accept: list[str]) -> SparkLagSensor:
        return SparkLagSensor(
            task_id="s",
            location=lagging_job.location,
            kafka_config_id=kafka_conn,
            thresholds={"max_lag_records_total": 10},
            accept=accept,
            deferrable=True,
            poke_interval=1,
            timeout=2,
        )

    sensor = lag_sensor(["OK"])
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, SparkLagTrigger)
    kwargs = trigger.serialize()[1]
    assert kwargs["options"]["thresholds"]["max_lag_records_total"] == 10
    assert kwargs["accept"] == ["OK"]
    assert trigger.condition.options.thresholds.max_lag_records_total == 10
    assert SparkLagTrigger(**kwargs).condition == trigger.condition  # what the triggerer runs
    assert deferred.value.timeout == datetime.timedelta(seconds=2)
    # The lag does not go away: the trigger gives up at the deadline -> sensor timeout.
    with pytest.raises(AirflowSensorTimeout, match="LAGGING"):
        run_deferred(sensor, context())
    sensor.soft_fail = True
    with pytest.raises(AirflowSkipException):
        run_deferred(sensor, context())
    # Accepting LAGGING: done at once in the worker, no deferral. (A sensor reads its rendered
    # parameters into its condition once: a new task, as each try in Airflow is.)
    assert only(lag_sensor(["OK", "LAGGING"]).execute(context()))["verdict"]["health"] == "LAGGING"


def test_lag_sensor_fails_fast_on_data_loss(kafka_conn, data_loss_job):
    for deferrable in (False, True):
        sensor = SparkLagSensor(
            task_id="s",
            location=data_loss_job.location,
            kafka_config_id=kafka_conn,
            deferrable=deferrable,
            timeout=600,
        )
        with pytest.raises(AirflowFailException, match="DATA_LOSS"):
            sensor.execute(context())
        sensor.soft_fail = True
        with pytest.raises(AirflowSkipException):
            sensor.execute(context())


@pytest.mark.airflow_compat
def test_execute_complete_raises_on_error_events(kafka_conn):
    sensor = SparkLagSensor(task_id="s", location="/x", kafka_config_id=kafka_conn)
    with pytest.raises(Exception, match="CheckpointNotFound"):
        sensor.execute_complete(context(), {"status": "error", "message": "CheckpointNotFound: /x"})
    with pytest.raises(AirflowFailException):
        sensor.execute_complete(context(), {"status": "failed", "message": "DATA_LOSS"})


# -- progress and catch-up sensors ---------------------------------------------------------------


def test_progress_sensor(kafka_conn, lagging_job):
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    batch = SparkLagHook(kafka_conn).committed_offsets(lagging_job.location)["committed_batch_id"]
    poke = SparkCheckpointProgressSensor(
        task_id="p",
        location=lagging_job.location,
        kafka_config_id=kafka_conn,
        after_batch_id=str(batch - 1),  # rendered templates are text
        deferrable=False,
    )
    assert only(poke.execute(context()))["committed_batch_id"] == batch

    waiting = SparkCheckpointProgressSensor(
        task_id="p",
        location=lagging_job.location,
        kafka_config_id=kafka_conn,
        after_batch_id=batch,
        deferrable=True,
        poke_interval=0.5,
        timeout=1.5,
    )
    with pytest.raises(AirflowSensorTimeout):
        run_deferred(waiting, context())
    poke_timeout = SparkCheckpointProgressSensor(
        task_id="p",
        location=lagging_job.location,
        kafka_config_id=kafka_conn,
        after_commit_time="None",
        after_batch_id=batch,
        deferrable=False,
        poke_interval=0.2,
        timeout=0.5,
    )
    with pytest.raises(AirflowSensorTimeout):
        poke_timeout.execute(context())


def test_progress_sensor_defers_with_a_serializable_trigger(kafka_conn, tmp_path):
    sensor = SparkCheckpointProgressSensor(
        task_id="p",
        location=str(tmp_path / "not-started-yet"),
        kafka_config_id=kafka_conn,
        after_commit_time="2024-01-01T00:00:00+00:00",
        deferrable=True,
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context())
    trigger = deferred.value.trigger
    assert isinstance(trigger, SparkCheckpointProgressTrigger)
    assert trigger.serialize()[1]["after_commit_time"] == 1704067200.0
    assert trigger.condition.after_commit_time == 1704067200.0


def test_catch_up_sensor(kafka_conn, lagging_job):
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    recorded = SparkLagHook(kafka_conn).committed_offsets(lagging_job.location)
    committed_at = datetime.datetime.fromisoformat(recorded["committed_at"].replace("Z", "+00:00"))
    assert committed_at.timestamp() * 1000 == recorded["committed_at_ms"]
    done = SparkKafkaCatchUpSensor(
        task_id="c",
        location=lagging_job.location,
        kafka_config_id=kafka_conn,
        target_time=committed_at,
        deferrable=True,
    )
    assert only(done.execute(context()))["records_behind"] == 0
    behind = SparkKafkaCatchUpSensor(
        task_id="c",
        location=lagging_job.location,
        kafka_config_id=kafka_conn,
        target_time=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1),
        topics=[lagging_job.topic],
        deferrable=True,
        poke_interval=0.5,
        timeout=1.5,
    )
    with pytest.raises(TaskDeferred) as deferred:
        behind.execute(context())
    assert isinstance(deferred.value.trigger, SparkKafkaCatchUpTrigger)
    assert deferred.value.trigger.serialize()[1]["topics"] == [lagging_job.topic]
    assert deferred.value.trigger.condition.topics == (lagging_job.topic,)
    with pytest.raises(AirflowSensorTimeout, match="45 records"):
        run_deferred(behind, context())


# -- operators -----------------------------------------------------------------------------------


def test_check_operator_passes_and_emits_gauges(kafka_conn, healthy_job, monkeypatch):
    from airflow_sparklag.operators import metrics as operators

    gauges: dict[str, float] = {}

    class GaugeRecorder:
        @staticmethod
        def gauge(stat: str, value: float, *, tags: dict | None = None) -> None:
            gauges[stat] = value
            assert tags == {"job": "orders_lag"}  # the verdict is a value, never a tag

    monkeypatch.setattr(operators, "_stats", lambda: GaugeRecorder)
    op = SparkLagCheckOperator(
        task_id="orders-lag", location=healthy_job.location, kafka_config_id=kafka_conn
    )
    payload = only(op.execute(context()))
    assert payload["verdict"]["health"] == "OK"
    assert gauges["sparklag.orders_lag.lag_records"] == gauges["sparklag.orders_lag.total_lag"] == 0
    assert gauges["sparklag.orders_lag.health"] == 0
    # The real Stats object accepts the same calls (a no-op unless metrics are configured).
    monkeypatch.undo()
    assert only(op.execute(context()))["report"]["total_lag"] == 0


@pytest.mark.airflow_compat
def test_check_operator_fails_with_a_partition_summary(kafka_conn, lagging_job):
    op = SparkLagCheckOperator(
        task_id="orders_lag",
        location=lagging_job.location,
        kafka_config_id=kafka_conn,
        thresholds={"max_lag_records_per_partition": 5},
    )
    ctx = context()
    with pytest.raises(AirflowFailException) as failure:
        op.execute(ctx)
    message = str(failure.value)
    assert "LAGGING" in message
    for partition in range(3):
        assert f"{lagging_job.topic}[{partition}] lag=15" in message
    assert only(ctx["ti"].pushed["return_value"])["report"]["total_lag"] == 45
    # Not a breach when LAGGING is not in fail_on.
    op.fail_on = ["DATA_LOSS"]
    assert only(op.execute(context()))["verdict"]["health"] == "LAGGING"


def test_a_check_that_fails_leaves_check_failed_in_the_same_document(healthy_job, monkeypatch):
    """Kafka unreachable (a port nothing listens on): the task fails and its XCom is the
    document a check leaves, its one result CHECK_FAILED (before: a shape of its own)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv(conn_env("kafka_nowhere"), kafka_connection(f"127.0.0.1:{port}"))
    op = SparkLagCheckOperator(
        task_id="orders_lag", location=healthy_job.location, kafka_config_id="kafka_nowhere"
    )
    ctx = context()
    with pytest.raises(Exception, match="KafkaUnavailable"):
        op.execute(ctx)
    failed = only(ctx["ti"].pushed["return_value"])
    assert failed["verdict"]["health"] == "CHECK_FAILED" and "KafkaUnavailable" in failed["error"]
    assert ctx["ti"].pushed["return_value"]["summary"]["health"] == {"CHECK_FAILED": 1}


@pytest.mark.parametrize(
    ("thresholds", "expected"),
    # The commit age decides STOPPED: past STOPPED_MIN_IDLE_SECONDS the session's one-batch
    # job would otherwise be UNKNOWN (too short a history to judge), whenever this runs.
    [({"max_commit_age_seconds": 86400}, "deploy"), ({"max_lag_records_total": 10}, "wait")],
)
@pytest.mark.airflow_compat
def test_branch_operator(kafka_conn, lagging_job, thresholds, expected):
    op = SparkLagBranchOperator(
        task_id="decide",
        location=lagging_job.location,
        kafka_config_id=kafka_conn,
        thresholds=thresholds,
        healthy_task_id="deploy",
        lagging_task_id="wait",
        default_task_id="abort",
    )
    ctx = context()
    assert op.choose_branch(ctx) == expected
    assert only(ctx["ti"].pushed["report"])["location"] == lagging_job.location


def test_branch_operator_default_and_data_loss(kafka_conn, data_loss_job):
    op = SparkLagBranchOperator(
        task_id="decide",
        location=data_loss_job.location,
        kafka_config_id=kafka_conn,
        healthy_task_id="deploy",
        default_task_id=["abort", "page"],
    )
    assert op.choose_branch(context()) == ["abort", "page"]
    with pytest.raises(ValueError, match="task_id"):
        SparkLagBranchOperator(task_id="d", location="/x")


@pytest.mark.airflow_compat
def test_template_fields_render(tmp_path):
    from airflow.providers.common.compat.sdk import DAG

    with DAG("templating", schedule=None, params={"ck": "/data/ck"}) as dag:
        sensor = SparkLagSensor(
            task_id="s",
            location="{{ params.ck }}/orders",
            thresholds={"max_lag_seconds": "{{ params.limit }}"},
            accept=["{{ params.ok }}"],
        )
        progress = SparkCheckpointProgressSensor(
            task_id="p", location="{{ params.ck }}", after_batch_id="{{ params.batch }}"
        )
        catch_up = SparkKafkaCatchUpSensor(
            task_id="c", location="{{ params.ck }}", topics=["{{ params.topic }}"]
        )
        check = SparkLagCheckOperator(
            task_id="k", location="{{ params.ck }}", fail_on=["{{ params.bad }}"]
        )
    ctx = {
        "params": {"ck": "/data/ck", "limit": 60, "ok": "OK", "batch": 7, "topic": "t", "bad": "X"},
        "data_interval_end": datetime.datetime(2024, 5, 1, tzinfo=datetime.timezone.utc),
    }
    for task in dag.tasks:
        task.render_template_fields(ctx)
    assert sensor.location == "/data/ck/orders"
    assert sensor.thresholds == {"max_lag_seconds": "60"}
    assert sensor.accept == ["OK"]
    assert progress.after_batch_id == "7"
    assert catch_up.topics == ["t"]
    # the default: the data interval's end
    assert catch_up.condition().target_time_ms == 1714521600000
    assert check.fail_on == ["X"]
