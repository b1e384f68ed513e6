"""The Spark fleet scan's command line and job rows, without Spark: the flags docs/fleet.md
lists (made from the shared declarations) and the row of a job whose check failed."""

from __future__ import annotations

import json

import pytest

from airflow_sparklag import spark_scan
from airflow_sparklag.errors import CheckpointNotFound
from airflow_sparklag.model.verdict import Thresholds
from airflow_sparklag.monitor import failed_result

FLAGS = {
    "-h", "--help", "--checkpoints", "--checkpoints-file", "--prefix", "--max-depth",
    "--bootstrap-servers", "--kafka-config", "--source-servers", "--s3-endpoint-url",
    "--s3-region", "--webhdfs-url", "--hdfs-user", "--hdfs-kerberos", "--hdfs-principal",
    "--hdfs-keytab", "--hdfs-ca-bundle", "--storage-options", "--thresholds", "--history",
    "--read-committed", "--exact-time-lag", "--runs-every", "--run-grace",
    "--subscribe-pattern", "--assign", "--query-ids", "--output", "--format", "--mode",
    "--option", "--slices", "--threads-per-task",
}  # fmt: skip


def test_the_scan_takes_the_documented_flags_and_no_others() -> None:
    parser = spark_scan.build_parser()
    assert {flag for action in parser._actions for flag in action.option_strings} == FLAGS


def test_the_scan_reads_its_check_options_as_the_cli_does() -> None:
    args = spark_scan.build_parser().parse_args(
        ["--output", "o", "--history", "3", "--exact-time-lag", "--runs-every", "1h",
         "--thresholds", json.dumps({"max_lag_seconds": 600}), "--webhdfs-url", "http://a:1",
         "--webhdfs-url", "http://b:1", "--s3-region", "r", "--source-servers", "1=b:9092"]
    )  # fmt: skip
    options = spark_scan._check_options(args)
    assert (options.history, options.exact_time_lag, options.runs_every) == (3, True, 3600.0)
    assert options.read_committed is None and not options.assign
    assert options.thresholds == Thresholds(max_lag_seconds=600)
    storage = spark_scan._storage_options(args)
    assert storage["webhdfs_options"] == {"url": ["http://a:1", "http://b:1"]}
    assert storage["s3_options"] == {"region_name": "r"}
    assert args.source_servers == [("1", "b:9092")]
    default = spark_scan._check_options(spark_scan.build_parser().parse_args(["--output", "o"]))
    assert default == spark_scan.CheckOptions()


def test_a_failed_check_is_a_row_of_its_own() -> None:
    failed = failed_result("s3a://b/ck/gone", CheckpointNotFound("no offsets/ under it"))
    job, partitions = spark_scan._job_rows(failed, now=1_700_000_000.0)
    row = dict(zip([name for name, _ in spark_scan.JOB_COLUMNS], job, strict=True))
    assert partitions == []
    assert (row["location"], row["health"], row["rule"]) == (
        "s3a://b/ck/gone",
        "CHECK_FAILED",
        "check_failed",
    )
    assert row["error"] == row["reason"] == "CheckpointNotFound: no offsets/ under it"
    assert json.loads(row["result"])["error"] == row["error"]
    assert row["scanned_at"].timestamp() == 1_700_000_000.0
    assert row["total_lag"] is None and row["topics"] is None


def test_bad_check_options_are_refused_before_spark_starts(monkeypatch) -> None:
    """A usage error (SystemExit with the message): after Spark had started it was a
    traceback (InvalidParameter), which pytest.raises(SystemExit) does not take."""
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)  # not under spark-submit
    argv = ["--checkpoints", "/nowhere", "--bootstrap-servers", "127.0.0.1:1", "--output", "o"]
    with pytest.raises(SystemExit) as refused:
        spark_scan.main([*argv, "--run-grace", "5"])
    assert "run_grace" in str(refused.value) and "runs_every" in str(refused.value)
