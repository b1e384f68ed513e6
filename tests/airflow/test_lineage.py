"""OpenLineage: every operator and sensor reports the checkpoint and the Kafka topics it read;
snapshots and migrations what they wrote (airflow_sparklag/operators/lineage.py).

Real operators on real checkpoints (Kafka + Spark of the test bed), the method called as the
OpenLineage provider calls it; one ``airflow dags test`` run with the provider's file transport
shows the events a lineage backend receives.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.openlineage.facet import Dataset
from airflow.providers.common.compat.sdk import AirflowException

from airflow_sparklag.operators.fleet import SparkLagFleetCheckOperator
from airflow_sparklag.operators.lineage import kafka_namespace, storage_dataset
from airflow_sparklag.operators.snapshot import CheckpointSnapshotOperator
from airflow_sparklag.operators.sparklag import SparkLagCheckOperator
from airflow_sparklag.sensors.sparklag import SparkLagSensor
from tests.airflow.conftest import airflow_env
from tests.airflow.test_dags import dags_test, run_state
from tests.airflow.test_sensors_operators import context


@pytest.mark.parametrize(
    ("location", "dataset"),
    [
        ("s3a://lake/ck/orders", ("s3://lake", "ck/orders")),
        ("s3://lake/ck/orders", ("s3://lake", "ck/orders")),
        ("s3a://KEY:SECRET@lake/ck", ("s3://lake", "ck")),  # never a credential
        ("hdfs://nn:8020/ck/orders", ("hdfs://nn:8020", "/ck/orders")),
        ("hdfs://user:pw@nn:8020/ck", ("hdfs://nn:8020", "/ck")),
        ("/data/ck/orders", ("file", "/data/ck/orders")),
        ("file:///data/ck/orders", ("file", "/data/ck/orders")),
        ("gs://bucket/ck/orders", ("gs://bucket", "ck/orders")),
        (
            "abfss://ck@acct.dfs.core.windows.net/jobs/orders",
            ("abfss://ck@acct.dfs.core.windows.net", "jobs/orders"),
        ),
    ],
)
def test_storage_locations_as_openlineage_datasets(location, dataset):
    assert storage_dataset(location) == dataset


def test_kafka_namespace_is_the_first_bootstrap_server():
    assert kafka_namespace("b1:9092,b2:9092") == "kafka://b1:9092"
    assert kafka_namespace("SASL_SSL://b1:9093") == "kafka://b1:9093"


def lineage(task: Any) -> tuple[list[Dataset], list[Dataset]]:
    found = task.get_openlineage_facets_on_complete(None)
    return found.inputs, found.outputs


def checkpoint(location: str) -> Dataset:
    return Dataset(namespace="file", name=location)


@pytest.mark.testbed
def test_check_operator_reports_its_checkpoint_and_topic(kafka, kafka_conn, lagging_job):
    task = SparkLagCheckOperator(
        task_id="c", location=lagging_job.location, kafka_config_id=kafka_conn, fail_on=[]
    )
    task.execute(context())
    topic = Dataset(namespace=f"kafka://{kafka.bootstrap}", name=lagging_job.topic)
    assert lineage(task) == ([checkpoint(lagging_job.location), topic], [])


@pytest.mark.testbed
def test_a_failed_check_still_reports_the_checkpoint_it_tried(kafka_conn, tmp_path):
    missing = str(tmp_path / "never-written")
    task = SparkLagCheckOperator(task_id="c", location=missing, kafka_config_id=kafka_conn)
    with pytest.raises(AirflowException, match="CheckpointNotFound"):
        task.execute(context())
    assert lineage(task) == ([checkpoint(missing)], [])


@pytest.mark.testbed
def test_fleet_sensor_and_snapshot_lineage(kafka, kafka_conn, lagging_job, healthy_job, tmp_path):
    namespace = f"kafka://{kafka.bootstrap}"
    fleet = SparkLagFleetCheckOperator(
        task_id="f",
        locations=[healthy_job.location, lagging_job.location],
        kafka_config_id=kafka_conn,
        fail_on=[],
    )
    fleet.execute(context())
    inputs, _ = lineage(fleet)
    assert sorted((d.namespace, d.name) for d in inputs) == sorted(
        [
            ("file", healthy_job.location),
            ("file", lagging_job.location),
            (namespace, healthy_job.topic),
            (namespace, lagging_job.topic),
        ]
    )

    # poke mode: the sensor's hook is still open when OpenLineage asks
    sensor = SparkLagSensor(
        task_id="s", location=healthy_job.location, kafka_config_id=kafka_conn, deferrable=False
    )
    sensor.execute(context())
    assert lineage(sensor)[0] == [
        checkpoint(healthy_job.location),
        Dataset(namespace=namespace, name=healthy_job.topic),
    ]

    snapshot = CheckpointSnapshotOperator(
        task_id="snap",
        location=healthy_job.location,
        snapshot_root=str(tmp_path / "snapshots"),
        kafka_config_id=kafka_conn,
    )
    written = snapshot.execute(context())["results"][0]["path"]
    inputs, outputs = lineage(snapshot)
    assert inputs[0] == checkpoint(healthy_job.location)
    assert outputs == [checkpoint(written)]


DAG_FILE = """
from datetime import datetime
from airflow.sdk import DAG
from airflow_sparklag.operators.snapshot import CheckpointSnapshotOperator
from airflow_sparklag.operators.sparklag import SparkLagCheckOperator

