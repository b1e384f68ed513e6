"""The ``sparklag`` connection type: connection ids bundled in one connection, read strictly,
registered with Airflow so that its connection "Test" button runs
``SparkLagHook.test_connection()``.

The tests of the button go through Airflow's own ``Connection.test_connection()`` with the
connection exported as ``AIRFLOW_CONN_<ID>`` from its ``get_uri()``: exactly what
``POST /api/v2/connections/test`` does (ProvidersManager finds the hook by the connection type).
The REST call itself, in a real deployment, is in tests/airflow/test_airflow_smoke.py.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.errors import InvalidParameter
from airflow_sparklag.hooks.bundle import FIELDS, ConnectionBundle, read_bundle
from airflow_sparklag.hooks.sparklag import SparkLagHook
from airflow_sparklag.location import Location
from tests.airflow.conftest import conn_env, kafka_connection

PASSWORD = "kafka-password-canary-7f3"


def press_test(monkeypatch: pytest.MonkeyPatch, extra: Any, conn_id: str = "lag_test") -> Any:
    """What the connection form's Test button gets for a ``sparklag`` connection."""
    from airflow.models.connection import Connection

    text = extra if isinstance(extra, str) else json.dumps(extra)
    conn = Connection(conn_id=conn_id, conn_type="sparklag", extra=text)
    monkeypatch.setenv(conn_env(conn_id), conn.get_uri())
    return conn.test_connection()


def _bundle(extra: Any, conn_type: str = "sparklag") -> ConnectionBundle:
    from airflow.providers.common.compat.sdk import Connection

    text = extra if extra is None or isinstance(extra, str) else json.dumps(extra)
    return read_bundle(Connection(conn_id="lag_prod", conn_type=conn_type, extra=text))


# -- registration and the bundle --------------------------------------------------------------


@pytest.mark.airflow_compat
def test_registered_so_that_the_test_button_reaches_our_hook():
    from airflow import __version__
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    hook = manager.hooks["sparklag"]
    assert hook is not None
    assert hook.hook_class_name == "airflow_sparklag.hooks.sparklag.SparkLagHook"
    assert hook.connection_id_attribute_name == "sparklag_conn_id"
    assert hook.connection_testable
    assert SparkLagHook.conn_type == "sparklag"
    # `kafka` stays the apache-kafka provider's.
    assert manager.hooks["kafka"].hook_class_name.endswith("KafkaBaseHook")
    if tuple(map(int, __version__.split(".")[:2])) >= (3, 2):  # the declarative form (conn-fields)
        widgets = manager.connection_form_widgets
        assert {f"extra__sparklag__{key}" for key in FIELDS} <= set(widgets)
        hidden = manager.field_behaviours["sparklag"]["hidden_fields"]
        assert set(hidden) == {"host", "schema", "login", "password", "port"}


@pytest.mark.airflow_compat
def test_bundle_keys_are_read_and_empty_form_fields_ignored():
    bundle = _bundle(
        {
            "kafka_config_id": " kafka_prod ",
            "aws_conn_id": "aws_lake",
            "webhdfs_conn_id": None,  # the form sends unused fields as null or ""
            "gcp_conn_id": "",
            "extra__sparklag__wasb_conn_id": "wasb_old_form",  # an older form's prefix
            "source_kafka_conn_ids": '{"1": "kafka_b"}',
            "location": "s3a://lake/ck/orders",
        }
    )
    assert bundle == ConnectionBundle(
        "lag_prod",
        kafka_config_id="kafka_prod",
        aws_conn_id="aws_lake",
        wasb_conn_id="wasb_old_form",
        source_kafka_conn_ids={"1": "kafka_b"},
        location=Location.parse("s3a://lake/ck/orders"),  # parsed where the extra is read
    )
    assert _bundle(None).kafka_config_id == "kafka_default"


@pytest.mark.airflow_compat
def test_the_bundle_names_the_kafka_connection_as_every_operator_does():
    """``kafka_config_id``, the operators' argument; the old ``kafka_conn_id`` still works for
    one release, with a DeprecationWarning (docs/names.md)."""
    assert _bundle({"kafka_config_id": "kafka_prod"}).kafka_config_id == "kafka_prod"
    with pytest.warns(DeprecationWarning, match="'kafka_conn_id' is deprecated.*'kafka_config_id'"):
        assert _bundle({"kafka_conn_id": "kafka_old"}).kafka_config_id == "kafka_old"
    both = {"kafka_conn_id": "a", "kafka_config_id": "b"}
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidParameter, match="given twice"):
        _bundle(both)


