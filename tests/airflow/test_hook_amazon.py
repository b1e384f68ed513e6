"""SparkLagHook with the amazon provider: S3 clients built by its AwsBaseHook (keys, assume-role
through moto's STS), the direct-reading fallback without the provider, and secrets kept out of
reprs, logs and errors. S3 is the test bed's moto server; the checkpoint is a real one (ck35)."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.hooks.sparklag import SparkLagHook
from airflow_sparklag.storage.s3 import MAX_POOL_CONNECTIONS
from tests.airflow.conftest import airflow_env, conn_env, kafka_connection

REPO = Path(__file__).resolve().parents[2]
CK35 = REPO / "tests" / "data" / "checkpoints" / "ck35"
ROLE_ARN = "arn:aws:iam::123456789012:role/sparklag-reader"
# Reading a checkpoint sends nothing to Kafka; the hook only needs a valid kafka connection.
KAFKA_CONN_ID = "amazon_kafka_unused"


def set_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> str:
    monkeypatch.setenv(conn_env(conn_id), json.dumps({"conn_type": "aws", **fields}))
    return conn_id


@pytest.fixture(autouse=True)
def _kafka_conn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(conn_env(KAFKA_CONN_ID), kafka_connection("127.0.0.1:1"))


@pytest.fixture
def s3_checkpoint(s3) -> str:  # type: ignore[no-untyped-def]
    """ck35's files (with their .crc files) copied into the bucket under a fresh prefix."""
    prefix = f"amazon-{uuid.uuid4().hex[:8]}"
    client = s3.client()
    for path in sorted(CK35.rglob("*")):
        if path.is_file():
            key = f"{prefix}/{path.relative_to(CK35).as_posix()}"
            client.put_object(Bucket="checkpoints", Key=key, Body=path.read_bytes())
    return f"s3a://checkpoints/{prefix}"


@pytest.fixture
def local_ck35() -> dict[str, Any]:
    """What the hook reads from ck35 on local disk, the reference for the S3 copies."""
    recorded = SparkLagHook(KAFKA_CONN_ID).committed_offsets(str(CK35))
    recorded.pop("location")
    recorded.pop("committed_at")  # file mtime locally, upload time on S3
    recorded.pop("committed_at_ms")
    return recorded


def assert_same_checkpoint(hook: SparkLagHook, location: str, expected: dict[str, Any]) -> None:
    recorded = hook.committed_offsets(location)
    assert recorded["location"] == location
    assert recorded["committed_at"] is not None
    moments = ("location", "committed_at", "committed_at_ms")
    assert {k: v for k, v in recorded.items() if k not in moments} == expected
    assert expected["committed_batch_id"] == 6


def record_access_key_ids(client: Any) -> list[str]:
    """The access key id of every request the client sends (from its SigV4 Authorization)."""
    seen: list[str] = []

    def on_send(request: Any, **_: Any) -> None:
        auth = request.headers.get("Authorization", b"")
        auth = auth.decode() if isinstance(auth, bytes) else str(auth)
        match = re.search(r"Credential=([^/]+)/", auth)
        seen.append(match.group(1) if match else "")

    client.meta.events.register("before-send.s3", on_send)
    return seen


def frozen_credentials(options: dict[str, Any]) -> Any:
    """The credentials of the session the hook's S3 client was made from: boto3 writes with
    them, and obstore reads with them (its Boto3CredentialProvider over that session)."""
    return options["session"].get_credentials().get_frozen_credentials()


def keys_extra(s3: Any, **more: Any) -> dict[str, Any]:
    return {"endpoint_url": s3.endpoint, "region_name": s3.options["region_name"], **more}


def role_extra(s3: Any, sts_endpoint: str | None = None, **more: Any) -> dict[str, Any]:
    # AwsBaseHook never sends AssumeRole to the global endpoint_url: STS gets its own.
    return keys_extra(
        s3,
        role_arn=ROLE_ARN,
        service_config={"sts": {"endpoint_url": sts_endpoint or s3.endpoint}},
        **more,
    )


