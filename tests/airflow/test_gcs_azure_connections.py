"""``gcp_conn_id`` / ``wasb_conn_id``: google_cloud_platform and wasb/adls connections -> gcsfs
and adlfs options per scheme in the hook's one session; declared by the mixin on every task,
carried by the triggers; their secrets scrubbed. Real reads on fake-gcs-server and Azurite are
in tests/integration/test_gcs_azure.py."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from airflow.sdk import Connection

from airflow_sparklag.hooks.connections import (
    ResolvedConnections,
    azure_options_from,
    gcs_options_from,
)
from airflow_sparklag.hooks.sparklag import SparkLagHook
from airflow_sparklag.operators.snapshot import CheckpointMigrationOperator
from airflow_sparklag.operators.sparklag import SparkLagCheckOperator
from airflow_sparklag.sensors.sparklag import SparkKafkaCatchUpSensor, SparkLagSensor
from airflow_sparklag.storage import fsspec_options_for
from airflow_sparklag.storage.fsspec_store import FsspecOptions
from tests.airflow.conftest import conn_env, kafka_connection

KEY = "c2VjcmV0LWFjY291bnQta2V5LXZhbHVlLTEyMzQ1Njc4OTA="
PRIVATE_KEY = "-----BEGIN PRIVATE KEY-----\nMIIEsecretsecretsecret\n-----END PRIVATE KEY-----\n"


def _conn(conn_type: str, **fields: Any) -> Connection:
    extra = fields.pop("extra", None)
    return Connection(
        conn_id="c", conn_type=conn_type, extra=json.dumps(extra) if extra else None, **fields
    )


def test_gcp_connection_read_directly() -> None:
    keyfile = {"type": "service_account", "private_key": PRIVATE_KEY, "client_email": "a@b"}
    conn = _conn("google_cloud_platform", extra={"keyfile_dict": json.dumps(keyfile)})
    assert gcs_options_from(conn) == {"token": keyfile}  # gcsfs reads it: no provider needed
    old_style = _conn(
        "google_cloud_platform",
        extra={
            "extra__google_cloud_platform__key_path": "/secrets/sa.json",
            "extra__google_cloud_platform__project": "p1",
        },
    )
    assert gcs_options_from(old_style) == {"token": "/secrets/sa.json", "project": "p1"}
    emulator = _conn("google_cloud_platform", extra={"token": "anon", "endpoint_url": "http://e"})
    assert gcs_options_from(emulator) == {"token": "anon", "endpoint_url": "http://e"}
    # Nothing gcsfs can use itself: the google provider (when installed) builds credentials.
    assert "token" not in gcs_options_from(_conn("google_cloud_platform", extra={"project": "p"}))


def test_wasb_and_adls_connections_read_directly() -> None:
    key = _conn("wasb", login="acct", password=KEY)
    assert azure_options_from(key) == {"account_name": "acct", "account_key": KEY}
    string = f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};"
    assert azure_options_from(_conn("wasb", extra={"connection_string": string})) == {
        "connection_string": string
    }
    principal = _conn(
        "adls", host="acct", login="client-id", password="client-secret-value",
        extra={"tenant_id": "tenant"},
    )  # fmt: skip
    assert azure_options_from(principal) == {
        "tenant_id": "tenant",
        "client_id": "client-id",
        "client_secret": "client-secret-value",
        "account_name": "acct",
    }
    sas = _conn(
        "wasb", host="https://acct.blob.core.windows.net", extra={"sas_token": "sv=x&sig=y"}
    )
    assert azure_options_from(sas) == {"sas_token": "sv=x&sig=y", "account_name": "acct"}
    with pytest.raises(ValueError, match="names no storage account"):
        azure_options_from(_conn("wasb"))


def test_secrets_of_both_connections_are_scrubbed() -> None:
    conns = ResolvedConnections(
        kafka_config={"bootstrap.servers": "b:9092"},
        gcs_options={"token": {"private_key": PRIVATE_KEY, "client_email": "a@b"}},
        azure_options={
            "connection_string": f"AccountName=acct;AccountKey={KEY};",
            "client_secret": "client-secret-value",
        },
    )
    message = f"failed: {KEY} / client-secret-value / {PRIVATE_KEY}"
    scrubbed = conns.scrub(message)
    assert KEY not in scrubbed and "client-secret-value" not in scrubbed
    assert "MIIEsecretsecretsecret" not in scrubbed


def test_fsspec_options_per_scheme_and_flat() -> None:
    options = {"timeout": 5, "gs": {"token": "anon"}, "abfs": {"account_name": "a"}}
    assert fsspec_options_for(options, "gs") == {"timeout": 5, "token": "anon"}
    assert fsspec_options_for(options, "gcs") == {"timeout": 5, "token": "anon"}
    assert fsspec_options_for(options, "abfss") == {"timeout": 5, "account_name": "a"}
    assert fsspec_options_for(options, "az") == {"timeout": 5, "account_name": "a"}
    assert fsspec_options_for({"token": "anon"}, "gs") == {"token": "anon"}  # flat: as before
    assert fsspec_options_for(None, "gs") == {}
    both = {"abfs": {"account_name": "a"}, "abfss": {"account_name": "b"}}
    assert fsspec_options_for(both, "abfss") == {"account_name": "b"}  # exact scheme wins


def test_hook_puts_both_connections_in_its_one_session(monkeypatch) -> None:
    monkeypatch.setenv(conn_env("k_gcsaz"), kafka_connection("b:9092"))
    monkeypatch.setenv(
        conn_env("gcp_unit"),
        json.dumps({"conn_type": "google_cloud_platform", "extra": {"token": "anon"}}),
    )
    monkeypatch.setenv(
        conn_env("wasb_unit"),
        json.dumps({"conn_type": "wasb", "login": "acct", "password": KEY}),
    )
    hook = SparkLagHook("k_gcsaz", gcp_conn_id="gcp_unit", wasb_conn_id="wasb_unit")
    assert hook.fsspec_options() == {
        "gs": {"token": "anon"},
        "abfs": {"account_name": "acct", "account_key": KEY},
    }
    options = hook.session.storage_options.fsspec  # read into its typed value once
    assert isinstance(options, FsspecOptions) and options.values["abfs"]["account_key"] == KEY
    assert KEY not in hook.scrub(f"x {KEY} y")
    assert SparkLagHook("k_gcsaz").fsspec_options() is None


TASKS = {
    "check": lambda **kw: SparkLagCheckOperator(task_id="t", location="gs://b/ck", **kw),
    "migrate": lambda **kw: CheckpointMigrationOperator(
        task_id="t", location="gs://b/ck", archive_root="gs://b/archive", **kw
    ),
    "health": lambda **kw: SparkLagSensor(task_id="t", location="gs://b/ck", **kw),
    "catch_up": lambda **kw: SparkKafkaCatchUpSensor(
        task_id="t", location="abfs://c/ck", target_time=0, **kw
    ),
}


@pytest.mark.parametrize("kind", sorted(TASKS))
def test_every_task_hands_the_connections_to_its_hook(kind: str) -> None:
    task = TASKS[kind](gcp_conn_id="gcp_x", wasb_conn_id="wasb_y")
    assert {"gcp_conn_id", "wasb_conn_id"} <= set(task.template_fields)
    assert (task.hook.gcp_conn_id, task.hook.wasb_conn_id) == ("gcp_x", "wasb_y")
    assert (TASKS[kind]().hook.gcp_conn_id, TASKS[kind]().hook.wasb_conn_id) == (None, None)


@pytest.mark.parametrize("kind", ["health", "catch_up"])
def test_the_trigger_carries_the_connections(kind: str) -> None:
    task = TASKS[kind](gcp_conn_id="gcp_x", wasb_conn_id="wasb_y")
    _ = task._condition
    trigger = task._trigger(time.time() + 60)
    classpath, kwargs = trigger.serialize()
    assert (kwargs["connections"]["gcp_conn_id"], kwargs["connections"]["wasb_conn_id"]) == (
        "gcp_x",
        "wasb_y",
    )
    rebuilt = type(trigger)(**json.loads(json.dumps(kwargs)))
    assert rebuilt.serialize() == (classpath, kwargs)
    hook = rebuilt._hook()
    assert (hook.gcp_conn_id, hook.wasb_conn_id) == ("gcp_x", "wasb_y")
