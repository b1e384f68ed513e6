"""Snapshot, consumer-group export and migration refusals against real Kafka, S3 and Spark.

Each test makes a real checkpoint with one availableNow PySpark run, then changes Kafka
(delete-records, added partitions, deleted topic) or crashes the migration at a step.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from airflow_sparklag.consumer_group import export_offsets
from airflow_sparklag.errors import ConsumerGroupActive, DataLossRefused, TopicGone
from airflow_sparklag.migration import migrate_checkpoint
from airflow_sparklag.snapshot import load_snapshot, snapshot_checkpoint
from airflow_sparklag.storage import StorageOptions, open_storage
from testbed import jobs
from testbed.paths import classpath

pytestmark = pytest.mark.testbed


def _checkpoint(spark, kafka, topic: str, location: str) -> None:
    df = jobs.select_value(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]))
    jobs.run_available_now(df, location)


def _config(kafka) -> dict:
    return {"bootstrap.servers": kafka.bootstrap}


def test_snapshot_written_verified_and_exported_to_a_consumer_group(spark, kafka, topic, tmp_path):
    kafka.produce(topic, 60)
    location = str(tmp_path / "ck")
    _checkpoint(spark, kafka, topic, location)
    kafka.produce(topic, 15, start=60)  # lag the group tools must show

    result = snapshot_checkpoint(location, str(tmp_path / "snaps"), kafka_config=_config(kafka))
    assert result.path is not None and result.path.endswith(".json")
    stored = load_snapshot(open_storage(result.path), result.path)
    assert stored == result.snapshot and stored.kafka_cluster_id
    committed = stored.starting_offsets()[topic]
    assert sum(committed.values()) == 60 and len(committed) == 3
    assert set(stored.starting_offsets_by_timestamp()[topic]) == {"0", "1", "2"}

    group = f"spark-{topic}"
    ends = kafka.end_offsets(topic)
    export = export_offsets(
        _config(kafka),
        group,
        {topic: {int(p): o for p, o in committed.items()}},
        log_ends={topic: ends},
    )
    assert export.to_dict()["total_lag"] == 15

    described = subprocess.run(
        [
            "java",
            "-cp",
            classpath("kafka"),
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            "--bootstrap-server",
            kafka.bootstrap,
            "--describe",
            "--group",
            group,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert described.returncode == 0, described.stderr[-2000:]
    rows = [line.split() for line in described.stdout.splitlines() if line.strip()]
    header = next(r for r in rows if "LAG" in r)
    lag_by_partition = {
        int(r[header.index("PARTITION")]): int(r[header.index("LAG")])
        for r in rows
        if r and r[0] == group and len(r) >= len(header) - 3
    }
    assert lag_by_partition == export.lag[topic]


def test_export_refuses_a_group_with_active_members(kafka, topic):
    from confluent_kafka import Consumer

    kafka.produce(topic, 3)
    group = f"live-{topic}"
    consumer = Consumer(
        {"bootstrap.servers": kafka.bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        jobs.wait_until(
            lambda: consumer.poll(0.5) is not None or bool(consumer.assignment()),
            30,
            "consumer joined",
        )
        with pytest.raises(ConsumerGroupActive, match="active member"):
            export_offsets(_config(kafka), group, {topic: {0: 0}})
    finally:
        consumer.close()


def test_data_loss_refused_then_accepted(spark, kafka, topic, tmp_path):
    kafka.produce(topic, 60)
    location = str(tmp_path / "ck")
    _checkpoint(spark, kafka, topic, location)
    kafka.produce(topic, 30, start=60)
    ends = kafka.end_offsets(topic)
    jobs.delete_records(kafka.admin(), topic, ends)  # everything, incl. 30 never read
    archive = str(tmp_path / "archive")
    with pytest.raises(DataLossRefused, match="records") as refused:
        migrate_checkpoint(location, archive, kafka_config=_config(kafka), quiet_period=0)
    assert "allow_data_loss" in str(refused.value)
    assert Path(location, "offsets").exists()  # nothing moved

    result = migrate_checkpoint(
        location, archive, kafka_config=_config(kafka), quiet_period=0, allow_data_loss=True
    )
    assert result.status == "completed"
    assert sum(result.records_lost[topic].values()) == 30
    # The loss is accepted: the new query starts at the log start.
    assert result.starting_offsets["0"][topic] == {str(p): o for p, o in ends.items()}
    assert not Path(location).exists()


def test_partitions_added_start_from_earliest_and_topic_deleted_refused(
    spark, kafka, topic, tmp_path
):
    kafka.produce(topic, 30)
    location = str(tmp_path / "ck")
    _checkpoint(spark, kafka, topic, location)
    kafka.add_partitions(topic, 5)

    def leaders_elected() -> bool:
        try:
            return len(kafka.end_offsets(topic)) == 5
        except Exception:  # NOT_LEADER_FOR_PARTITION until the new partitions have leaders
            return False

    jobs.wait_until(leaders_elected, 30, "new partitions have leaders")
    archive = str(tmp_path / "archive")
    plan = migrate_checkpoint(
        location, archive, kafka_config=_config(kafka), quiet_period=0, dry_run=True
    )
    assert plan.status == "planned" and plan.refusals == []
    assert plan.partitions_added == {topic: [3, 4]}
    starting = json.loads(plan.starting_offsets_json())[topic]
    assert starting["3"] == starting["4"] == -2 and len(starting) == 5
    assert Path(location, "offsets").exists() and not Path(archive).exists()

    futures = kafka.admin().delete_topics([topic], operation_timeout=20)
    futures[topic].result(timeout=30)
    jobs.wait_until(
        lambda: topic not in kafka.admin().list_topics(timeout=5).topics, 30, "topic deleted"
    )
    with pytest.raises(TopicGone, match="no longer exists"):
        migrate_checkpoint(location, archive, kafka_config=_config(kafka), quiet_period=0)
    assert Path(location, "offsets").exists()


class InjectedCrash(Exception):
    pass


def test_crash_at_each_step_then_rerun_completes_on_s3(spark, kafka, topic, s3):
    kafka.produce(topic, 45)
    prefix = f"s3a://checkpoints/mig-{uuid.uuid4().hex[:8]}"
    location = f"{prefix}/ck"
    _checkpoint(spark, kafka, topic, location)
    client = s3.client()
    key = location.split("/", 3)[3]

    def keys(under: str) -> list[str]:
        listed = client.list_objects_v2(Bucket="checkpoints", Prefix=under + "/")
        return sorted(o["Key"] for o in listed.get("Contents", []))

    original = {
        k[len(key) :]: client.get_object(Bucket="checkpoints", Key=k)["Body"].read()
        for k in keys(key)
    }
    assert original

    def crash_at(step: str):
        def hook(current: str) -> None:
            if current == step:
                raise InjectedCrash(step)

        return hook

    kwargs = {
        "kafka_config": _config(kafka),
        "s3_options": s3.options,
        "quiet_period": 0,
    }
    archive = f"{prefix}/archive"
    store = open_storage(archive, StorageOptions(s3=s3.options))
    for step in ("snapshot", "validated", "archive:copied", "archive:deleted-one"):
        with pytest.raises(InjectedCrash):
            migrate_checkpoint(location, archive, fault=crash_at(step), **kwargs)
        journals = [k for k in keys(archive.split("/", 3)[3]) if k.endswith("journal.json")]
        assert len(journals) == 1
        journal = json.loads(store.read(f"s3a://checkpoints/{journals[0]}"))
        # The snapshot is verified before anything is archived, and the checkpoint is whole
        # until every copy is verified.
        snapshot_at = journal["steps"]["snapshot"]["path"]
        load_snapshot(store, snapshot_at)
        remaining = keys(key)
        if step == "archive:deleted-one":
            assert journal["last_step"] == "archiving"
            assert 0 < len(remaining) < len(original)
        else:
            assert len(remaining) == len(original)

    result = migrate_checkpoint(location, archive, **kwargs)
    assert result.status == "completed" and keys(key) == []
    archived_key = result.archive_location.split("/", 3)[3]
    archived = {
        k[len(archived_key) :]: client.get_object(Bucket="checkpoints", Key=k)["Body"].read()
        for k in keys(archived_key)
    }
    assert archived == original
    assert sum(result.starting_offsets["0"][topic].values()) == 45

    again = migrate_checkpoint(location, archive, **kwargs)
    assert again.status == "already-completed"
    assert again.starting_offsets == result.starting_offsets


def test_migration_on_hdfs_renames_and_resumes_after_a_crash(spark, kafka, topic, hdfs):
    kafka.produce(topic, 30)
    path = f"/mig-{uuid.uuid4().hex[:8]}"
    location = f"{hdfs.namenode_uri}{path}/ck"
    _checkpoint(spark, kafka, topic, location)
    before = hdfs.list_names(f"{path}/ck")
    kwargs = {
        "kafka_config": _config(kafka),
        "webhdfs_options": {"url": hdfs.webhdfs_url, "user": "root"},
        "quiet_period": 0,
    }
    archive = f"{hdfs.namenode_uri}{path}/archive"

    def crash_after_rename(step: str) -> None:
        if step == "archive:renamed":
            raise InjectedCrash(step)

    with pytest.raises(InjectedCrash):
        migrate_checkpoint(location, archive, fault=crash_after_rename, **kwargs)
    assert hdfs.list_names(path) == ["archive"]  # renamed, not yet verified
    result = migrate_checkpoint(location, archive, **kwargs)
    assert result.status == "completed"
    assert [a["method"] for a in result.archives] == ["resumed"]
    archived = result.archive_location.split(hdfs.namenode_uri, 1)[1]
    assert hdfs.list_names(archived) == before
    assert sum(result.starting_offsets["0"][topic].values()) == 30