@pytest.mark.airflow_compat
@pytest.mark.parametrize(
    ("extra", "parameter", "says"),
    [
        ({"kafka_confg_id": "k"}, "extra.kafka_confg_id", "did you mean 'kafka_config_id'"),
        ({"bootstrap.servers": "b:9092"}, "extra.bootstrap.servers", "unknown key"),
        ({"kafka_config_id": 5}, "extra.kafka_config_id", "non-empty string, got 5"),
        ({"aws_conn_id": ["a"]}, "extra.aws_conn_id", "non-empty string"),
        ({"source_kafka_conn_ids": ["k"]}, "extra.source_kafka_conn_ids", "mapping"),
        ({"source_kafka_conn_ids": {"1": 2}}, "extra.source_kafka_conn_ids.1", "string"),
        ({"location": ["/a", "/b"]}, "extra.location", "one location"),
        ("not json", "extra", "not JSON"),
        ('["kafka_config_id"]', "extra", "JSON object"),
    ],
)
def test_a_bad_bundle_is_an_error_naming_the_key(extra, parameter, says):
    with pytest.raises(InvalidParameter, match=says) as raised:
        _bundle(extra)
    assert raised.value.parameter == parameter
    assert "'lag_prod'" in str(raised.value)


@pytest.mark.airflow_compat
def test_a_connection_of_another_type_is_refused():
    with pytest.raises(InvalidParameter, match="'kafka' connection, not a 'sparklag' one") as e:
        _bundle({"bootstrap.servers": "b:9092"}, conn_type="kafka")
    assert e.value.parameter == "sparklag_conn_id"


@pytest.mark.airflow_compat
def test_ids_given_to_the_hook_win_over_the_bundle(monkeypatch):
    for conn_id, servers in (("k_bundle", "b1:9092"), ("k_given", "g1:9092"), ("k_src", "s:1")):
        monkeypatch.setenv(conn_env(conn_id), kafka_connection(servers))
    monkeypatch.setenv(
        conn_env("hdfs_bundle"), json.dumps({"conn_type": "webhdfs", "host": "nn", "port": 9870})
    )
    bundle = {
        "kafka_config_id": "k_bundle",
        "webhdfs_conn_id": "hdfs_bundle",
        "source_kafka_conn_ids": {"1": "k_src", "2": "k_src"},
    }
    monkeypatch.setenv(
        conn_env("lag_bundle"), json.dumps({"conn_type": "sparklag", "extra": bundle})
    )

    hook = SparkLagHook(sparklag_conn_id="lag_bundle")
    conns = hook.get_conn()
    assert conns.kafka_config["bootstrap.servers"] == "b1:9092"
    assert conns.webhdfs_options == {"url": "http://nn:9870"}
    assert hook.source_kafka_conn_ids == {"1": "k_src", "2": "k_src"}

    given = SparkLagHook(
        "k_given", sparklag_conn_id="lag_bundle", source_kafka_conn_ids={"2": "k_given"}
    )
    assert given.get_conn().kafka_config["bootstrap.servers"] == "g1:9092"
    assert given.webhdfs_conn_id == "hdfs_bundle"
    assert given.source_kafka_conn_ids == {"1": "k_src", "2": "k_given"}

    # Without a bundle nothing changed: kafka_default, or the id given.
    assert SparkLagHook().kafka_config_id == "kafka_default"
    assert SparkLagHook("k_given").kafka_config_id == "k_given"
    assert SparkLagHook(kafka_config_id="k_given").get_conn().kafka_config == {
        "bootstrap.servers": "g1:9092"
    }


@pytest.mark.airflow_compat
def test_tasks_and_triggers_take_a_sparklag_connection(monkeypatch):
    from airflow_sparklag.operators.snapshot import CheckpointSnapshotOperator
    from airflow_sparklag.operators.sparklag import SparkLagCheckOperator
    from airflow_sparklag.sensors.sparklag import SparkLagSensor

    monkeypatch.setenv(conn_env("k_task"), kafka_connection("t1:9092"))
    monkeypatch.setenv(conn_env("k_other"), kafka_connection("t2:9092"))
    monkeypatch.setenv(
        conn_env("lag_task"),
        json.dumps({"conn_type": "sparklag", "extra": {"kafka_config_id": "k_task"}}),
    )
    monkeypatch.setenv(
        conn_env("lag_two"),
        json.dumps(
            {
                "conn_type": "sparklag",
                "extra": {"kafka_config_id": "k_task", "source_kafka_conn_ids": {"1": "k_other"}},
            }
        ),
    )
    check = SparkLagCheckOperator(task_id="c", location="/ck", sparklag_conn_id="lag_task")
    assert "sparklag_conn_id" in check.template_fields
    assert check.hook.get_conn().kafka_config["bootstrap.servers"] == "t1:9092"

    sensor = SparkLagSensor(task_id="s", location="/ck", sparklag_conn_id="lag_task")
    trigger = sensor._trigger(deadline=1e12)
    _path, kwargs = trigger.serialize()
    assert kwargs["connections"]["sparklag_conn_id"] == "lag_task"
    assert kwargs["connections"]["kafka_config_id"] is None
    rebuilt = type(trigger)(**kwargs)._hook()
    assert rebuilt.get_conn().kafka_config["bootstrap.servers"] == "t1:9092"

    # A snapshot reads each source on its own cluster: the bundle's mapping applies.
    snapshot = CheckpointSnapshotOperator(
        task_id="snap", location="/ck", snapshot_root="/snap", sparklag_conn_id="lag_two"
    )
    conns = snapshot.hook.get_conn()
    assert conns.source_kafka["1"].config["bootstrap.servers"] == "t2:9092"


