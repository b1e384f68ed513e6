"""Airflow connections -> the Kafka config and storage options a Session is built from
(docs/connections.md). Where a provider is installed, its hook builds the client; no secret of a
connection ever reaches a log, XCom or error (:meth:`ResolvedConnections.scrub`)."""

from __future__ import annotations

import hashlib
import hmac
import importlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from airflow_sparklag.redact import is_secret_key, kafka_secrets, scrub, secret_parts

if TYPE_CHECKING:
    from airflow.sdk import Connection

_AWS_EXTRA_OPTIONS = ("region_name", "endpoint_url", "aws_session_token")
# Settings of an ``aws`` connection that only the amazon provider's AwsBaseHook understands.
_AMAZON_PROVIDER_ONLY = ("role_arn", "assume_role_method", "profile_name")
DEFAULT_WEBHDFS_PORT = 9870


@dataclass(frozen=True)
class SourceKafka:
    """The ``kafka`` connection a source is measured against. Never printed in full."""

    conn_id: str
    config: dict[str, Any] = field(repr=False)
    fingerprint: str = field(default="", repr=False)


@dataclass(frozen=True)
class ResolvedConnections:
    """Kafka config and storage options read from the connections. Never printed in full."""

    kafka_config: dict[str, Any] = field(repr=False)
    s3_options: dict[str, Any] | None = field(default=None, repr=False)
    webhdfs_options: dict[str, Any] | None = field(default=None, repr=False)
    # fsspec options of gs:// (gcsfs, from gcp_conn_id) and abfs:// (adlfs, from wasb_conn_id)
    gcs_options: dict[str, Any] | None = field(default=None, repr=False)
    azure_options: dict[str, Any] | None = field(default=None, repr=False)
    # Extras of the aws connection that need the amazon provider (e.g. "role_arn").
    aws_provider_only: tuple[str, ...] = ()
    # connection_fingerprint() of each connection: part of its shared clients' keys.
    kafka_fingerprint: str = field(default="", repr=False)
    aws_fingerprint: str = field(default="", repr=False)
    # Sources measured against another cluster: source id -> (kafka connection id, its config,
    # its fingerprint), from the hook's source_kafka_conn_ids (docs/multi-cluster.md).
    source_kafka: dict[str, SourceKafka] = field(default_factory=dict, repr=False)

    @property
    def secrets(self) -> list[str]:
        """Every value that may be secret: each Kafka setting outside the known-safe keys and
        every secret-looking storage option, with anything quoted inside them."""
        values = list(kafka_secrets(self.kafka_config))
        for source in self.source_kafka.values():
            values.extend(kafka_secrets(source.config))
        for options in (
            self.s3_options,
            self.webhdfs_options,
            self.gcs_options,
            self.azure_options,
        ):
            values.extend(option_secrets(options or {}))
        return values

    def scrub(self, message: str) -> str:
        return scrub(message, self.secrets)


# Fingerprints are keyed with a secret of this process only: they tell connections apart within
# the process, and a fingerprint seen anywhere else cannot be checked against guessed passwords.
_FINGERPRINT_KEY = os.urandom(32)


def connection_fingerprint(conn: Connection) -> str:
    """HMAC-SHA256 of every field of ``conn`` that shapes a client (the fields are not kept)."""
    names = ("conn_type", "host", "schema", "login", "password", "port", "extra_dejson")
    fields = {name.removesuffix("_dejson"): getattr(conn, name) for name in names}
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
    """librdkafka config from a ``kafka`` connection, built by the apache-kafka provider when
    it is installed (its callback allowlist, MSK IAM / Google ``oauth_cb``). The config may so
    hold callables: never printed (redact allows only known-safe keys)."""
    config = dict(conn.extra_dejson or {})
    if not config.get("bootstrap.servers"):
        raise ValueError(
            f"Kafka connection {conn.conn_id!r} has no 'bootstrap.servers' in its extra; the "
            'extra is librdkafka config, e.g. {"bootstrap.servers": "broker:9092"}'
        )
    # The apache-kafka provider's config (``KafkaBaseHook._build_config``, the one its own
    # hooks and ``test_connection`` use); the 1.x providers that Airflow 2.11 and 3.0 pin
    # (1.10.2 and 1.13.0 in the compatibility runs) have no such method: plain client config.
    hook_class = _provider_hook("airflow.providers.apache.kafka.hooks.base", "KafkaBaseHook")
    hook = hook_class(kafka_config_id=conn.conn_id) if hook_class is not None else None
    if hook is None or not hasattr(hook, "_build_config"):
        return config
    # The connection is already read (in a trigger: with the async API); the provider's hook
    # must not read it again, synchronously, from inside the event loop.
    hook.get_connection = lambda conn_id: conn
    return dict(hook._build_config()) or config


