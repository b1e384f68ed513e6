"""Triggers: serialization round trip, and real runs against checkpoints and Kafka."""

from __future__ import annotations

import asyncio
import importlib
import json
import time

import pytest

from airflow_sparklag.triggers.sparklag import (
    SparkCheckpointProgressTrigger,
    SparkKafkaCatchUpTrigger,
    SparkLagTrigger,
)

COMMON = {
    "kafka_config_id": "kafka_x",
    "aws_conn_id": "aws_x",
    "webhdfs_conn_id": None,
    "poll_interval": 5.0,
    "deadline": 1_900_000_000.0,
}


@pytest.mark.parametrize(
    "trigger",
    [
        SparkLagTrigger(
            "s3a://b/ck", thresholds={"max_lag_seconds": 60}, accept=["OK", "LAGGING"], **COMMON
        ),
        SparkCheckpointProgressTrigger("/ck", after_batch_id=7, after_commit_time=1.5, **COMMON),
        SparkKafkaCatchUpTrigger("/ck", target_time_ms=1_700_000_000_000, topics=["t"], **COMMON),
    ],
    ids=["lag", "progress", "catch_up"],
)
@pytest.mark.airflow_compat
def test_serialize_round_trip(trigger):
    classpath, kwargs = trigger.serialize()
    json.dumps(kwargs)  # the triggerer stores them as JSON
    module, name = classpath.rsplit(".", 1)
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert type(rebuilt) is type(trigger)
    assert rebuilt.serialize() == (classpath, kwargs)


async def _events(trigger, limit: float = 60.0) -> list[dict]:
    events = []

    async def collect():
        async for event in trigger.run():
            events.append(event.payload)

    await asyncio.wait_for(collect(), limit)
    return events


def run(trigger, limit: float = 60.0) -> dict:
    (event,) = asyncio.run(_events(trigger, limit))
    json.dumps(event)
    return event


@pytest.mark.testbed
@pytest.mark.airflow_compat
def test_lag_trigger_fires_on_a_healthy_query(kafka_conn, healthy_job):
    event = run(SparkLagTrigger(healthy_job.location, kafka_config_id=kafka_conn))
    assert event["status"] == "success", event
    assert event["payload"]["results"][0]["verdict"]["health"] == "OK"


@pytest.mark.testbed
def test_lag_trigger_reports_data_loss_as_failed(kafka_conn, data_loss_job):
    event = run(SparkLagTrigger(data_loss_job.location, kafka_config_id=kafka_conn))
    assert event["status"] == "failed"
    assert "DATA_LOSS" in event["message"]


@pytest.mark.testbed
def test_lag_trigger_polls_until_its_deadline(kafka_conn, lagging_job):
    started = time.monotonic()
    event = run(
        SparkLagTrigger(
            lagging_job.location,
            kafka_config_id=kafka_conn,
            thresholds={"max_lag_records_total": 10},
            poll_interval=1,
            deadline=time.time() + 2.5,
        )
    )
    assert event["status"] == "timeout"
    assert "LAGGING" in event["message"]
    assert 1 <= time.monotonic() - started < 30


@pytest.mark.testbed
@pytest.mark.airflow_compat
def test_progress_trigger(kafka_conn, lagging_job):
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    batch = SparkLagHook(kafka_conn).committed_offsets(lagging_job.location)["committed_batch_id"]
    done = run(
        SparkCheckpointProgressTrigger(
            lagging_job.location, kafka_config_id=kafka_conn, after_batch_id=batch - 1
        )
    )
    assert done["status"] == "success"
    assert done["payload"]["results"][0]["committed_batch_id"] == batch
    waiting = run(
        SparkCheckpointProgressTrigger(
            lagging_job.location,
            kafka_config_id=kafka_conn,
            after_batch_id=batch,
            poll_interval=0.5,
            deadline=time.time() + 1,
        )
    )
    assert waiting["status"] == "timeout"


@pytest.mark.testbed
def test_catch_up_trigger(kafka_conn, lagging_job):
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    recorded = SparkLagHook(kafka_conn).committed_offsets(lagging_job.location)
    event = run(
        SparkKafkaCatchUpTrigger(
            lagging_job.location,
            kafka_config_id=kafka_conn,
            target_time_ms=recorded["committed_at_ms"],
        )
    )
    assert event["status"] == "success", event
    assert event["payload"]["results"][0]["records_behind"] == 0


@pytest.mark.testbed
def test_errors_become_error_events(kafka_conn, tmp_path):
    event = run(SparkLagTrigger(str(tmp_path / "nothing-here"), kafka_config_id=kafka_conn))
    assert event["status"] == "error"
    assert "CheckpointNotFound" in event["message"]
    missing_conn = run(SparkLagTrigger(str(tmp_path), kafka_config_id="no_such_connection"))
    assert missing_conn["status"] == "error"
    assert "no_such_connection" in missing_conn["message"]
