"""The Airflow operators and the CLI over the snapshot/migration core, on a real S3 checkpoint.

Connections are AIRFLOW_CONN_* environment variables, as a deployment would set them.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from airflow_sparklag.cli import main
from testbed import jobs

pytestmark = pytest.mark.testbed

KAFKA_ID, AWS_ID = "snap_kafka", "snap_aws"


@pytest.fixture
def connections(kafka, s3, monkeypatch):
    options = s3.options
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{KAFKA_ID.upper()}",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka.bootstrap}}),
    )
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{AWS_ID.upper()}",
        json.dumps(
            {
                "conn_type": "aws",
                "login": options["aws_access_key_id"],
                "password": options["aws_secret_access_key"],
                "extra": {"endpoint_url": options["endpoint_url"], "region_name": "us-east-1"},
            }
        ),
    )
    return {"kafka_config_id": KAFKA_ID, "aws_conn_id": AWS_ID}


def test_snapshot_export_and_migration_operators_on_s3(spark, kafka, topic, s3, connections):
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_sparklag.operators.snapshot import (
        CheckpointMigrationOperator,
        CheckpointSnapshotOperator,
        ConsumerGroupExportOperator,
    )

    kafka.produce(topic, 40)
    base = f"s3a://checkpoints/ops-{uuid.uuid4().hex[:8]}"
    location = f"{base}/ck"
    df = jobs.select_value(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]))
    jobs.run_available_now(df, location)
    kafka.produce(topic, 5, start=40)

    snap = CheckpointSnapshotOperator(
        task_id="snap",
        location=location,
        snapshot_root=f"{base}/snapshots",
        consumer_group=f"spark-{topic}",
        **connections,
    ).execute({})["results"][0]
    assert (
        snap["path"].startswith(f"{base}/snapshots/") and snap["consumer_group"]["total_lag"] == 5
    )
    assert sum(snap["starting_offsets"]["0"][topic].values()) == 40

    export = ConsumerGroupExportOperator(
        task_id="export", location=location, consumer_group=f"spark-{topic}", **connections
    ).execute({})["results"][0]
    assert export["total_lag"] == 5 and export["committed_batch_id"] == snap["committed_batch_id"]

    with pytest.raises(AirflowFailException, match="JobStillRunning"):
        CheckpointMigrationOperator(
            task_id="migrate",
            location=location,
            archive_root=f"{base}/archive",
            **connections,
        ).execute({})
    result = CheckpointMigrationOperator(
        task_id="migrate",
        location=location,
        archive_root=f"{base}/archive",
        snapshot=snap["path"],
        quiet_period=0,
        **connections,
    ).execute({})["results"][0]
    assert result["status"] == "completed" and result["snapshot_path"] == snap["path"]
    assert json.loads(result["starting_offsets_json"]) == snap["starting_offsets"]["0"]
    text = json.dumps([snap, export, result])
    assert s3.options["aws_secret_access_key"] not in text


def test_cli_snapshot_and_migrate_dry_run(spark, kafka, topic, tmp_path, capsys):
    kafka.produce(topic, 25)
    location = str(tmp_path / "ck")
    df = jobs.select_value(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]))
    jobs.run_available_now(df, location)
    servers = ["--bootstrap-servers", kafka.bootstrap]

    assert (
        main(["snapshot", location, "--snapshot-root", str(tmp_path / "snaps"), "--json", *servers])
        == 0
    )
    (written,) = json.loads(capsys.readouterr().out)["results"]
    assert os.path.exists(written["path"])

    archive = str(tmp_path / "archive")
    # Just stopped: refused by the quiet period; the dry run says so and changes nothing.
    assert main(["migrate", location, "--archive-root", archive, "--dry-run", *servers]) == 5
    assert "REFUSED     JobStillRunning" in capsys.readouterr().out
    code = main(
        ["migrate", location, "--archive-root", archive, "--quiet-period", "0", "--json", *servers]
    )
    assert code == 0
    (done,) = json.loads(capsys.readouterr().out)["results"]
    assert done["status"] == "completed" and not os.path.exists(location)
    assert sum(done["starting_offsets"]["0"][topic].values()) == 25