def _provider_hook(module: str, name: str) -> type[Any] | None:
    """The hook class ``name`` of an Airflow provider's ``module``; None when that provider is
    not installed (any other missing module is an error). Imported here, never at import."""
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith(".".join(module.split(".")[:3])):
            return None
        raise


def s3_options_from(conn: Connection) -> dict[str, Any]:
    extra = dict(conn.extra_dejson or {})
    given = {
        "aws_access_key_id": conn.login or extra.get("aws_access_key_id"),
        "aws_secret_access_key": conn.password or extra.get("aws_secret_access_key"),
        **{name: extra.get(name) for name in _AWS_EXTRA_OPTIONS},
    }
    options = {name: value for name, value in given.items() if value}
    # The amazon provider also accepts the endpoint per service.
    service_endpoint = (extra.get("service_config") or {}).get("s3", {}).get("endpoint_url")
    if service_endpoint and "endpoint_url" not in options:
        options["endpoint_url"] = service_endpoint
    return options


def amazon_provider_only_settings(conn: Connection) -> tuple[str, ...]:
    """The extras of an ``aws`` connection that only the amazon provider can honour."""
    extra = dict(conn.extra_dejson or {})
    return tuple(name for name in _AMAZON_PROVIDER_ONLY if extra.get(name))


class StorageBounds(TypedDict, total=False):
    """Bounds of each storage attempt, from the hook's ``storage_timeout`` (none given: the
    backends' defaults); keyword arguments of ``client_config`` and of the backends."""

    connect_timeout: float
    read_timeout: float


@dataclass(frozen=True)
class S3Client:
    """A ready S3 client for an ``aws`` connection, and how it was built."""

    options: dict[str, Any] = field(repr=False)  # {"client": ..., "session": ..., ...}
    from_provider: bool  # built by the amazon provider's AwsBaseHook (else read directly)


def build_s3_client(
    aws_conn_id: str, conns: ResolvedConnections, bounds: StorageBounds
) -> S3Client:
    """The S3 client for ``aws_conn_id``: the amazon provider's ``AwsBaseHook`` builds it when
    installed (assume-role, profiles, ...); else one from the connection read directly."""
    hook_class = _provider_hook("airflow.providers.amazon.aws.hooks.base_aws", "AwsBaseHook")
    if hook_class is not None:
        from botocore.config import Config

        from airflow_sparklag.storage.s3 import MAX_POOL_CONNECTIONS, client_config

        hook = hook_class(aws_conn_id=aws_conn_id, client_type="s3")
        # S3Storage's own timeouts and retry budget (3 attempts in all, 60 s worst case) for
        # the client the amazon provider builds; the connection's ``config_kwargs`` override.
        ours = Config(**client_config(**bounds), max_pool_connections=MAX_POOL_CONNECTIONS)
        session = hook.get_session(region_name=hook.region_name)
        client = session.client(
            "s3",
            endpoint_url=hook.conn_config.get_service_endpoint_url(service_name="s3"),
            config=ours.merge(hook.config),
            verify=hook.verify,
        )
        # The reads (obstore) take the credentials from the same session (an assumed role's,
        # refreshed) and the rest from the client's settings. endpoint_url only names the
        # endpoint in S3Storage's error messages; the client is used.
        options = {"client": client, "session": session, "verify": hook.verify}
        return S3Client({**options, "endpoint_url": client.meta.endpoint_url}, True)
    if conns.aws_provider_only:
        raise ValueError(
            f"AWS connection {aws_conn_id!r} sets {', '.join(conns.aws_provider_only)} in its "
            "extra, which needs the amazon provider: pip install "
            "apache-airflow-providers-amazon (or airflow-provider-sparklag[amazon])"
        )
    from airflow_sparklag.storage import StorageOptions
    from airflow_sparklag.storage.s3 import S3Storage

    # The session's own builder makes the backend; the hooks share its client and session.
    direct = conns.s3_options or {}
    storage = StorageOptions(s3={**direct, **bounds}).open("s3://")
    assert isinstance(storage, S3Storage)  # the backend of every s3:// location
    options = {"client": storage.client, "session": storage.boto3_session}
    return S3Client({**options, "endpoint_url": direct.get("endpoint_url")}, False)


