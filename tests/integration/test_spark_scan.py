"""The PySpark fleet scan at local[2] on the test bed: real queries write their checkpoints to
S3 (moto, through s3a) and HDFS (MiniCluster); the scan reads them on executors."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag import spark_scan
from airflow_sparklag.monitor import CheckOptions
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
        options=CheckOptions(history=3),
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
        # One batch: UNKNOWN once the 12 records waited STOPPED_MIN_IDLE_SECONDS (short history)
        assert job["health"] in {"OK", "LAGGING", "STALLED", "STOPPED", "UNKNOWN"}
        rows = {r["partition"]: r for r in partitions if r["location"] == location}
        assert {p: r["committed_offset"] for p, r in rows.items()} == fleet["committed"]
        assert {p: r["log_end_offset"] for p, r in rows.items()} == fleet["end"]
        assert sum(r["lag"] for r in rows.values()) == 12
    broken = jobs_by_location[missing]
    assert broken["health"] == "CHECK_FAILED" and broken["error"].startswith("CheckpointNotFound")
    assert list(result.snapshot.partitions) == [fleet["topic"]]  # one snapshot, one topic
    # first read of each checkpoint: LIST commits/, LIST offsets/, GET offsets/C, then in
    # the judge pass two older batches at most (history=3); the missing one costs its probes
    assert 0 < result.storage_requests <= 2 * 6 + 5


def test_scan_discovers_under_a_prefix(spark: Any, fleet: dict) -> None:
    result = spark_scan.scan(
        spark,
        prefix=f"s3a://checkpoints/scan-{fleet['run']}",
        kafka_config=fleet["kafka_config"],
        options=CheckOptions(history=1),
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
        options=CheckOptions(history=1),
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
    assert summary["lag"]["total_records"] == 24 and summary["lag"]["jobs_with_lag"] == 2
    # each job's verdict, for the "Streaming lag" page (the fleet scan DAG pushes it to XCom)
    assert sorted(
        (r["location"], r["health"], r["total_lag"]) for r in summary["results"]
    ) == sorted((location, "LAGGING", 12) for location in argv[1:3])
    # JSON lines by default: read with the standard library, no Spark, no pyarrow
    partitions = _json_lines(output / "partitions")
    assert len(partitions) == 6 and sum(row["lag"] for row in partitions) == 24
    jobs_table = _json_lines(output / "jobs")
    assert {row["health"] for row in jobs_table} == {"LAGGING"}
    for row in jobs_table:
        result = json.loads(row["result"])  # the CLI's --json result of the job
        assert result["verdict"]["health"] == "LAGGING" and result["report"]["total_lag"] == 12
    # any Spark sink: Parquet this time
    argv = [*argv[:-1], str(tmp_path / "parquet"), "--format", "parquet"]
    assert spark_scan.main(argv, spark=spark) == 0
    assert spark.read.parquet(str(tmp_path / "parquet" / "jobs")).count() == 2


def _json_lines(directory: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for part in sorted(directory.glob("part-*"))
        for line in part.read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def s3_fleet(spark: Any, kafka: Any, s3: Any) -> dict[str, Any]:
    """Three real queries under one S3 prefix, on two topics, then more records: lags 12, 5
    and 17 (one query reads both topics)."""
    run = uuid.uuid4().hex[:8]
    orders = kafka.create_topic(f"scan-orders-{run}", partitions=3)
    clicks = kafka.create_topic(f"scan-clicks-{run}", partitions=2)
    kafka.produce(orders, 30)
    kafka.produce(clicks, 20)
    prefix = f"s3a://checkpoints/fleet-{run}"
    for name, topics in (
        ("a/orders", [orders]),
        ("b/clicks", [clicks]),
        ("b/both", [orders, clicks]),
    ):
        stream = jobs.kafka_stream(spark, kafka.bootstrap, topics=topics)
        jobs.run_available_now(jobs.select_value(stream), f"{prefix}/{name}")
    kafka.produce(orders, 12, start=30)
    kafka.produce(clicks, 5, start=20)
    return {"prefix": prefix, "kafka_config": {"bootstrap.servers": kafka.bootstrap}}


def _cli_results(
    prefix: str, s3: Any, kafka_config: dict, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> dict[str, dict]:
    from airflow_sparklag import cli

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.options["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.options["aws_secret_access_key"])
    capsys.readouterr()
    cli.main(
        ["status", "--prefix", prefix, "--bootstrap-servers", kafka_config["bootstrap.servers"],
         "--s3-endpoint-url", s3.options["endpoint_url"], "--s3-region", s3.options["region_name"],
         "--json", "--no-progress"]
    )  # fmt: skip
    document = json.loads(capsys.readouterr().out)
    return {result["location"]: result for result in document["results"]}


def test_scan_gives_the_cli_verdicts_and_lag(
    spark: Any, s3_fleet: dict, s3: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The Spark scan and `sparklag status --prefix` on the same fleet: the same jobs, health,
    rule, total lag and lag per partition. Executors keep one storage session per Python
    worker: a second scan builds none in a worker the first one used."""
    cli = _cli_results(s3_fleet["prefix"], s3, s3_fleet["kafka_config"], monkeypatch, capsys)
    scans = [
        spark_scan.scan(
            spark,
            prefix=s3_fleet["prefix"],
            kafka_config=s3_fleet["kafka_config"],
            s3_options=s3.options,
        )
        for _ in range(2)
    ]
    try:
        jobs_rows = {row["location"]: row for row in scans[0].jobs.collect()}
        partition_rows = scans[0].partitions.collect()
    finally:
        for result in scans:
            result.unpersist()
    assert set(jobs_rows) == set(cli) and len(cli) == 3
    assert sorted(row["total_lag"] for row in jobs_rows.values()) == [5, 12, 17]
    for location, result in cli.items():
        job, report = jobs_rows[location], result["report"]
        assert (job["health"], job["rule"]) == (
            result["verdict"]["health"],
            result["verdict"]["rule"],
        )
        assert job["total_lag"] == report["total_lag"] and job["max_lag"] == report["max_lag"]
        expected = {
            (topic["topic"], p["partition"]): p["lag"]
            for source in report["sources"]
            for topic in source["topics"]
            for p in topic["partitions"]
        }
        got = {
            (r["topic"], r["partition"]): r["lag"]
            for r in partition_rows
            if r["location"] == location
        }
        assert got == expected
    first, second = scans[0].tasks, scans[1].tasks
    assert sum(task["requests"] for task in first) == scans[0].read_requests > 0
    assert sum(task["sessions_built"] for task in first) <= len({task["pid"] for task in first})
    seen = {task["pid"] for task in first}
    assert all(task["sessions_built"] == 0 for task in second if task["pid"] in seen)
    assert scans[1].read_requests == scans[0].read_requests  # nothing cached across scans


def test_spark_submit_runs_the_documented_command(fleet: dict, tmp_path: Path) -> None:
    """docs/fleet.md's command: spark-submit runs the module's own file (spark-submit has no
    ``-m``); the summary carries the lag, the tables are JSON lines."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
    }
    output = tmp_path / "submitted"
    command = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master", "local[1]",
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
        spark_scan.__file__,
        "--checkpoints", fleet["locations"]["s3"],
        "--bootstrap-servers", fleet["kafka_config"]["bootstrap.servers"],
        "--storage-options", json.dumps(fleet["storage"]),
        "--output", str(output),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["jobs"] == 1 and summary["lag"]["total_records"] == 12, summary
    [job] = _json_lines(output / "jobs")
    assert job["total_lag"] == 12 and json.loads(job["result"])["report"]["total_lag"] == 12
