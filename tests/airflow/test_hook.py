"""SparkLagHook: connections -> options, and real checks on checkpoints on disk, S3 and HDFS."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest

from airflow_sparklag import params
from airflow_sparklag.conditions import CatchUpCondition, HealthCondition, ProgressCondition
from airflow_sparklag.hooks.connections import webhdfs_options_from
from airflow_sparklag.hooks.sparklag import SparkLagHook
from airflow_sparklag.model.verdict import Health, Thresholds
from airflow_sparklag.monitor import CheckOptions
from tests.airflow.conftest import conn_env, kafka_connection, kept_reader


@pytest.mark.airflow_compat
def test_connections_become_core_options(monkeypatch):
    monkeypatch.setenv(
        conn_env("k_unit"), kafka_connection("b1:9092,b2:9092", **{"sasl.password": "pw-secret"})
    )
    monkeypatch.setenv(
        conn_env("aws_unit"),
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIAUNIT",
                "password": "aws-secret-value",
                "extra": {"region_name": "eu-west-1", "endpoint_url": "http://minio:9000"},
            }
        ),
    )
    monkeypatch.setenv(
        conn_env("hdfs_unit"),
        json.dumps({"conn_type": "webhdfs", "host": "nn1,nn2", "port": 9871, "login": "spark"}),
    )
    hook = SparkLagHook("k_unit", aws_conn_id="aws_unit", webhdfs_conn_id="hdfs_unit")
    conns = hook.get_conn()
    assert conns.kafka_config["bootstrap.servers"] == "b1:9092,b2:9092"
    assert conns.s3_options == {
        "aws_access_key_id": "AKIAUNIT",
        "aws_secret_access_key": "aws-secret-value",
        "region_name": "eu-west-1",
        "endpoint_url": "http://minio:9000",
    }
    assert conns.webhdfs_options == {
        "url": ["http://nn1:9871", "http://nn2:9871"],
        "user": "spark",
    }
    # Secrets stay out of reprs and are scrubbed from messages.
    assert "secret" not in repr(conns)
    assert hook.scrub("auth failed for pw-secret / aws-secret-value") == "auth failed for *** / ***"


def test_kafka_connection_without_bootstrap_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(conn_env("k_empty"), json.dumps({"conn_type": "kafka", "extra": {}}))
    with pytest.raises(ValueError, match=r"bootstrap\.servers"):
        SparkLagHook("k_empty").get_conn()


def test_webhdfs_ssl_and_single_namenode():
    from airflow.sdk import Connection

    conn = Connection(conn_id="h", conn_type="webhdfs", host="nn", extra='{"use_ssl": true}')
    assert webhdfs_options_from(conn) == {"url": "https://nn:9870"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1_700_000_000, 1_700_000_000.0),
        (1_700_000_000_500, 1_700_000_000.5),
        ("1700000000", 1_700_000_000.0),
        ("2023-11-14T22:13:20+00:00", 1_700_000_000.0),
        ("2023-11-14T22:13:20Z", 1_700_000_000.0),
        (None, None),
        ("", None),
    ],
)
def test_moments_as_the_sensors_read_them(value, expected):
    assert params.moment("after_commit_time", value) == expected


@pytest.mark.testbed
@pytest.mark.airflow_compat
def test_check_and_probes_on_a_local_checkpoint(kafka_conn, lagging_job):
    hook = SparkLagHook(kafka_conn)
    result = hook.check(lagging_job.location, thresholds={"max_lag_records_total": 10})
    assert result.report.total_lag == 45
    assert result.verdict.health.value == "LAGGING"
    json.dumps(result.to_dict())

    recorded = hook.committed_offsets(lagging_job.location)
    batch = recorded["committed_batch_id"]
    assert batch is not None
    (offsets,) = recorded["offsets"].values()
    assert offsets == {lagging_job.topic: {str(p): o for p, o in lagging_job.committed.items()}}

    location = lagging_job.location
    assert hook.probe(ProgressCondition(location, after_batch_id=batch - 1)).done
    assert not hook.probe(ProgressCondition(location, after_batch_id=batch)).done
    assert not hook.probe(ProgressCondition(location, after_commit_time=time.time())).done

    # Everything produced before the checkpoint was written has been processed; the 45 records
    # produced afterwards have not.
    caught_up = hook.probe(CatchUpCondition(location, recorded["committed_at_ms"]))
    assert caught_up.done, caught_up.message
    behind = hook.probe(CatchUpCondition(location, int((time.time() + 60) * 1000)))
    assert not behind.done
    (seen,) = behind.payload["results"]
    assert seen["records_behind"] == 45
    assert {b["partition"] for b in seen["partitions_behind"]} == {0, 1, 2}

    options = CheckOptions(Thresholds(max_lag_records_total=10))
    health = hook.probe(HealthCondition(location, options))
    assert not health.done and not health.failed
    assert f"{lagging_job.topic}[" in health.message
    # A day's max_commit_age: past 30 s this one-batch job's records would read UNKNOWN
    # ("not enough history to judge"), whenever the test happens to run.
    a_day = CheckOptions(Thresholds(max_commit_age_seconds=86400))
    assert hook.probe(HealthCondition(location, a_day, (Health.OK, Health.LAGGING))).done
    hook.close()


@pytest.mark.testbed
def test_check_many_reports_unreadable_checkpoints_per_location(kafka_conn, healthy_job, tmp_path):
    hook = SparkLagHook(kafka_conn)
    missing = str(tmp_path / "no-such-checkpoint")
    ok, bad = hook.check_many([healthy_job.location, missing])
    assert ok.verdict.health.value == "OK" and ok.report.total_lag == 0
    assert bad.error and "CheckpointNotFound" in bad.error


@pytest.mark.testbed
def test_s3_and_hdfs_checkpoints_through_connections(
    kafka, kafka_conn, aws_conn, webhdfs_conn, hdfs, consume, topic
):
    kafka.produce(topic, 30)
    s3_job = consume(topic, f"s3a://checkpoints/af-{uuid.uuid4().hex[:8]}")
    hdfs_job = consume(topic, f"{hdfs.namenode_uri}/checkpoints/af-{uuid.uuid4().hex[:8]}")
    kafka.produce(topic, 9)
    hook = SparkLagHook(kafka_conn, aws_conn_id=aws_conn, webhdfs_conn_id=webhdfs_conn)
    s3_result, hdfs_result = hook.check_many([s3_job.location, hdfs_job.location])
    assert s3_result.error is None and hdfs_result.error is None
    assert s3_result.report.total_lag == 9
    assert hdfs_result.report.total_lag == 9
    assert hook.check(s3_job.location).report.committed_batch_id is not None

    # Polls through one hook (sensors, triggers) keep their readers: with no new batch, a
    # repeated check on S3 is one LIST and no GET, and check_many reads nothing twice either.
    storage = kept_reader(hook, s3_job.location).storage
    storage.requests.reset()
    assert hook.check(s3_job.location).report.total_lag == 9
    assert (storage.requests.total, storage.requests["read"]) == (1, 0)
    storage.requests.reset()
    hook.check_many([s3_job.location, hdfs_job.location])
    assert storage.requests["read"] == 0


@pytest.mark.testbed
def test_test_connection_checks_every_side(kafka_conn, aws_conn, webhdfs_conn, monkeypatch):
    ok, message = SparkLagHook(
        kafka_conn, aws_conn_id=aws_conn, webhdfs_conn_id=webhdfs_conn
    ).test_connection()
    assert ok, message
    assert "Kafka" in message and "S3" in message and "WebHDFS" in message

    # Nothing listens on port 1: a real failure, whose message names the servers, not secrets.
    monkeypatch.setenv(
        conn_env("k_dead"),
        kafka_connection(
            "127.0.0.1:1", **{"sasl.password": "dead-secret-pw", "socket.timeout.ms": 2000}
        ),
    )
    hook = SparkLagHook("k_dead", kafka_timeout=2)
    ok, message = hook.test_connection()
    assert not ok
    assert "127.0.0.1:1" in message
    assert "dead-secret-pw" not in message


@pytest.mark.testbed
def test_secrets_never_reach_the_result(kafka_conn, aws_conn, s3):
    secret = s3.options["aws_secret_access_key"]
    hook = SparkLagHook(kafka_conn, aws_conn_id=aws_conn)
    (result,) = hook.check_many([f"s3a://checkpoints/absent-{uuid.uuid4().hex[:6]}"])
    text = json.dumps(result.to_dict())
    assert secret not in text and os.environ[conn_env(aws_conn)]