# A webhdfs_options key -> the field of a webhdfs connection that sets it (below): a core
# message naming the option names the field in a task's error (docs/names.md).
WEBHDFS_FIELDS = {
    "url": "the webhdfs connection's host and port",
    "user": "the webhdfs connection's login",
    **{
        key: f"the webhdfs connection's extra {key!r}"
        for key in ("kerberos", "principal", "keytab", "verify")
    },
}


def in_airflow_words(message: str) -> str:
    """A core message as a task says it (``webhdfs_options['user']``: the connection's login)."""
    for key, said in WEBHDFS_FIELDS.items():
        message = message.replace(f"webhdfs_options[{key!r}]", said)
    return message


def webhdfs_options_from(conn: Connection) -> dict[str, Any]:
    extra = dict(conn.extra_dejson or {})
    if not conn.host:
        raise ValueError(
            f"WebHDFS connection {conn.conn_id!r} has no host: give the NameNode host "
            "(comma-separated NameNodes for HA) and the HTTP port (default 9870)"
        )
    scheme = "https" if str(extra.get("use_ssl", "")).lower() in {"true", "1", "yes"} else "http"
    port = conn.port or DEFAULT_WEBHDFS_PORT
    hosts = [host.strip() for host in conn.host.split(",") if host.strip()]
    urls = [host if "://" in host else f"{scheme}://{host}:{port}" for host in hosts]
    options: dict[str, Any] = {"url": urls[0] if len(urls) == 1 else urls}
    if conn.login:
        options["user"] = conn.login
    options.update(_webhdfs_kerberos(extra))
    if extra.get("verify") not in (None, ""):  # the apache-hdfs provider's: CA bundle, false
        verify = extra["verify"]
        options["verify"] = verify if not isinstance(verify, str) else _bool_or_path(verify)
    return options


def _webhdfs_kerberos(extra: Mapping[str, Any]) -> dict[str, Any]:
    """Kerberos as the apache-hdfs provider decides it (Airflow's ``[core] security =
    kerberos``: the ticket cache that ``airflow kerberos`` keeps fresh), or the extra's
    ``kerberos`` / ``principal`` + ``keytab`` (a keytab renewed by the client itself)."""
    found: dict[str, Any] = {}
    try:
        from airflow.configuration import conf

        if str(conf.get("core", "security", fallback="")).lower() == "kerberos":
            found["kerberos"] = True
    except Exception:  # no Airflow configuration to read: the extra decides
        pass
    if _bool_or_path(str(extra.get("kerberos", ""))) is True:
        found["kerberos"] = True
    for key in ("principal", "keytab"):
        if extra.get(key):
            found[key] = str(extra[key])
    return found


def _bool_or_path(value: str) -> bool | str:
    lowered = value.strip().lower()
    if lowered in {"true", "1", "yes"}:
        return True
    if lowered in {"false", "0", "no", ""}:
        return False
    return value


# -- GCS (gcsfs) and Azure (adlfs) -------------------------------------------------------------

