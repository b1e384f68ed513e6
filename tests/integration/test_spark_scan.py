"""The PySpark fleet scan at local[2] on the test bed: real queries write their checkpoints to
S3 (moto, through s3a) and HDFS (MiniCluster); the scan reads them on executors."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag import spark_scan
from testbed import jobs

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def fleet(spark: Any, kafka: Any, s3: Any, hdfs: Any) -> dict[str, Any]:
    """Two real queries (one on S3, one on HDFS) on a 3-partition topic, then 12 more records."""
    topic = kafka.create_topic(f"scan-{uuid.uuid4().hex[:8]}", partitions=3)
    kafka.produce(topic, 30)
    run = uuid.uuid4().hex[:8]
    locations = {
        "s3": f"s3a://checkpoints/scan-{run}/team-a/orders",
        "hdfs": f"{hdfs.namenode_uri}/scan-{run}/orders",
    }
    for location in locations.values():
        stream = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
        jobs.run_available_now(jobs.select_value(stream), location)
    committed = kafka.end_offsets(topic)
    kafka.produce(topic, 12, start=30)
    return {
        "topic": topic,
        "run": run,
        "locations": locations,
        "committed": committed,
        "end": kafka.end_offsets(topic),
        "kafka_config": {"bootstrap.servers": kafka.bootstrap},
        "storage": {
            "s3_options": s3.options,
            "webhdfs_options": {"url": hdfs.webhdfs_url, "user": "root"},
        },
    }


def test_scan_reads_s3_and_hdfs_checkpoints_on_executors(spark: Any, fleet: dict) -> None:
    missing = f"s3a://checkpoints/scan-{fleet['run']}/no-such-job"
    locations = [fleet["locations"]["s3"], fleet["locations"]["hdfs"], missing]
    result = spark_scan.scan(
        spark,
        locations,
        kafka_config=fleet["kafka_config"],
        history=3,
        **fleet["storage"],
    )
    try:
        jobs_by_location = {row["location"]: row for row in result.jobs.collect()}
        partitions = result.partitions.collect()
    finally:
        result.unpersist()
    assert set(jobs_by_location) == set(locations)
    for location in locations[:2]:
        job = jobs_by_location[location]
        assert job["error"] is None
        assert job["total_lag"] == 12
        assert job["partitions"] == 3 and job["topics"] == [fleet["topic"]]
        assert job["health"] in {"OK", "LAGGING", "STALLED", "STOPPED"}
        rows = {r["partition"]: r for r in partitions if r["location"] == location}
        assert {p: r["committed_offset"] for p, r in rows.items()} == fleet["committed"]
        assert {p: r["log_end_offset"] for p, r in rows.items()} == fleet["end"]
        assert sum(r["lag"] for r in rows.values()) == 12
    broken = jobs_by_location[missing]
    assert broken["health"] == "UNKNOWN" and broken["error"].startswith("CheckpointNotFound")
    assert list(result.snapshot.partitions) == [fleet["topic"]]  # one snapshot, one topic
    # first read of each checkpoint: LIST commits/, LIST offsets/, GET offsets/C,
    # plus two older batches at most (history=3); the missing one costs its probes only
    assert 0 < result.storage_requests <= 2 * 6 + 5


def test_scan_discovers_under_a_prefix(spark: Any, fleet: dict) -> None:
    result = spark_scan.scan(
        spark,
        prefix=f"s3a://checkpoints/scan-{fleet['run']}",
        kafka_config=fleet["kafka_config"],
        history=1,
        **fleet["storage"],
    )
    try:
        assert result.locations == (fleet["locations"]["s3"],)
        [job] = result.jobs.collect()
        assert job["total_lag"] == 12
        assert job["query_id"] is None  # metadata is not read unless asked for
        # history=1 on S3: ONE LIST (commits/, metadata, offsets/) + GET offsets/C
        assert result.storage_requests == 2
    finally:
        result.unpersist()
    result = spark_scan.scan(
        spark,
        [fleet["locations"]["s3"]],
        kafka_config=fleet["kafka_config"],
        history=1,
        query_ids=True,
        **fleet["storage"],
    )
    try:
        [job] = result.jobs.collect()
        assert job["query_id"] and len(job["query_id"]) == 36  # the uuid from metadata
        assert result.storage_requests == 3  # + GET metadata
    finally:
        result.unpersist()


def test_command_line_writes_both_tables(
    spark: Any, fleet: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "scan"
    argv = [
        "--checkpoints",
        fleet["locations"]["s3"],
        fleet["locations"]["hdfs"],
        "--bootstrap-servers",
        fleet["kafka_config"]["bootstrap.servers"],
        "--storage-options",
        json.dumps(fleet["storage"]),
        "--thresholds",
        json.dumps({"max_lag_records_total": 5}),
        "--output",
        str(output),
    ]
    assert spark_scan.main(argv, spark=spark) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["jobs"] == 2 and summary["health"] == {"LAGGING": 2}
    partitions = spark.read.parquet(str(output / "partitions"))
    assert partitions.count() == 6
    assert partitions.groupBy().sum("lag").collect()[0][0] == 24
    jobs_table = spark.read.parquet(str(output / "jobs"))
    assert {r["health"] for r in jobs_table.select("health").collect()} == {"LAGGING"}
    # any Spark sink: JSON this time
    assert (
        spark_scan.main([*argv[:-1], str(tmp_path / "json"), "--format", "json"], spark=spark) == 0
    )
    assert spark.read.json(str(tmp_path / "json" / "jobs")).count() == 2
