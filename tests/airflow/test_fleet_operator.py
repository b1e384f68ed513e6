"""SparkLagFleetCheckOperator on real checkpoints (written by real Spark queries) and Kafka."""

from __future__ import annotations

import shutil
from typing import Any

import jsonschema
import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_sparklag.operators.fleet import SparkLagFleetCheckOperator
from tests.airflow.test_sensors_operators import SCHEMA

pytestmark = pytest.mark.testbed

PER_PARTITION_5 = {"max_lag_records_per_partition": 5}


class XComRecorder:
    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def _context() -> dict[str, Any]:
    return {"ti": XComRecorder()}


def test_fails_naming_the_failing_jobs(kafka_conn, healthy_job, lagging_job, tmp_path):
    missing = str(tmp_path / "never-ran")
    op = SparkLagFleetCheckOperator(
        task_id="fleet",
        locations=[healthy_job.location, lagging_job.location, missing],
        kafka_config_id=kafka_conn,
        thresholds=PER_PARTITION_5,
    )
    ctx = _context()
    with pytest.raises(AirflowFailException) as failure:
        op.execute(ctx)
    message = str(failure.value)
    assert message.startswith("2 of 3 jobs failing (at most 0 allowed)")
    assert f"{lagging_job.location}: LAGGING" in message
    assert f"{missing}: CHECK_FAILED (CheckpointNotFound" in message
    payload = ctx["ti"].pushed["return_value"]
    jsonschema.validate(payload, SCHEMA)  # the one document of docs/json.md
    assert payload["summary"]["jobs"] == 3
    assert payload["summary"]["health"] == {"CHECK_FAILED": 1, "LAGGING": 1, "OK": 1}
    failing = {f["location"]: f for f in payload["failing"]}
    assert set(failing) == {lagging_job.location, missing}
    assert failing[lagging_job.location]["total_lag"] == 45
    assert failing[missing]["error"].startswith("CheckpointNotFound")
    assert failing[missing]["health"] == "CHECK_FAILED"
    assert payload["results"] == []


def test_max_failing_fail_on_and_xcom_detail(kafka_conn, healthy_job, lagging_job, tmp_path):
    common = {
        "task_id": "fleet",
        "locations": [healthy_job.location, lagging_job.location],
        "kafka_config_id": kafka_conn,
        "thresholds": PER_PARTITION_5,
    }
    payload = SparkLagFleetCheckOperator(**common, max_failing=1).execute(_context())
    assert [f["location"] for f in payload["failing"]] == [lagging_job.location]
    everything = SparkLagFleetCheckOperator(
        **common, fail_on=["DATA_LOSS"], xcom_results="all"
    ).execute(_context())
    assert everything["failing"] == []
    by_location = {r["report"]["location"]: r for r in everything["results"]}
    assert by_location[lagging_job.location]["report"]["total_lag"] == 45
    assert by_location[healthy_job.location]["verdict"]["health"] == "OK"
    jsonschema.validate(everything, SCHEMA)
    document = SparkLagFleetCheckOperator(**common, max_failing=5, xcom_results="summary").execute(
        _context()
    )
    jsonschema.validate(document, SCHEMA)
    summary = document["summary"]
    assert summary == {
        "jobs": 2,
        "health": {"LAGGING": 1, "OK": 1},
        "total_lag": 45,
        "max_lag_seconds": summary["max_lag_seconds"],
        "failed_checks": 0,
        "storage_requests": summary["storage_requests"],
    }
    assert document["results"] == [] and "failing" not in document
    # local disk, no metadata read: LIST commits/, LIST offsets/, GET offsets/C + history GETs
    assert 2 * 3 <= summary["storage_requests"] <= 2 * (3 + 9)
    with pytest.raises(ValueError, match="xcom_results"):
        SparkLagFleetCheckOperator(task_id="x", locations=["/a"], xcom_results="everything")


def test_discovers_checkpoints_under_a_prefix(kafka_conn, healthy_job, lagging_job, tmp_path):
    fleet = tmp_path / "fleet"
    # Copies of the Spark-written checkpoints, so that the prefix holds exactly these two.
    shutil.copytree(healthy_job.location, fleet / "team-a" / "orders")
    shutil.copytree(lagging_job.location, fleet / "team-b" / "x" / "clicks")
    (fleet / "team-b" / "not-a-checkpoint").mkdir()
    # A day's commit age decides STOPPED: past STOPPED_MIN_IDLE_SECONDS the one-batch lagging
    # job would otherwise be UNKNOWN (too short a history to judge), whenever this runs.
    op = SparkLagFleetCheckOperator(
        task_id="fleet",
        prefix=str(fleet),
        kafka_config_id=kafka_conn,
        max_failing=10,
        thresholds={"max_commit_age_seconds": 86400},
    )
    payload = op.execute(_context())["summary"]
    assert payload["jobs"] == 2
    assert payload["health"] == {"OK": 2}  # no lag thresholds: 15 records per partition is fine
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AirflowFailException, match="no checkpoint found under"):
        SparkLagFleetCheckOperator(
            task_id="fleet", prefix=str(empty), kafka_config_id=kafka_conn
        ).execute(_context())


def test_templated_locations_and_prefix() -> None:
    import datetime

    from airflow.sdk import DAG

    with DAG("fleet_templating", schedule=None) as dag:
        op = SparkLagFleetCheckOperator(
            task_id="f",
            locations=["{{ params.root }}/a", "{{ params.root }}/b"],
            prefix="{{ params.root }}/more",
            thresholds={"max_lag_seconds": "{{ params.limit }}"},
            fail_on=["{{ params.bad }}"],
        )
    ctx = {
        "params": {"root": "s3a://lake/ck", "limit": 60, "bad": "STOPPED"},
        "data_interval_end": datetime.datetime(2024, 5, 1, tzinfo=datetime.timezone.utc),
    }
    for task in dag.tasks:
        task.render_template_fields(ctx)
    assert op.locations == ["s3a://lake/ck/a", "s3a://lake/ck/b"]
    assert op.prefix == "s3a://lake/ck/more"
    assert op.thresholds == {"max_lag_seconds": "60"}
    assert op.fail_on == ["STOPPED"]


def test_no_locations_is_a_clear_failure() -> None:
    with pytest.raises(AirflowFailException, match="give locations and/or a prefix"):
        SparkLagFleetCheckOperator(task_id="f").execute(_context())


def test_registered_in_provider_info() -> None:
    from airflow_sparklag.airflow.provider_info import get_provider_info

    modules = [m for entry in get_provider_info()["operators"] for m in entry["python-modules"]]
    assert "airflow_sparklag.operators.fleet" in modules