# Storage options that hold a secret although no SECRET_MARKERS word is in their name.
_SECRET_OPTION_KEYS = frozenset({"connection_string", "private_key", "private_key_id"})


def option_secrets(options: Mapping[str, Any], inside_secret: bool = False) -> list[str]:
    """Every secret text in storage options, nested ones too (a service-account dict under
    ``token``); every non-blank text ``inside_secret`` (a mapping under a secret key)."""
    found: list[str] = []
    for key, value in options.items():
        secret = inside_secret or is_secret_key(str(key)) or key in _SECRET_OPTION_KEYS
        if isinstance(value, Mapping):
            found.extend(option_secrets(value, secret))
        elif secret and isinstance(value, str) and (value.strip() or not inside_secret):
            found.extend(secret_parts(value))
    return found


def _extra(conn: Connection, *conn_types: str) -> dict[str, Any]:
    """The connection's extra with the old ``extra__<type>__`` prefixes removed."""
    extra: dict[str, Any] = {}
    for key, value in dict(conn.extra_dejson or {}).items():
        for conn_type in conn_types:
            prefix = f"extra__{conn_type}__"
            if key.startswith(prefix):
                key = key[len(prefix) :]
        if value not in (None, ""):
            extra.setdefault(key, value)
    return extra


def gcs_options_from(conn: Connection) -> dict[str, Any]:
    """gcsfs options from a ``google_cloud_platform`` connection read directly; without a
    ``token`` the google provider, when installed, builds the credentials."""
    extra = _extra(conn, "google_cloud_platform", "gcp")
    options: dict[str, Any] = {}
    if extra.get("keyfile_dict"):
        keyfile = extra["keyfile_dict"]
        options["token"] = json.loads(keyfile) if isinstance(keyfile, str) else dict(keyfile)
    elif extra.get("key_path"):
        options["token"] = str(extra["key_path"])
    elif extra.get("token"):
        options["token"] = extra["token"]
    for name in ("project", "endpoint_url"):
        if extra.get(name):
            options[name] = extra[name]
    return options


def google_provider_credentials(gcp_conn_id: str) -> tuple[Any, str | None] | None:
    """(credentials, project id) from the google provider's ``GoogleBaseHook``; None when the
    provider is not installed."""
    module = "airflow.providers.google.common.hooks.base_google"
    hook_class = _provider_hook(module, "GoogleBaseHook")
    if hook_class is None:
        return None
    credentials, project_id = hook_class(gcp_conn_id=gcp_conn_id).get_credentials_and_project_id()
    return credentials, project_id


def azure_options_from(conn: Connection) -> dict[str, Any]:
    """adlfs options from a ``wasb`` or ``adls`` connection read directly."""
    extra = _extra(conn, "wasb", "adls", "azure_data_lake")
    options: dict[str, Any] = {}
    if extra.get("connection_string"):
        return {"connection_string": str(extra["connection_string"])}
    account = extra.get("account_name") or _account_of(conn)
    if extra.get("tenant_id"):
        options.update(tenant_id=extra["tenant_id"], client_id=conn.login)
        if conn.password:
            options["client_secret"] = conn.password
    else:
        account = account or conn.login
        if conn.password:
            options["account_key"] = conn.password
    if extra.get("shared_access_key"):
        options["account_key"] = str(extra["shared_access_key"])
    if extra.get("sas_token"):
        options["sas_token"] = str(extra["sas_token"])
    if account:
        options["account_name"] = account
    if not options.get("account_name"):
        raise ValueError(
            f"Azure connection {conn.conn_id!r} names no storage account: give login = account "
            "name and password = account key, or extra connection_string / account_name"
        )
    return options


def _account_of(conn: Connection) -> str | None:
    """The account name from the host (``https://ACCOUNT.blob.core.windows.net`` or ACCOUNT)."""
    host = (conn.host or "").strip().split("://", 1)[-1].split("/", 1)[0]
    return host.split(".", 1)[0] or None
