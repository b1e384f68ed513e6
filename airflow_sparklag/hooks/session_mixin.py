"""How a SparkLagHook turns its connections into ONE Session: shared clients, storage bounds.

Kept apart from the hook's public API (hooks/sparklag.py): the hook declares its connection ids
and settings (``kafka_config_id``, ``aws_conn_id``, ``kafka_timeout``, ``storage_timeout``,
``gcp_conn_id``, ...), reads them with ``get_conn()``, and this mixin builds the session from
them. Clients are shared by every hook of the process through :data:`SHARED_CLIENTS`, keyed on
the connection id and a keyed hash of its fields (an edited connection gets new clients).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_sparklag.hooks.connections import (
    ResolvedConnections,
    S3Client,
    SharedClientKey,
    SourceKafka,
    build_s3_client,
    google_provider_credentials,
)
from airflow_sparklag.session import SHARED_CLIENTS

if TYPE_CHECKING:
    from airflow_sparklag.kafka import KafkaOffsetsClient
    from airflow_sparklag.session import Session


class HookSessionMixin:
    """The session of a hook, built on first use from its connections."""

    _session: Session | None
    kafka_config_id: str
    aws_conn_id: str | None
    gcp_conn_id: str | None
    kafka_timeout: float
    storage_timeout: float | None
    _gcp_provider: bool

    def get_conn(self) -> ResolvedConnections:
        raise NotImplementedError

    @property
    def session(self) -> Session:
        """The hook's session: shared Kafka and S3 clients, readers kept between calls."""
        if self._session is None:
            from airflow_sparklag.session import Session, StorageOptions

            conns = self.get_conn()
            s3 = self._s3_options if self.aws_conn_id is not None else None
            self._session = Session(
                kafka_config=conns.kafka_config,
                kafka_client=self._shared_kafka(
                    self.kafka_config_id, conns.kafka_config, conns.kafka_fingerprint
                ),
                storage=StorageOptions(
                    s3=s3, webhdfs=self._webhdfs_options(conns), fsspec=self.fsspec_options()
                ),
                kafka_timeout=self.kafka_timeout,
                source_kafka={s: source.config for s, source in conns.source_kafka.items()},
                source_kafka_clients=self._shared_source_clients(conns.source_kafka),
            )
        return self._session

    def _shared_source_clients(
        self, sources: Mapping[str, SourceKafka]
    ) -> dict[str, KafkaOffsetsClient]:
        """The shared client of each mapped source's connection (one per connection, the same
        one a hook whose main connection it is uses)."""
        clients = {}
        for source_id, source in sources.items():
            client = self._shared_kafka(source.conn_id, source.config, source.fingerprint)
            if client is not None:
                clients[source_id] = client
        return clients

    def _bounds(self) -> dict[str, float]:
        timeout = self.storage_timeout
        if timeout is None:
            return {}
        return {"connect_timeout": min(5.0, timeout), "read_timeout": float(timeout)}

    def _webhdfs_options(self, conns: ResolvedConnections) -> dict[str, Any] | None:
        if conns.webhdfs_options is None:
            return None
        return {**conns.webhdfs_options, **self._bounds()}

    def fsspec_options(self) -> dict[str, Any] | None:
        """The fsspec options of the GCS and Azure connections, per scheme (``{"gs": {...},
        "abfs": {...}}``; ``abfs`` serves ``abfss://`` and ``az://`` too); None without them."""
        conns = self.get_conn()
        options: dict[str, Any] = {}
        if conns.gcs_options is not None:
            options["gs"] = dict(conns.gcs_options)
            if self._gcp_provider and self.gcp_conn_id:
                found = google_provider_credentials(self.gcp_conn_id)
                if found is not None:
                    credentials, project = found
                    options["gs"]["token"] = credentials
                    if project and "project" not in options["gs"]:
                        options["gs"]["project"] = project
        if conns.azure_options is not None:
            options["abfs"] = dict(conns.azure_options)
        return options or None

    def _s3_options(self) -> dict[str, Any]:
        # Called by the session on first S3 use: the client is built only when needed.
        client = self.s3_client()
        assert client is not None
        return client.options

    def s3_client(self) -> S3Client | None:
        """The S3 client of ``aws_conn_id`` (the amazon provider's, role_arn and all), shared
        by every hook of the process on that connection; None without ``aws_conn_id``."""
        conns = self.get_conn()
        aws_conn_id = self.aws_conn_id
        if aws_conn_id is None:
            return None

        def build() -> S3Client:
            return build_s3_client(aws_conn_id, conns, self._bounds())

        if not conns.aws_fingerprint:  # connections not read from Airflow: the hook's own
            return build()
        key = SharedClientKey("s3", aws_conn_id, conns.aws_fingerprint, (self.storage_timeout,))
        return SHARED_CLIENTS.get(key, build)  # type: ignore[no-any-return]

    def s3_storage_options(self) -> dict[str, Any] | None:
        """How ``aws_conn_id`` opens S3: the amazon provider's client (``{"client": ...,
        "endpoint_url": ...}``), else the connection read directly; None without one."""
        s3 = self.s3_client()
        if s3 is None:
            return None
        return s3.options if s3.from_provider else self.get_conn().s3_options

    def _shared_kafka(
        self, conn_id: str, config: Mapping[str, Any], fingerprint: str
    ) -> KafkaOffsetsClient | None:
        """The process-wide client of one ``kafka`` connection (see :data:`SHARED_CLIENTS`)."""
        if not fingerprint:
            return None  # the session builds (and closes) a client of its own

        def build() -> KafkaOffsetsClient:
            from airflow_sparklag.session import Session

            # A session builds the client; the cache keeps it, so this one is never closed.
            return Session(kafka_config=config, kafka_timeout=self.kafka_timeout).kafka

        key = SharedClientKey("kafka", conn_id, fingerprint, (self.kafka_timeout,))
        return SHARED_CLIENTS.get(key, build)  # type: ignore[no-any-return]