def test_aws_base_hook_builds_the_client_from_the_connection(monkeypatch):
    """No server needed: region, endpoint, keys and config_kwargs reach the client."""
    conn_id = set_conn(
        monkeypatch,
        "amazon_unit",
        login="AKIAAMAZONUNIT",
        password="amazon-unit-secret",
        extra={
            "region_name": "eu-west-1",
            "endpoint_url": "http://minio.invalid:9000",
            "config_kwargs": {"read_timeout": 7, "s3": {"addressing_style": "path"}},
        },
    )
    hook = SparkLagHook(KAFKA_CONN_ID, aws_conn_id=conn_id)
    options = hook.s3_client().options
    assert set(options) == {"client", "session", "verify", "endpoint_url"}
    client = options["client"]
    assert client.meta.endpoint_url == options["endpoint_url"] == "http://minio.invalid:9000"
    assert client.meta.region_name == "eu-west-1"
    config = client.meta.config
    assert config.read_timeout == 7  # the connection's config_kwargs win ...
    assert config.connect_timeout == 5.0  # ... over S3Storage's defaults, which fill the rest
    assert config.retries["mode"] == "standard"
    assert config.max_pool_connections == MAX_POOL_CONNECTIONS  # S3Storage's pool size
    assert config.s3 == {"addressing_style": "path"}
    creds = frozen_credentials(options)
    assert (creds.access_key, creds.secret_key) == ("AKIAAMAZONUNIT", "amazon-unit-secret")
    assert hook.s3_client().options is options  # built once per hook
    # What the connection holds, read directly, is still there for scrubbing.
    assert hook.get_conn().s3_options["aws_secret_access_key"] == "amazon-unit-secret"
    assert "amazon-unit-secret" not in repr(hook.get_conn())
    assert "amazon-unit-secret" not in repr(options)


@pytest.mark.testbed
def test_keys_and_endpoint_read_a_checkpoint_on_s3(
    s3, s3_checkpoint, local_ck35, kafka_conn, monkeypatch
):
    conn_id = set_conn(
        monkeypatch,
        "amazon_keys",
        login=s3.options["aws_access_key_id"],
        password=s3.options["aws_secret_access_key"],
        extra=keys_extra(s3),
    )
    hook = SparkLagHook(KAFKA_CONN_ID, aws_conn_id=conn_id)
    options = hook.s3_client().options
    seen = record_access_key_ids(options["client"])  # boto3's requests (obstore reads)
    assert_same_checkpoint(hook, s3_checkpoint, local_ck35)
    assert set(seen) <= {s3.options["aws_access_key_id"]}
    assert frozen_credentials(options).access_key == s3.options["aws_access_key_id"]
    # test_connection() sends a real S3 request with the same (shared) client; it checks Kafka
    # first, so it needs a broker that answers.
    requests = len(seen)
    ok, message = SparkLagHook(kafka_conn, aws_conn_id=conn_id).test_connection()
    assert ok, message
    assert message.endswith("client from the amazon provider's AwsBaseHook)"), message
    assert len(seen) >= requests and set(seen) <= {s3.options["aws_access_key_id"]}


@pytest.mark.testbed
def test_role_arn_assumes_the_role_through_sts(s3, s3_checkpoint, local_ck35, monkeypatch):
    import boto3

    base_key = s3.options["aws_access_key_id"]
    conn_id = set_conn(
        monkeypatch,
        "amazon_role",
        login=base_key,
        password=s3.options["aws_secret_access_key"],
        extra=role_extra(s3, assume_role_kwargs={"RoleSessionName": "sparklag-check"}),
    )
    hook = SparkLagHook(KAFKA_CONN_ID, aws_conn_id=conn_id)
    options = hook.s3_client().options
    seen = record_access_key_ids(options["client"])
    assert_same_checkpoint(hook, s3_checkpoint, local_ck35)

    # Every S3 request was signed with the credentials STS issued, not the connection's keys
    # (boto3's seen here; obstore's come from the same session) ...
    assumed = frozen_credentials(options)
    assert assumed.token and assumed.access_key != base_key
    assert set(seen) <= {assumed.access_key}
    # ... and moto's STS knows those credentials as the assumed role's session.
    sts = boto3.session.Session().client(
        "sts",
        endpoint_url=s3.endpoint,
        region_name="us-east-1",
        aws_access_key_id=assumed.access_key,
        aws_secret_access_key=assumed.secret_key,
        aws_session_token=assumed.token,
    )
    arn = sts.get_caller_identity()["Arn"]
    assert arn == "arn:aws:sts::123456789012:assumed-role/sparklag-reader/sparklag-check"