with DAG("sparklag_lineage", start_date=datetime(2026, 1, 1), schedule=None):
    SparkLagCheckOperator(task_id="check", location={location!r}, kafka_config_id={conn!r}) >> (
        CheckpointSnapshotOperator(
            task_id="snapshot", location={location!r}, snapshot_root={root!r},
            kafka_config_id={conn!r},
        )
    )
    SparkLagCheckOperator(task_id="missing", location={missing!r}, kafka_config_id={conn!r})
"""


@pytest.mark.testbed
def test_openlineage_events_of_a_real_dag_run(airflow_db, kafka, kafka_conn, healthy_job, tmp_path):
    """The OpenLineage provider's file transport, in a real ``airflow dags test`` run."""
    dags = tmp_path / "dags"
    dags.mkdir()
    root, missing = str(tmp_path / "snapshots"), tmp_path / "never-written"
    (dags / "lineage_dag.py").write_text(
        DAG_FILE.format(
            location=healthy_job.location, conn=kafka_conn, root=root, missing=str(missing)
        )
    )
    events_file = tmp_path / "events.jsonl"
    env = airflow_env(tmp_path)
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    env["AIRFLOW__OPENLINEAGE__TRANSPORT"] = json.dumps(
        {"type": "file", "log_file_path": str(events_file), "append": True}
    )
    env["AIRFLOW__OPENLINEAGE__NAMESPACE"] = "sparklag-test"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    output = dags_test("sparklag_lineage", {}, env, timeout=300)
    assert run_state(output) == "failed", output[-4000:]  # the "missing" task
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line]
    done = {
        e["job"]["name"].rsplit(".", 1)[-1]: e
        for e in events
        if e["eventType"] in ("COMPLETE", "FAIL") and "." in e["job"]["name"]
    }
    assert set(done) == {"check", "snapshot", "missing"}, [e["job"]["name"] for e in events]
    # a failed check still reports the checkpoint it tried
    assert done["missing"]["eventType"] == "FAIL"
    assert done["missing"]["inputs"][0]["name"] == str(missing)
    topic = {"namespace": f"kafka://{kafka.bootstrap}", "name": healthy_job.topic}
    ck = {"namespace": "file", "name": healthy_job.location}
    for task in ("check", "snapshot"):
        read = [{"namespace": d["namespace"], "name": d["name"]} for d in done[task]["inputs"]]
        assert read == [ck, topic], done[task]["inputs"]
    (written,) = done["snapshot"]["outputs"]
    assert written["namespace"] == "file" and written["name"].startswith(root)
    assert "password" not in events_file.read_text().lower()