# -- the Test button, against the test bed ------------------------------------------------------


@pytest.mark.testbed
@pytest.mark.airflow_compat
def test_test_button_checks_every_part_and_reads_the_checkpoint(
    monkeypatch, kafka, kafka_conn, aws_conn, consume
):
    topic = kafka.create_topic(f"conn-test-{uuid.uuid4().hex[:6]}", partitions=3)
    kafka.produce(topic, 30)
    job = consume(topic, f"s3a://checkpoints/conn-test-{uuid.uuid4().hex[:8]}")
    ok, message = press_test(
        monkeypatch,
        {"kafka_config_id": kafka_conn, "aws_conn_id": aws_conn, "location": job.location},
    )
    assert ok, message
    assert f"Kafka {kafka.bootstrap} answered" in message
    assert "S3 answered" in message
    assert f"checkpoint {job.location} read: committed batch 0, {topic} (3 partitions)" in message
    print(f"Test button message: {message}")


@pytest.mark.testbed
@pytest.mark.airflow_compat
def test_test_button_failures_name_the_part_and_no_secret(
    monkeypatch, kafka_conn, aws_conn, tmp_path
):
    monkeypatch.setenv(
        conn_env("k_wrong_server"),
        json.dumps(
            {
                "conn_type": "kafka",
                "password": PASSWORD,
                "extra": {
                    "bootstrap.servers": "127.0.0.1:1",
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": "u",
                    "sasl.password": PASSWORD,
                },
            }
        ),
    )
    ok, message = press_test(monkeypatch, {"kafka_config_id": "k_wrong_server"})
    assert not ok
    assert message.startswith("Kafka (connection 'k_wrong_server') failed: KafkaUnavailable")
    assert "127.0.0.1:1" in message and PASSWORD not in message

    ok, message = press_test(monkeypatch, {"kafka_config_id": kafka_conn, "aws_con_id": aws_conn})
    assert not ok
    assert "extra.aws_con_id: unknown key" in message and "did you mean 'aws_conn_id'" in message

    ok, message = press_test(
        monkeypatch, {"kafka_config_id": kafka_conn, "aws_conn_id": "aws_gone"}
    )
    assert not ok
    assert message.startswith("reading the AWS connection 'aws_gone' failed"), message

    # Everything answers but the checkpoint is not there: the part that passed is named too.
    absent = str(tmp_path / "no-checkpoint")
    ok, message = press_test(monkeypatch, {"kafka_config_id": kafka_conn, "location": absent})
    assert not ok
    assert message.startswith(f"reading the checkpoint {absent} failed: CheckpointNotFound")
    assert "(passed: Kafka" in message


@pytest.mark.testbed
def test_test_button_reads_checkpoints_on_gcs_and_azure(
    monkeypatch, kafka, kafka_conn, gcs, azurite, healthy_job
):
    import adlfs
    import gcsfs

    tag = uuid.uuid4().hex[:8]
    local = Path(healthy_job.location)
    for fs in (
        gcsfs.GCSFileSystem(**gcs.options, skip_instance_cache=True),
        adlfs.AzureBlobFileSystem(**azurite.options, skip_instance_cache=True),
    ):
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            fs.pipe_file(
                f"checkpoints/{tag}/{path.relative_to(local).as_posix()}", path.read_bytes()
            )
    gcp = {"token": "anon", "endpoint_url": gcs.endpoint, "project": "testbed"}
    monkeypatch.setenv(
        conn_env("gcp_button"), json.dumps({"conn_type": "google_cloud_platform", "extra": gcp})
    )
    for conn_id, string in (
        ("wasb_button", azurite.connection_string),
        ("wasb_wrong_key", azurite.connection_string.replace("AccountKey=", "AccountKey=AAAA")),
    ):
        monkeypatch.setenv(
            conn_env(conn_id),
            json.dumps({"conn_type": "wasb", "extra": {"connection_string": string}}),
        )
    bundle = {
        "kafka_config_id": kafka_conn,
        "gcp_conn_id": "gcp_button",
        "wasb_conn_id": "wasb_button",
    }
    partitions = f"{healthy_job.topic} (3 partitions)"
    for location in (f"gs://checkpoints/{tag}", f"abfs://checkpoints/{tag}"):
        ok, message = press_test(monkeypatch, {**bundle, "location": location})
        assert ok, message
        assert "GCS client built" in message and "Azure client built" in message
        assert f"checkpoint {location} read: committed batch 0, {partitions}" in message

    location = f"abfs://checkpoints/{tag}"
    wrong = {**bundle, "wasb_conn_id": "wasb_wrong_key", "location": location}
    started = time.monotonic()
    ok, message = press_test(monkeypatch, wrong)
    elapsed = time.monotonic() - started
    assert not ok
    assert message.startswith(f"reading the checkpoint {location} failed"), message
    assert "AccountKey" not in message
    print(f"wrong Azure key reported after {elapsed:.1f}s: {message}")