FALLBACK_SCRIPT = textwrap.dedent(
    """
    import json, sys

    blocked = []

    class NoAmazonProvider:
        def find_spec(self, name, path=None, target=None):
            if name == "airflow.providers.amazon" or name.startswith("airflow.providers.amazon."):
                blocked.append(name)
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoAmazonProvider())

    # As if uninstalled: Airflow's provider discovery must not see its distribution either.
    import importlib.metadata as stdlib_metadata
    import importlib_metadata

    for module in (stdlib_metadata, importlib_metadata):
        def distributions(*args, _all=module.distributions, **kwargs):
            for dist in _all(*args, **kwargs):
                if (dist.metadata["Name"] or "").lower() != "apache-airflow-providers-amazon":
                    yield dist
        module.distributions = distributions

    from airflow_sparklag.hooks.sparklag import SparkLagHook

    kafka, keys_conn, role_conn, location, live_kafka = sys.argv[1:6]
    hook = SparkLagHook(kafka, aws_conn_id=keys_conn)
    options = hook.get_conn().s3_options
    recorded = hook.committed_offsets(location)
    # test_connection() checks Kafka first: a connection to a broker that answers.
    tested = SparkLagHook(live_kafka, aws_conn_id=keys_conn).test_connection()
    try:
        SparkLagHook(kafka, aws_conn_id=role_conn).s3_client()
        role_error = None
    except ValueError as exc:
        role_error = str(exc)
    print(json.dumps({
        "options": sorted(options),
        "recorded": {k: v for k, v in recorded.items()
                     if k not in ("location", "committed_at", "committed_at_ms")},
        "test_connection": tested,
        "blocked": blocked,
        "amazon_loaded": sorted(m for m in sys.modules if m.startswith("airflow.providers.amazon")),
        "role_error": role_error,
    }))
    """
)


