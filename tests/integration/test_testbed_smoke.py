"""Proves each real component of the test bed works, end to end.

A PySpark query consumes everything produced to a topic; its checkpoint appears on local disk,
on S3 (listed with boto3) and on HDFS (listed over WebHDFS) with offsets equal to Kafka's end
offsets. These read the checkpoint files directly, independently of the package's reader.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from testbed import jobs

pytestmark = pytest.mark.testbed


def _last_offsets(text: str) -> dict[str, dict[str, int]]:
    lines = text.split("\n")
    assert lines[0] == "v1", lines[0]
    return json.loads(lines[2])


def test_kafka_produce_and_consume(kafka, topic):
    from confluent_kafka import Consumer

    kafka.produce(topic, 50)
    assert sum(kafka.end_offsets(topic).values()) == 50
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": f"smoke-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values = set()
    try:
        for _ in range(60):
            for message in consumer.consume(num_messages=100, timeout=1):
                assert message.error() is None, message.error()
                values.add(message.value().decode())
            if len(values) == 50:
                break
    finally:
        consumer.close()
    assert values == {f"r-{i}" for i in range(50)}


def _consume_all(spark, kafka, topic, checkpoint):
    df = jobs.select_value(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]))
    jobs.run_available_now(df, checkpoint)


def test_spark_checkpoint_on_local_disk(spark, kafka, topic, tmp_path: Path):
    kafka.produce(topic, 120)
    checkpoint = tmp_path / "ck"
    _consume_all(spark, kafka, topic, str(checkpoint))
    batches = sorted(
        int(n) for n in (p.name for p in (checkpoint / "offsets").iterdir()) if n.isdigit()
    )
    assert batches, "no offsets files written"
    assert (checkpoint / "commits" / str(batches[-1])).exists()
    offsets = _last_offsets((checkpoint / "offsets" / str(batches[-1])).read_text())
    expected = {str(p): o for p, o in kafka.end_offsets(topic).items()}
    assert offsets == {topic: expected}
    assert sum(expected.values()) == 120


def test_spark_checkpoint_on_s3(spark, kafka, topic, s3):
    kafka.produce(topic, 90)
    prefix = f"jobs/{uuid.uuid4().hex[:8]}"
    _consume_all(spark, kafka, topic, f"s3a://checkpoints/{prefix}")
    client = s3.client()
    listed = client.list_objects_v2(Bucket="checkpoints", Prefix=f"{prefix}/offsets/")
    ids = sorted(
        int(k.rsplit("/", 1)[1])
        for k in (o["Key"] for o in listed["Contents"])
        if k.rsplit("/", 1)[1].isdigit()
    )
    assert ids
    body = client.get_object(Bucket="checkpoints", Key=f"{prefix}/offsets/{ids[-1]}")["Body"]
    offsets = _last_offsets(body.read().decode())
    assert offsets == {topic: {str(p): o for p, o in kafka.end_offsets(topic).items()}}
    client.head_object(Bucket="checkpoints", Key=f"{prefix}/commits/{ids[-1]}")


def test_spark_checkpoint_on_hdfs(spark, kafka, topic, hdfs):
    import requests

    kafka.produce(topic, 75)
    path = f"/checkpoints/{uuid.uuid4().hex[:8]}"
    _consume_all(spark, kafka, topic, f"{hdfs.namenode_uri}{path}")
    ids = sorted(int(n) for n in hdfs.list_names(f"{path}/offsets") if n.isdigit())
    assert ids
    assert str(ids[-1]) in hdfs.list_names(f"{path}/commits")
    r = requests.get(
        f"{hdfs.webhdfs_url}/webhdfs/v1{path}/offsets/{ids[-1]}?op=OPEN&user.name=root", timeout=10
    )
    r.raise_for_status()
    offsets = _last_offsets(r.text)
    assert offsets == {topic: {str(p): o for p, o in kafka.end_offsets(topic).items()}}


def test_airflow_metadata_database(airflow_db):
    assert (airflow_db / "airflow.db").stat().st_size > 0
