"""Airflow connections -> the Kafka config and storage options a Session is built from.

The connections are the ecosystem's own, nothing new to configure:

- ``kafka``: the apache-kafka provider's connection; its ``extra`` is plain librdkafka
  configuration (``{"bootstrap.servers": "broker:9092", ...}``).
- ``aws`` (S3 checkpoints): with the amazon provider installed, its ``AwsBaseHook`` builds the
  S3 client, so everything that connection type supports works (``role_arn`` assume-role,
  ``profile_name``, session tokens, ``region_name``, ``endpoint_url``, ``service_config``,
  ``config_kwargs``, ``verify``). Without it the connection is read directly: login/password =
  access key id and secret, extra ``region_name``, ``endpoint_url``, ``aws_session_token``.
- ``webhdfs`` (HDFS checkpoints): host (comma-separated NameNodes for HA), port (default 9870),
  login = HDFS user, extra ``use_ssl``.

No secret from a connection is ever put in a log line, an XCom value or an error message:
:meth:`ResolvedConnections.scrub` removes every value that is not known to be safe.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_sparklag.redact import is_secret_key, kafka_secrets, scrub, secret_parts

if TYPE_CHECKING:
    from airflow.sdk import Connection

_AWS_EXTRA_OPTIONS = ("region_name", "endpoint_url", "aws_session_token")
# Settings of an ``aws`` connection that only the amazon provider's AwsBaseHook understands.
_AMAZON_PROVIDER_ONLY = ("role_arn", "assume_role_method", "profile_name")
DEFAULT_WEBHDFS_PORT = 9870


@dataclass(frozen=True)
class ResolvedConnections:
    """Kafka config and storage options read from the connections. Never printed in full."""

    kafka_config: dict[str, Any] = field(repr=False)
    s3_options: dict[str, Any] | None = field(default=None, repr=False)
    webhdfs_options: dict[str, Any] | None = field(default=None, repr=False)
    # Extras of the aws connection that need the amazon provider (e.g. "role_arn").
    aws_provider_only: tuple[str, ...] = ()
    # connection_fingerprint() of each connection; "" means: do not share its clients.
    kafka_fingerprint: str = field(default="", repr=False)
    aws_fingerprint: str = field(default="", repr=False)

    @property
    def secrets(self) -> list[str]:
        """Every value that may be secret, so that messages can be scrubbed of them: each Kafka
        setting outside the known-safe keys (``sasl.jaas.config``, typo keys, OAuth config,
        ...) and every secret-looking storage option, with anything quoted inside them."""
        values = list(kafka_secrets(self.kafka_config))
        for options in (self.s3_options or {}, self.webhdfs_options or {}):
            for key, value in options.items():
                if is_secret_key(key) and isinstance(value, str):
                    values.extend(secret_parts(value))
        return values

    def scrub(self, message: str) -> str:
        return scrub(message, self.secrets)


# Fingerprints are keyed with a secret of this process only: they tell connections apart within
# the process, and a fingerprint seen anywhere else cannot be checked against guessed passwords.
_FINGERPRINT_KEY = os.urandom(32)


def connection_fingerprint(conn: Connection) -> str:
    """HMAC-SHA256 of every field of ``conn`` that shapes a client (the fields are not kept)."""
    fields = {
        "conn_type": conn.conn_type,
        "host": conn.host,
        "schema": conn.schema,
        "login": conn.login,
        "password": conn.password,
        "port": conn.port,
        "extra": conn.extra_dejson,
    }
    data = json.dumps(fields, sort_keys=True, default=str).encode()
    return hmac.new(_FINGERPRINT_KEY, data, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class SharedClientKey:
    """What a shared client is cached under. Holds no secret: the fingerprint is a keyed hash."""

    kind: str  # "s3" or "kafka"
    conn_id: str
    fingerprint: str  # connection_fingerprint() of the connection the client was built from
    settings: tuple[Any, ...] = ()  # hook settings that shape the client too (Kafka timeout)


def kafka_config_from(conn: Connection) -> dict[str, Any]:
    config = dict(conn.extra_dejson or {})
    if not config.get("bootstrap.servers"):
        raise ValueError(
            f"Kafka connection {conn.conn_id!r} has no 'bootstrap.servers' in its extra; the "
            'extra is librdkafka config, e.g. {"bootstrap.servers": "broker:9092"}'
        )
    return config


def s3_options_from(conn: Connection) -> dict[str, Any]:
    extra = dict(conn.extra_dejson or {})
    options: dict[str, Any] = {}
    key_id = conn.login or extra.get("aws_access_key_id")
    secret = conn.password or extra.get("aws_secret_access_key")
    if key_id:
        options["aws_access_key_id"] = key_id
    if secret:
        options["aws_secret_access_key"] = secret
    for name in _AWS_EXTRA_OPTIONS:
        if extra.get(name):
            options[name] = extra[name]
    # The amazon provider also accepts the endpoint per service.
    service_endpoint = (extra.get("service_config") or {}).get("s3", {}).get("endpoint_url")
    if service_endpoint and "endpoint_url" not in options:
        options["endpoint_url"] = service_endpoint
    return options


def amazon_provider_only_settings(conn: Connection) -> tuple[str, ...]:
    """The extras of an ``aws`` connection that only the amazon provider can honour."""
    extra = dict(conn.extra_dejson or {})
    return tuple(name for name in _AMAZON_PROVIDER_ONLY if extra.get(name))


def amazon_s3_options(
    aws_conn_id: str, bounds: Mapping[str, float] | None = None
) -> dict[str, Any] | None:
    """S3 options from the amazon provider: a ready client built by its ``AwsBaseHook``.

    The client carries whatever the ``aws`` connection configures (assume-role with refreshing
    credentials, profiles, session tokens, region, ``endpoint_url``/``service_config``,
    ``config_kwargs``, ``verify``). Returns ``None`` when the provider is not installed. The
    provider is imported here, never at module import.
    """
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("airflow.providers.amazon"):
            return None
        raise
    from botocore.config import Config

    from airflow_sparklag.storage.s3 import MAX_POOL_CONNECTIONS, client_config

    hook = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
    # S3Storage's own timeouts and retry budget (3 attempts in all, 60 s worst case) for the
    # client the amazon provider builds; the connection's ``config_kwargs`` override them.
    ours = Config(**client_config(**(bounds or {})), max_pool_connections=MAX_POOL_CONNECTIONS)
    config = ours.merge(hook.config)
    client = hook.get_client_type(region_name=hook.region_name, config=config)
    # endpoint_url only names the endpoint in S3Storage's error messages; the client is used.
    return {"client": client, "endpoint_url": client.meta.endpoint_url}


@dataclass(frozen=True)
class S3Client:
    """A ready S3 client for an ``aws`` connection, and how it was built."""

    options: dict[str, Any] = field(repr=False)  # {"client": ..., "endpoint_url": ...}
    from_provider: bool  # built by the amazon provider's AwsBaseHook (else read directly)


def build_s3_client(
    aws_conn_id: str, conns: ResolvedConnections, bounds: Mapping[str, float] | None = None
) -> S3Client:
    """The S3 client for ``aws_conn_id``: the amazon provider's when installed, else one built
    from the connection read directly (keys, region, endpoint; no role_arn or profile).
    ``bounds``: ``connect_timeout`` / ``read_timeout`` of every attempt."""
    options = amazon_s3_options(aws_conn_id, bounds)
    if options is not None:
        return S3Client(options, from_provider=True)
    if conns.aws_provider_only:
        raise ValueError(
            f"AWS connection {aws_conn_id!r} sets {', '.join(conns.aws_provider_only)} in its "
            "extra, which needs the amazon provider: pip install "
            "apache-airflow-providers-amazon (or airflow-provider-sparklag[amazon])"
        )
    from airflow_sparklag.storage.s3 import S3Storage

    direct = conns.s3_options or {}
    client = S3Storage(**direct, **(bounds or {})).client
    return S3Client({"client": client, "endpoint_url": direct.get("endpoint_url")}, False)


def webhdfs_options_from(conn: Connection) -> dict[str, Any]:
    extra = dict(conn.extra_dejson or {})
    if not conn.host:
        raise ValueError(
            f"WebHDFS connection {conn.conn_id!r} has no host: give the NameNode host "
            "(comma-separated NameNodes for HA) and the HTTP port (default 9870)"
        )
    scheme = "https" if str(extra.get("use_ssl", "")).lower() in {"true", "1", "yes"} else "http"
    port = conn.port or DEFAULT_WEBHDFS_PORT
    urls = []
    for host in (h.strip() for h in conn.host.split(",")):
        if host:
            urls.append(host if "://" in host else f"{scheme}://{host}:{port}")
    options: dict[str, Any] = {"url": urls[0] if len(urls) == 1 else urls}
    if conn.login:
        options["user"] = conn.login
    return options