@pytest.mark.testbed
def test_without_the_amazon_provider_the_connection_is_read_directly(
    s3, s3_checkpoint, local_ck35, kafka_conn, monkeypatch, tmp_path
):
    keys = set_conn(
        monkeypatch,
        "amazon_fallback_keys",
        login=s3.options["aws_access_key_id"],
        password=s3.options["aws_secret_access_key"],
        extra=keys_extra(s3),
    )
    role = set_conn(
        monkeypatch,
        "amazon_fallback_role",
        login=s3.options["aws_access_key_id"],
        password="fallback-role-secret",
        extra=role_extra(s3),
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            FALLBACK_SCRIPT,
            *(KAFKA_CONN_ID, keys, role, s3_checkpoint, kafka_conn),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=airflow_env(tmp_path),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["blocked"], "the hook never tried the amazon provider"
    assert result["amazon_loaded"] == []
    assert result["options"] == [
        "aws_access_key_id",
        "aws_secret_access_key",
        "endpoint_url",
        "region_name",
    ]
    assert result["recorded"] == local_ck35
    ok, message = result["test_connection"]
    assert ok, message
    assert message.endswith("client from the connection)"), message
    # role_arn cannot be honoured without the provider: a clear error, not the base keys.
    assert "role_arn" in result["role_error"]
    assert "apache-airflow-providers-amazon" in result["role_error"]
    assert "fallback-role-secret" not in out.stdout + out.stderr


@pytest.mark.testbed
def test_secrets_stay_out_of_reprs_logs_and_errors(s3, s3_checkpoint, monkeypatch, caplog, capfd):
    secret = f"conn-secret-{uuid.uuid4().hex}"
    token = f"conn-token-{uuid.uuid4().hex}"
    # Airflow's task logs are at INFO; the provider's and our loggers at DEBUG on top. (botocore's
    # own DEBUG log prints signed requests, session token included: that is botocore's, on any
    # path, and no deployment should run it at DEBUG.)
    caplog.set_level(logging.INFO)
    for name in ("airflow.providers.amazon", "airflow.task.hooks", "airflow_sparklag"):
        caplog.set_level(logging.DEBUG, logger=name)
    # moto does not check signatures: any keys are accepted, so these can be unique markers.
    conn_id = set_conn(
        monkeypatch,
        "amazon_secret",
        login="AKIASPARKLAGMARKER",
        password=secret,
        extra=role_extra(s3, aws_session_token=token),
    )
    hook = SparkLagHook(KAFKA_CONN_ID, aws_conn_id=conn_id)
    options = hook.s3_client().options
    hook.read_checkpoint(s3_checkpoint)
    assumed = frozen_credentials(options)
    secrets = [secret, token, assumed.secret_key, assumed.token]
    texts = [repr(hook.get_conn()), repr(options), repr(hook.__dict__)]

    # An S3 error (missing bucket) and an STS error (nothing listens on port 1).
    with pytest.raises(Exception) as missing:
        hook.read_checkpoint(f"s3a://no-such-bucket-{uuid.uuid4().hex[:6]}/ck")
    texts.append(f"{missing.type.__name__}: {missing.value}")
    dead = set_conn(
        monkeypatch,
        "amazon_dead_sts",
        login="AKIASPARKLAGMARKER",
        password=secret,
        extra=role_extra(s3, sts_endpoint="http://127.0.0.1:1", aws_session_token=token),
    )
    dead_hook = SparkLagHook(KAFKA_CONN_ID, aws_conn_id=dead)
    with pytest.raises(Exception) as sts_down:
        dead_hook.read_checkpoint(s3_checkpoint)
    assert "127.0.0.1:1" in str(sts_down.value)
    texts.append(f"{sts_down.type.__name__}: {sts_down.value}")
    texts.append(dead_hook.scrub(f"{sts_down.value} {secret} {token}"))

    captured = capfd.readouterr()
    texts += [caplog.text, captured.out, captured.err]
    # The provider did log about this connection ...
    assert any(f"conn_id='{conn_id}'" in text for text in texts)
    for text in texts:
        for value in secrets:
            assert value not in text  # ... but never a secret


@pytest.mark.testbed
def test_snapshot_and_migration_read_and_write_with_the_assumed_role(
    s3, kafka_conn, s3_checkpoint, monkeypatch
):
    """The operators that write (snapshot, migration) go through the same session as checks:
    the amazon provider's client, so role_arn works for them too (it did not: they were given
    the connection's raw keys)."""
    from airflow_sparklag.operators.snapshot import (
        CheckpointMigrationOperator,
        CheckpointSnapshotOperator,
    )

    base_key = s3.options["aws_access_key_id"]
    conn_id = set_conn(
        monkeypatch,
        "amazon_role_writes",
        login=base_key,
        password=s3.options["aws_secret_access_key"],
        extra=role_extra(s3, assume_role_kwargs={"RoleSessionName": "sparklag-writes"}),
    )
    # The process's shared client for this connection: the operators' hooks borrow it too.
    options = SparkLagHook(kafka_conn, aws_conn_id=conn_id).s3_client().options
    seen = record_access_key_ids(options["client"])
    prefix = s3_checkpoint.rsplit("/", 1)[-1]
    connections = {"kafka_config_id": kafka_conn, "aws_conn_id": conn_id}
    snapshot = CheckpointSnapshotOperator(
        task_id="snapshot",
        location=s3_checkpoint,
        snapshot_root=f"s3a://checkpoints/{prefix}-snapshots",
        **connections,
    ).execute({})["results"][0]
    migration = CheckpointMigrationOperator(
        task_id="migrate",
        location=s3_checkpoint,
        archive_root=f"s3a://checkpoints/{prefix}-archive",
        quiet_period=0,
        **connections,
    ).execute({})["results"][0]

    assert snapshot["committed_batch_id"] == 6 and migration["status"] == "completed"
    listed = s3.client().list_objects_v2(Bucket="checkpoints", Prefix=f"{prefix}")["Contents"]
    keys = [item["Key"] for item in listed]
    assert any(k.startswith(f"{prefix}-snapshots/") and k.endswith(".json") for k in keys)
    assert any(k.startswith(f"{prefix}-archive/") and k.endswith("journal.json") for k in keys)
    assert not any(k.startswith(f"{prefix}/") for k in keys)  # archived: the original is gone
    # Every request of the snapshot and the migration (reads, writes, copies, deletes) was
    # signed with the credentials STS issued for the role, never with the connection's keys
    # (boto3's seen here: writes, copies, deletes; the reads go through obstore over the same
    # session).
    assumed = frozen_credentials(options)
    assert assumed.token and assumed.access_key != base_key
    assert len(seen) > 10 and set(seen) == {assumed.access_key}
