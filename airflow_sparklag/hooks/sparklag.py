"""SparkLagHook: Airflow connections in, the core's lag and health results out.

Connections are the ecosystem's own, nothing new to configure:

- ``kafka_config_id``: the apache-kafka provider's ``kafka`` connection; its ``extra`` is plain
  librdkafka configuration (``{"bootstrap.servers": "broker:9092", ...}``).
- ``aws_conn_id`` (S3 checkpoints): an ``aws`` connection. With the amazon provider installed,
  its ``AwsBaseHook`` builds the S3 client, so everything that connection type supports works
  (``role_arn`` assume-role, ``profile_name``, session tokens, ``region_name``, ``endpoint_url``,
  ``service_config``, ``config_kwargs``, ``verify``). Without it the connection is read directly:
  login/password = access key id and secret, extra ``region_name``, ``endpoint_url`` (MinIO,
  Ceph), ``aws_session_token``.
- ``webhdfs_conn_id`` (HDFS checkpoints): a ``webhdfs`` connection; host (comma-separated
  NameNodes for HA), port (default 9870), login = HDFS user, extra ``use_ssl``.

Clients are shared by every hook of a process (:data:`SHARED_CLIENTS`): a triggerer running
100 deferred sensors on one ``aws`` and one ``kafka`` connection holds one S3 client and one
Kafka client, not 100 of each. They are keyed on the connection id and a fingerprint of the
connection's fields, so an edited connection gets new clients.

Nothing heavy (confluent_kafka, boto3, requests) is imported until a check runs, and no secret
from a connection is ever put in a log line, an XCom value or an error message.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from airflow_sparklag.checkpoint import CheckpointReader, CheckpointState
    from airflow_sparklag.fleet import FleetChecker
    from airflow_sparklag.kafka import KafkaOffsetsClient

_SECRET_MARKERS = ("password", "secret", "token", "credential", "key")
_AWS_EXTRA_OPTIONS = ("region_name", "endpoint_url", "aws_session_token")
# Settings of an ``aws`` connection that only the amazon provider's AwsBaseHook understands.
_AMAZON_PROVIDER_ONLY = ("role_arn", "assume_role_method", "profile_name")
# S3Storage's own timeouts and retry budget (and its connection pool), for the clients the
# amazon provider builds; the connection's ``config_kwargs`` override them.
_S3_CLIENT_CONFIG = {
    "connect_timeout": 5.0,
    "read_timeout": 20.0,
    "retries": {"max_attempts": 3, "mode": "standard"},
}
DEFAULT_WEBHDFS_PORT = 9870
SHARED_CLIENTS_MAX = 32  # connections (S3 and Kafka together) whose clients a process keeps
# Health names (``Health.value``) a sensor waits for unless told otherwise.
DEFAULT_ACCEPT = ("OK",)


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
        """Every secret-looking value, so that messages can be scrubbed of them."""
        values: list[str] = []
        for options in (self.kafka_config, self.s3_options or {}, self.webhdfs_options or {}):
            for key, value in options.items():
                secret = any(m in key.lower() for m in _SECRET_MARKERS)
                # Scrubbing "a" out of every message would help nobody.
                if secret and isinstance(value, str) and len(value) >= 4:
                    values.append(value)
        return values

    def scrub(self, message: str) -> str:
        for secret in self.secrets:
            message = message.replace(secret, "***")
        return message


@dataclass(frozen=True)
class Probe:
    """One poll of a wait condition: is the wait over, did it fail for good, and what was seen.

    ``payload`` is JSON-safe (it goes to XCom and into trigger events).
    """

    done: bool
    message: str
    payload: dict[str, Any]
    failed: bool = False  # the condition can no longer be met (e.g. data loss): stop waiting


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


class SharedClients:
    """The clients of a process, shared by all its hooks: thread-safe, least recently used
    first out beyond ``maxsize`` connections.

    The cache owns its references; a hook only borrows a client and drops it on ``close()``.
    Nothing is closed explicitly: a client dropped from the cache while hooks still use it
    keeps working for them, and is freed with the last reference. A client is built once per
    key even when many hooks ask at the same time (the others wait for it); a build that fails
    caches nothing.
    """

    def __init__(self, maxsize: int = SHARED_CLIENTS_MAX) -> None:
        self.maxsize = maxsize
        self._lock = threading.Lock()
        self._clients: OrderedDict[SharedClientKey, Any] = OrderedDict()
        self._building: dict[SharedClientKey, threading.Lock] = {}
        self._forked_away: list[Any] = []

    def get(self, key: SharedClientKey, build: Callable[[], Any]) -> Any:
        """The client cached under ``key``, built with ``build()`` on first use."""
        with self._lock:
            client = self._hit(key)
            if client is not None:
                return client
            building = self._building.setdefault(key, threading.Lock())
        with building:
            try:
                with self._lock:
                    client = self._hit(key)
                if client is not None:  # another hook built it while this one waited
                    return client
                client = build()
                with self._lock:
                    self._clients[key] = client
                    while len(self._clients) > self.maxsize:
                        self._clients.popitem(last=False)
                return client
            finally:
                with self._lock:
                    if self._building.get(key) is building:
                        del self._building[key]

    def _hit(self, key: SharedClientKey) -> Any:
        client = self._clients.get(key)
        if client is not None:
            self._clients.move_to_end(key)
        return client

    def cached_keys(self) -> list[SharedClientKey]:
        """The keys, least recently used first."""
        with self._lock:
            return list(self._clients)

    def __len__(self) -> int:
        return len(self._clients)

    def clear(self) -> None:
        with self._lock:
            self._clients.clear()

    def _after_fork_in_child(self) -> None:
        # A forked child must not use its parent's clients (their sockets are the parent's and
        # librdkafka's threads are not copied), nor free them (freeing a librdkafka handle whose
        # threads are gone can hang): keep them unreachable, start empty, with a new lock (the
        # old one may have been held by a thread that does not exist in the child).
        self._forked_away.append(self._clients)
        self._clients = OrderedDict()
        self._building = {}
        self._lock = threading.Lock()


SHARED_CLIENTS = SharedClients()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=SHARED_CLIENTS._after_fork_in_child)


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


def amazon_s3_options(aws_conn_id: str) -> dict[str, Any] | None:
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

    from airflow_sparklag.storage.s3 import MAX_POOL_CONNECTIONS

    hook = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
    ours = Config(**_S3_CLIENT_CONFIG, max_pool_connections=MAX_POOL_CONNECTIONS)
    config = ours.merge(hook.config)
    client = hook.get_client_type(region_name=hook.region_name, config=config)
    # endpoint_url only names the endpoint in S3Storage's error messages; the client is used.
    return {"client": client, "endpoint_url": client.meta.endpoint_url}


@dataclass(frozen=True)
class S3Client:
    """A ready S3 client for an ``aws`` connection, and how it was built."""

    options: dict[str, Any] = field(repr=False)  # {"client": ..., "endpoint_url": ...}
    from_provider: bool  # built by the amazon provider's AwsBaseHook (else read directly)


def build_s3_client(aws_conn_id: str, conns: ResolvedConnections) -> S3Client:
    """The S3 client for ``aws_conn_id``: the amazon provider's when installed, else one built
    from the connection read directly (keys, region, endpoint; no role_arn or profile)."""
    options = amazon_s3_options(aws_conn_id)
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
    client = S3Storage(**direct).client
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


def epoch_seconds(value: Any) -> float | None:
    """A moment given as epoch seconds, epoch milliseconds, ISO-8601 text or a datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return value.timestamp()
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        text = str(value).strip()
        try:
            number = float(text)
        except ValueError:
            return epoch_seconds(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")))
    return number / 1000.0 if number > 1e11 else number  # > year 5138 in seconds: it is ms


def committed_kafka_offsets(state: CheckpointState) -> dict[str, dict[str, dict[int, int]]]:
    """source id -> topic -> partition -> committed (next to read) offset, Kafka sources only."""
    if state.committed is None:
        return {}
    return {
        source.source_id: {t: dict(parts) for t, parts in source.kafka.items()}
        for source in state.committed.sources
        if source.kind == "kafka" and source.kafka is not None
    }


class SparkLagHook(BaseHook):
    """Reads a Spark query's checkpoint and Kafka offsets with Airflow connections.

    Example::

        hook = SparkLagHook(kafka_config_id="kafka_default", aws_conn_id="aws_default")
        result = hook.check("s3a://bucket/checkpoints/orders",
                            thresholds={"max_lag_records_total": 10_000})
        print(result.verdict.health.value, result.report.total_lag)

    One hook keeps its checkpoint readers between calls, so a trigger that polls with the same
    hook only fetches new batch files. Its S3 and Kafka clients are the process's shared ones
    (:data:`SHARED_CLIENTS`); :meth:`close` drops the hook's hold on them and never closes them.
    """

    conn_name_attr = "kafka_config_id"
    default_conn_name = "kafka_default"
    conn_type = "kafka"
    hook_name = "Spark Kafka lag"

    def __init__(
        self,
        kafka_config_id: str = default_conn_name,
        aws_conn_id: str | None = None,
        webhdfs_conn_id: str | None = None,
        *,
        kafka_timeout: float = 10.0,
    ) -> None:
        super().__init__()
        self.kafka_config_id = kafka_config_id
        self.aws_conn_id = aws_conn_id
        self.webhdfs_conn_id = webhdfs_conn_id
        self.kafka_timeout = kafka_timeout
        self._connections: ResolvedConnections | None = None
        self._s3_client: S3Client | None = None
        self._readers: dict[str, CheckpointReader] = {}
        self._kafka_client: KafkaOffsetsClient | None = None
        self._owns_kafka_client = False  # True only for a client that could not be shared

    # -- connections ---------------------------------------------------------------------

    @staticmethod
    def _resolved(
        kafka: Connection, aws: Connection | None, hdfs: Connection | None
    ) -> ResolvedConnections:
        return ResolvedConnections(
            kafka_config=kafka_config_from(kafka),
            s3_options=s3_options_from(aws) if aws is not None else None,
            webhdfs_options=webhdfs_options_from(hdfs) if hdfs is not None else None,
            aws_provider_only=amazon_provider_only_settings(aws) if aws is not None else (),
            kafka_fingerprint=connection_fingerprint(kafka),
            aws_fingerprint=connection_fingerprint(aws) if aws is not None else "",
        )

    def get_conn(self) -> ResolvedConnections:
        """The Kafka config and storage options (read once per hook).

        ``s3_options`` is what the ``aws`` connection holds, read directly; the options S3 is
        actually opened with are :meth:`s3_storage_options`.
        """
        if self._connections is None:
            get = self.get_connection
            self._connections = self._resolved(
                get(self.kafka_config_id),
                get(self.aws_conn_id) if self.aws_conn_id else None,
                get(self.webhdfs_conn_id) if self.webhdfs_conn_id else None,
            )
        return self._connections

    async def aget_conn(self) -> ResolvedConnections:
        """:meth:`get_conn` for the triggerer's event loop (async connection API)."""
        if self._connections is None:
            kafka = await self.aget_connection(self.kafka_config_id)
            aws = await self.aget_connection(self.aws_conn_id) if self.aws_conn_id else None
            hdfs = (
                await self.aget_connection(self.webhdfs_conn_id) if self.webhdfs_conn_id else None
            )
            self._connections = self._resolved(kafka, aws, hdfs)
        return self._connections

    def s3_storage_options(self) -> dict[str, Any] | None:
        """How ``aws_conn_id`` opens S3 (resolved once per hook, on first use).

        With the amazon provider installed: ``{"client": ..., "endpoint_url": ...}``, a client
        built by its ``AwsBaseHook`` (assume-role, profiles, ... all work), the one shared by
        every hook of the process on this connection. Without it: the connection's keys,
        region and endpoint read directly (:func:`s3_options_from`); checkpoints are then read
        through one shared client built from them. ``None`` without ``aws_conn_id``: boto3's
        default credential chain.
        """
        s3 = self._shared_s3_client()
        if s3 is None:
            return None
        return s3.options if s3.from_provider else self.get_conn().s3_options

    def _shared_s3_client(self) -> S3Client | None:
        conns = self.get_conn()
        if self.aws_conn_id is None or conns.s3_options is None:
            return None
        if self._s3_client is None:
            aws_conn_id = self.aws_conn_id

            def build() -> S3Client:
                return build_s3_client(aws_conn_id, conns)

            if conns.aws_fingerprint:
                key = SharedClientKey("s3", aws_conn_id, conns.aws_fingerprint)
                self._s3_client = SHARED_CLIENTS.get(key, build)
            else:  # connections not read from Airflow: a client of this hook's own
                self._s3_client = build()
        return self._s3_client

    def _storage_kwargs(self) -> dict[str, Any]:
        conns = self.get_conn()
        s3 = self._shared_s3_client()
        return {
            "s3_options": s3.options if s3 is not None else None,
            "webhdfs_options": conns.webhdfs_options,
        }

    def scrub(self, message: str) -> str:
        """``message`` without any secret of the connections (for logs, XCom, events)."""
        return self._connections.scrub(message) if self._connections else message

    # -- the core's checks ---------------------------------------------------------------

    def check(
        self,
        location: str,
        *,
        thresholds: Mapping[str, Any] | None = None,
        history: int = 10,
        exact_time_lag: bool = False,
        read_committed: bool | None = None,
    ) -> Any:
        """Lag and health of one checkpoint: the core's ``CheckResult(report, verdict)``."""
        from airflow_sparklag.monitor import check_checkpoint

        return check_checkpoint(
            location,
            kafka_config=self.get_conn().kafka_config,
            thresholds=thresholds,
            history=history,
            exact_time_lag=exact_time_lag,
            read_committed=read_committed,
            kafka_client=self.kafka_client(),
            read_state=self._cached_read,
        )

    def check_many(
        self,
        locations: Sequence[str],
        *,
        thresholds: Mapping[str, Any] | None = None,
        history: int = 10,
        exact_time_lag: bool = False,
        read_committed: bool | None = None,
    ) -> list[Any]:
        """One ``CheckResult`` per location (a failed check carries ``.error``, no exception)."""
        from airflow_sparklag.monitor import check_checkpoints

        return list(
            check_checkpoints(
                list(locations),
                kafka_config=self.get_conn().kafka_config,
                thresholds=thresholds,
                history=history,
                exact_time_lag=exact_time_lag,
                read_committed=read_committed,
                kafka_client=self.kafka_client(),
                read_state=self._cached_read,
            )
        )

    def fleet_checker(
        self,
        locations: Sequence[str] = (),
        *,
        prefix: str | Sequence[str] | None = None,
        **options: Any,
    ) -> FleetChecker:
        """A :class:`~airflow_sparklag.fleet.FleetChecker` over this hook's connections (its
        shared Kafka and S3 clients); ``options`` are FleetChecker's (thresholds, history, ...).
        Closing the checker leaves the shared Kafka client open."""
        from airflow_sparklag.fleet import FleetChecker

        return FleetChecker(
            list(locations),
            prefix=prefix,
            kafka_config=self.get_conn().kafka_config,
            kafka_client=self.kafka_client(),
            **self._storage_kwargs(),
            **options,
        )

    def _cached_read(self, location: str, history: int) -> CheckpointState:
        # Sensors and triggers poll through one hook: keeping the readers means a poke reads
        # only the offsets files that appeared since the last one.
        return self.read_checkpoint(location, history=history)

    def read_checkpoint(self, location: str, *, history: int = 1) -> CheckpointState:
        """The checkpoint's state (committed batch, offsets); readers are cached per location."""
        from airflow_sparklag.checkpoint import CheckpointReader
        from airflow_sparklag.storage import open_storage

        reader = self._readers.get(location)
        if reader is None:
            reader = CheckpointReader(open_storage(location, **self._storage_kwargs()), location)
            self._readers[location] = reader
        return reader.read(history=history)

    def committed_offsets(self, location: str) -> dict[str, Any]:
        """What the query has processed, JSON-safe: for recording before a stop or migration.

        ``{"location", "query_id", "committed_batch_id", "committed_at", "offsets":
        {source_id: {topic: {"partition": offset}}}}`` (offsets are the NEXT offsets to read).
        """
        state = self.read_checkpoint(location)
        return {
            "location": location,
            "query_id": state.query_id,
            "committed_batch_id": state.committed_batch_id,
            "committed_at": state.commit_modified,
            "offsets": {
                source: {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in topics.items()}
                for source, topics in committed_kafka_offsets(state).items()
            },
        }

    def kafka_client(self) -> KafkaOffsetsClient:
        """The Kafka client of ``kafka_config_id``, shared by every hook of the process that
        uses the same connection and timeout (it is thread-safe); do not close it."""
        from airflow_sparklag.kafka import KafkaOffsetsClient

        if self._kafka_client is None:
            conns = self.get_conn()

            def build() -> KafkaOffsetsClient:
                return KafkaOffsetsClient(conns.kafka_config, self.kafka_timeout)

            if conns.kafka_fingerprint:
                settings = (self.kafka_timeout,)
                key = SharedClientKey(
                    "kafka", self.kafka_config_id, conns.kafka_fingerprint, settings
                )
                self._kafka_client = SHARED_CLIENTS.get(key, build)
            else:  # connections not read from Airflow: a client of this hook's own
                self._kafka_client = build()
                self._owns_kafka_client = True
        return self._kafka_client

    def close(self) -> None:
        """Drop the readers and this hook's hold on its clients. Shared clients stay open for
        the other hooks (and the next use of this one); a client of the hook's own is closed."""
        if self._kafka_client is not None and self._owns_kafka_client:
            self._kafka_client.close()
        self._kafka_client = None
        self._owns_kafka_client = False
        self._s3_client = None
        self._readers.clear()

    # -- wait conditions (shared by sensors in poke mode and by triggers) ----------------

    def probe_health(
        self,
        location: str,
        *,
        thresholds: Mapping[str, Any] | None = None,
        accept: Iterable[str] = DEFAULT_ACCEPT,
        fail_on_data_loss: bool = True,
        history: int = 10,
        exact_time_lag: bool = False,
        read_committed: bool | None = None,
    ) -> Probe:
        """Done when the verdict is one of ``accept``; failed for good on DATA_LOSS."""
        result = self.check(
            location,
            thresholds=thresholds,
            history=history,
            exact_time_lag=exact_time_lag,
            read_committed=read_committed,
        )
        health = health_name(result.verdict.health)
        accepted = {a.upper() for a in accept}
        payload = result.to_dict()
        if fail_on_data_loss and health == "DATA_LOSS" and "DATA_LOSS" not in accepted:
            return Probe(False, breach_message(result), payload, failed=True)
        if health in accepted:
            return Probe(True, f"{location}: {health}: {result.verdict.reason}", payload)
        return Probe(False, breach_message(result), payload)

    def probe_progress(
        self,
        location: str,
        *,
        after_batch_id: int | None = None,
        after_commit_time: Any = None,
    ) -> Probe:
        """Done when the query committed a batch newer than ``after_batch_id`` and/or later than
        ``after_commit_time`` (either alone; with neither: any committed batch at all).
        A checkpoint that does not exist yet is "not yet", not an error."""
        from airflow_sparklag.errors import CheckpointNotFound

        after_time = epoch_seconds(after_commit_time)
        try:
            payload = self.committed_offsets(location)
        except CheckpointNotFound:
            return Probe(False, f"{location}: no checkpoint yet", {"location": location})
        batch = payload["committed_batch_id"]
        committed_at = payload["committed_at"]
        if batch is None:
            return Probe(False, f"{location}: no batch committed yet", payload)
        newer = after_batch_id is None or batch > int(after_batch_id)
        later = after_time is None or (committed_at is not None and committed_at > after_time)
        message = (
            f"{location}: committed batch {batch} at {committed_at}"
            f" (waiting for batch > {after_batch_id}, commit after {after_time})"
        )
        return Probe(newer and later, message, payload)

    def probe_catch_up(
        self,
        location: str,
        *,
        target_time: Any,
        topics: Iterable[str] | None = None,
    ) -> Probe:
        """Done when, on every partition, the committed offset has reached the first offset
        produced at or after ``target_time`` (Kafka ListOffsets for that timestamp): everything
        produced before then has been processed."""
        target_seconds = epoch_seconds(target_time)
        if target_seconds is None:
            raise ValueError("target_time is required (datetime, ISO text or epoch seconds/ms)")
        target_ms = int(target_seconds * 1000)
        state = self.read_checkpoint(location)
        committed: dict[str, dict[int, int]] = {}
        for source_topics in committed_kafka_offsets(state).values():
            for topic, parts in source_topics.items():
                merged = committed.setdefault(topic, {})
                for partition, offset in parts.items():
                    # A topic read by two sources is caught up when the slower one is.
                    merged[partition] = min(offset, merged.get(partition, offset))
        wanted = sorted(set(topics) if topics else set(committed))
        if not wanted:
            return Probe(False, f"{location}: no Kafka offsets committed yet", {})
        targets = self.kafka_client().offsets_for_time(wanted, target_ms)
        behind: list[dict[str, Any]] = []
        for topic in wanted:
            for partition, target in sorted(targets.get(topic, {}).items()):
                position = committed.get(topic, {}).get(partition)
                if (position if position is not None else 0) < target:
                    behind.append(
                        {
                            "topic": topic,
                            "partition": partition,
                            "committed_offset": position,
                            "target_offset": target,
                        }
                    )
        records = sum(b["target_offset"] - (b["committed_offset"] or 0) for b in behind)
        payload = {
            "location": location,
            "target_time_ms": target_ms,
            "committed_batch_id": state.committed_batch_id,
            "records_behind": records,
            "partitions_behind": behind[:20],
        }
        summary = ", ".join(
            f"{b['topic']}[{b['partition']}] {b['committed_offset']}<{b['target_offset']}"
            for b in behind[:5]
        )
        message = (
            f"{location}: caught up with everything produced before {target_ms} ms"
            if not behind
            else f"{location}: {records} records before {target_ms} ms not processed: {summary}"
        )
        return Probe(not behind, message, payload)

    # -- connection test -----------------------------------------------------------------

    def test_connection(self) -> tuple[bool, str]:
        """Checks Kafka (cluster metadata) and each configured storage with a real request."""
        try:
            conns = self.get_conn()
            checked = [self._test_kafka(conns.kafka_config)]
            s3_options = self.s3_storage_options()
            if s3_options is not None:
                checked.append(self._test_s3(s3_options))
            if conns.webhdfs_options is not None:
                checked.append(self._test_webhdfs(conns.webhdfs_options))
        except Exception as exc:
            return False, self.scrub(f"{type(exc).__name__}: {exc}")
        return True, "; ".join(checked)

    def _test_kafka(self, config: dict[str, Any]) -> str:
        from airflow_sparklag.errors import KafkaUnavailable
        from airflow_sparklag.kafka import KafkaOffsetsClient

        # A fresh client, not the shared one: the test is that a new connection succeeds.
        client = KafkaOffsetsClient(config, self.kafka_timeout)
        try:
            snapshot = client.snapshot([])
        finally:
            client.close()
        if snapshot is None:  # pragma: no cover - the client raises instead
            raise KafkaUnavailable(f"no answer from {config['bootstrap.servers']}")
        return f"Kafka {config['bootstrap.servers']} answered (cluster {snapshot.cluster_id})"

    def _test_s3(self, options: dict[str, Any]) -> str:
        from airflow_sparklag.storage.s3 import S3Storage

        buckets = S3Storage(**options).client.list_buckets().get("Buckets", [])
        source = "amazon provider's AwsBaseHook" if "client" in options else "connection"
        return f"S3 answered ({len(buckets)} buckets visible; client from the {source})"

    def _test_webhdfs(self, options: dict[str, Any]) -> str:
        from airflow_sparklag.storage.webhdfs import WebHDFSStorage

        storage = WebHDFSStorage(options["url"], user=options.get("user"))
        if not storage.exists("/"):
            raise ConnectionError("WebHDFS answered but '/' does not exist")
        return "WebHDFS answered"


def health_name(health: Any) -> str:
    """``Health.OK`` -> ``"OK"`` (the enum's value; also accepts plain strings)."""
    return str(getattr(health, "value", health)).upper()


def breach_message(result: Any, limit: int = 5) -> str:
    """Verdict plus the worst partitions, one line (the core's ``render.breach_summary``)."""
    from airflow_sparklag.render import breach_summary

    if result.report is None:  # unreadable checkpoint in a multi-checkpoint check
        return f"{result.location}: {result.error}"
    return breach_summary(result.report, result.verdict, limit=limit)
