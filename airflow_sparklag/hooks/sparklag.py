"""SparkLagHook: Airflow connections in, one :class:`~airflow_sparklag.session.Session` out.

Clients are shared by every hook of a process (:data:`SHARED_CLIENTS`), keyed on the connection
id and a keyed hash of its fields: an edited connection gets new clients, no secret is kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.connection import get_async_connection
from airflow.providers.common.compat.sdk import BaseHook

from airflow_sparklag import params
from airflow_sparklag.check_options import CheckOptions
from airflow_sparklag.hooks.bundle import (
    CONN_TYPE,
    DEFAULT_KAFKA_CONN_ID,
    ConnectionBundle,
    read_bundle,
)
from airflow_sparklag.hooks.connections import (
    ResolvedConnections,
    S3Client,
    SharedClientKey,
    SourceKafka,
    StorageBounds,
    amazon_provider_only_settings,
    azure_options_from,
    build_s3_client,
    connection_fingerprint,
    gcs_options_from,
    google_provider_credentials,
    kafka_config_from,
    s3_options_from,
    webhdfs_options_from,
)
from airflow_sparklag.redact import redact_url
from airflow_sparklag.session import SHARED_CLIENTS, build_kafka_client

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from airflow_sparklag.checkpoint import CheckpointState
    from airflow_sparklag.conditions import Probe, WaitCondition
    from airflow_sparklag.fleet import FleetChecker
    from airflow_sparklag.history import LagHistory
    from airflow_sparklag.kafka import KafkaOffsetsClient
    from airflow_sparklag.location import Location
    from airflow_sparklag.model.result import CheckResult
    from airflow_sparklag.session import Session


def _conn(doc: str) -> Any:
    return params.option(None, read=params.conn_id, flag=None, doc=doc)


@dataclass(frozen=True)
class ConnectionIds:
    """The connection ids of a task, declared once. Operators and sensors take each field as a
    flat, templated keyword argument (``operators/base.py``), triggers carry ``to_dict()``,
    and :meth:`hook` builds the :class:`SparkLagHook` of them (docs/connections.md).

    >>> ConnectionIds(kafka_config_id="kafka_prod", aws_conn_id="aws_lake").to_dict()["aws_conn_id"]
    'aws_lake'
    """

    kafka_config_id: str | None = _conn("the kafka connection (default: kafka_default)")
    aws_conn_id: str | None = _conn("the aws connection of s3:// and s3a:// checkpoints")
    webhdfs_conn_id: str | None = _conn("the webhdfs connection of hdfs:// checkpoints")
    source_kafka_conn_ids: Mapping[str, str] = params.option(
        factory=dict,
        read=params.source_map,
        flag=None,
        doc="source (index or name) -> kafka connection of its cluster",
    )
    gcp_conn_id: str | None = _conn("the google_cloud_platform connection of gs://")
    wasb_conn_id: str | None = _conn("the wasb or adls connection of abfs://, abfss://, az://")
    sparklag_conn_id: str | None = _conn("a sparklag connection bundling the ids")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe; an empty source mapping is None."""
        values = {name: getattr(self, name) for name in CONN_FIELDS}
        values["source_kafka_conn_ids"] = dict(self.source_kafka_conn_ids) or None
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ConnectionIds:
        given = {k: v for k, v in values.items() if k in CONN_FIELDS}
        given["source_kafka_conn_ids"] = dict(given.get("source_kafka_conn_ids") or {})
        return cls(**given)

    def hook(self) -> SparkLagHook:
        return SparkLagHook(**self.to_dict())


# The fields of ConnectionIds: the connection keyword arguments of every task and trigger.
CONN_FIELDS = tuple(f.name for f in dataclasses.fields(ConnectionIds))


class SparkLagHook(BaseHook):
    """Reads a Spark query's checkpoint and Kafka offsets with Airflow connections.

    Example::

        hook = SparkLagHook(kafka_config_id="kafka_default", aws_conn_id="aws_default")
        result = hook.check("s3a://bucket/checkpoints/orders",
                            thresholds={"max_lag_records_total": 10_000})
        print(result.verdict.health.value, result.report.total_lag)

    One hook keeps its session (and so its checkpoint readers) between calls: a trigger that
    polls with it only fetches new batch files. :meth:`close` drops the session; the shared
    clients stay open for the other hooks. The connection ids are described in
    docs/connections.md and docs/multi-cluster.md; without any Kafka one it is
    ``kafka_default``.
    """

    conn_name_attr = "sparklag_conn_id"
    default_conn_name = "sparklag_default"
    conn_type = CONN_TYPE
    hook_name = "Spark Kafka lag"

    def __init__(
        self,
        kafka_config_id: str | None = None,
        aws_conn_id: str | None = None,
        webhdfs_conn_id: str | None = None,
        *,
        kafka_timeout: float = 10.0,
        storage_timeout: float | None = None,
        source_kafka_conn_ids: Mapping[str, str] | None = None,
        gcp_conn_id: str | None = None,
        wasb_conn_id: str | None = None,
        sparklag_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        # Ids given here win over those of a `sparklag` connection bundling them (read with the
        # connections, on first use; see hooks/bundle.py).
        self.given = ConnectionIds(
            kafka_config_id or None,
            aws_conn_id,
            webhdfs_conn_id,
            dict(source_kafka_conn_ids or {}),
            gcp_conn_id,
            wasb_conn_id,
            sparklag_conn_id or None,
        )
        self.bundle: ConnectionBundle | None = None
        self._gcp_provider = False  # the google provider builds the gs:// credentials
        self._use(self.given)
        self.kafka_timeout = float(kafka_timeout)  # as a Session takes it
        # Bound of each storage attempt (S3: 3 attempts); None keeps the backends' defaults.
        self.storage_timeout = storage_timeout
        self._connections: ResolvedConnections | None = None
        self._session: Session | None = None

    # -- connections -----------------------------------------------------------------------

    def _use(self, ids: ConnectionIds) -> None:
        """Read the connections of ``ids`` from now on (without a Kafka one: kafka_default)."""
        self.sparklag_conn_id = ids.sparklag_conn_id
        self.kafka_config_id = ids.kafka_config_id or DEFAULT_KAFKA_CONN_ID
        self.aws_conn_id = ids.aws_conn_id
        self.webhdfs_conn_id = ids.webhdfs_conn_id
        self.gcp_conn_id = ids.gcp_conn_id
        self.wasb_conn_id = ids.wasb_conn_id
        self.source_kafka_conn_ids = dict(ids.source_kafka_conn_ids)

    def use_bundle(self, conn: Connection) -> ConnectionBundle:
        """Take the ids of the ``sparklag`` connection ``conn`` that were not given to the hook."""
        self.bundle = bundle = read_bundle(conn)
        given = self.given  # its ids win; a bundle has no sparklag_conn_id
        merged: dict[str, Any] = {
            name: getattr(given, name) or getattr(bundle, name, None) for name in CONN_FIELDS
        }
        merged["source_kafka_conn_ids"] = {
            **bundle.source_kafka_conn_ids,
            **given.source_kafka_conn_ids,
        }
        self._use(ConnectionIds(**merged))
        return bundle

    def connection_ids(self) -> list[tuple[str, str]]:
        """(what it is for, connection id) of every connection the hook reads, in order."""
        ids = [("Kafka connection", self.kafka_config_id)]
        ids += [("AWS connection", self.aws_conn_id)] if self.aws_conn_id else []
        ids += [("WebHDFS connection", self.webhdfs_conn_id)] if self.webhdfs_conn_id else []
        for source_id, conn_id in self.source_kafka_conn_ids.items():
            ids.append((f"Kafka connection of source {source_id}", conn_id))
        ids += [("Google Cloud connection", self.gcp_conn_id)] if self.gcp_conn_id else []
        ids += [("Azure connection", self.wasb_conn_id)] if self.wasb_conn_id else []
        return ids

    def _to_read(self) -> dict[str, None]:
        return dict.fromkeys(conn_id for _, conn_id in self.connection_ids())

    def _resolve(self, read: Mapping[str, Connection]) -> ResolvedConnections:
        kafka = read[self.kafka_config_id]
        aws, hdfs, gcp, wasb = (
            read[conn_id] if conn_id else None
            for conn_id in (
                self.aws_conn_id,
                self.webhdfs_conn_id,
                self.gcp_conn_id,
                self.wasb_conn_id,
            )
        )
        gcs = gcs_options_from(gcp) if gcp is not None else None
        self._gcp_provider = gcs is not None and "token" not in gcs  # none gcsfs reads itself
        return ResolvedConnections(
            gcs_options=gcs,
            azure_options=azure_options_from(wasb) if wasb is not None else None,
            kafka_config=kafka_config_from(kafka),
            s3_options=s3_options_from(aws) if aws is not None else None,
            webhdfs_options=webhdfs_options_from(hdfs) if hdfs is not None else None,
            aws_provider_only=amazon_provider_only_settings(aws) if aws is not None else (),
            kafka_fingerprint=connection_fingerprint(kafka),
            aws_fingerprint=connection_fingerprint(aws) if aws is not None else "",
            source_kafka={
                source_id: SourceKafka(
                    conn_id, kafka_config_from(read[conn_id]), connection_fingerprint(read[conn_id])
                )
                for source_id, conn_id in self.source_kafka_conn_ids.items()
            },
        )

    def get_conn(self) -> ResolvedConnections:
        """The Kafka config and storage options (read once per hook)."""
        if self._connections is None:
            if self.sparklag_conn_id and self.bundle is None:
                self.use_bundle(self.get_connection(self.sparklag_conn_id))
            read = {conn_id: self.get_connection(conn_id) for conn_id in self._to_read()}
            self._connections = self._resolve(read)
        return self._connections

    async def aget_conn(self) -> ResolvedConnections:
        """:meth:`get_conn` for the triggerer's event loop (async connection API)."""
        if self._connections is None:
            if self.sparklag_conn_id and self.bundle is None:
                self.use_bundle(await get_async_connection(self.sparklag_conn_id, self))
            read = {c: await get_async_connection(c, self) for c in self._to_read()}
            self._connections = self._resolve(read)
        return self._connections

    def scrub(self, message: str) -> str:
        """``message`` without any secret of the connections (for logs, XCom, events)."""
        return self._connections.scrub(message) if self._connections else message

    def close(self) -> None:
        """Drop the session (its readers); shared clients stay open for the other hooks."""
        if self._session is not None:
            self._session.close()
        self._session = None

    # -- the session: shared clients, storage bounds ------------------------------------------

    @property
    def session(self) -> Session:
        """The hook's session: shared Kafka and S3 clients, readers kept between calls."""
        if self._session is None:
            from airflow_sparklag.session import Session
            from airflow_sparklag.storage import StorageOptions

            conns = self.get_conn()
            webhdfs = conns.webhdfs_options
            self._session = Session(
                kafka_config=conns.kafka_config,
                kafka_client=self._shared_kafka(
                    self.kafka_config_id, conns.kafka_config, conns.kafka_fingerprint
                ),
                storage=StorageOptions(
                    s3=self._s3_options if self.aws_conn_id is not None else None,
                    webhdfs=None if webhdfs is None else {**webhdfs, **self._bounds()},
                    fsspec=self.fsspec_options(),
                ),
                kafka_timeout=self.kafka_timeout,
                source_kafka={s: source.config for s, source in conns.source_kafka.items()},
                source_kafka_clients={
                    s: self._shared_kafka(source.conn_id, source.config, source.fingerprint)
                    for s, source in conns.source_kafka.items()
                },
            )
        return self._session

    def _bounds(self) -> StorageBounds:
        timeout = self.storage_timeout
        if timeout is None:
            return {}
        return {"connect_timeout": min(5.0, timeout), "read_timeout": float(timeout)}

    def fsspec_options(self) -> dict[str, Any] | None:
        """The fsspec options of the GCS and Azure connections, per scheme (``{"gs": {...},
        "abfs": {...}}``; ``abfs`` serves ``abfss://`` and ``az://`` too); None without them."""
        conns = self.get_conn()
        options: dict[str, Any] = {}
        if conns.gcs_options is not None:
            options["gs"] = dict(conns.gcs_options)
            gcp = self.gcp_conn_id if self._gcp_provider else None
            found = google_provider_credentials(gcp) if gcp else None
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
        key = SharedClientKey("s3", aws_conn_id, conns.aws_fingerprint, (self.storage_timeout,))
        build = partial(build_s3_client, aws_conn_id, conns, self._bounds())
        return SHARED_CLIENTS.get(key, build)

    def _shared_kafka(
        self, conn_id: str, config: Mapping[str, Any], fingerprint: str
    ) -> KafkaOffsetsClient:
        """The process-wide client of one ``kafka`` connection (kept, so never closed)."""
        build = partial(build_kafka_client, config, self.kafka_timeout)
        key = SharedClientKey("kafka", conn_id, fingerprint, (self.kafka_timeout,))
        return SHARED_CLIENTS.get(key, build)

    # -- the core's checks and waits --------------------------------------------------------

    def check(
        self, location: Location | str, *, options: CheckOptions | None = None, **check: Any
    ) -> CheckResult:
        """Lag and health of one checkpoint: the core's ``CheckResult(report, verdict)``.
        ``check`` are ``CheckOptions`` fields (thresholds, history, exact_time_lag, ...)."""
        from airflow_sparklag.monitor import check as check_one

        return check_one(self.session, location, options or CheckOptions.build(**check))

    def check_many(
        self, locations: Sequence[str], *, options: CheckOptions | None = None, **check: Any
    ) -> list[CheckResult]:
        """One ``CheckResult`` per location (a failed check carries ``.error``, no exception)."""
        from airflow_sparklag.monitor import check_many

        return check_many(self.session, list(locations), options or CheckOptions.build(**check))

    def fleet_checker(
        self,
        locations: Sequence[str] = (),
        *,
        prefix: str | Sequence[str] | None = None,
        **options: Any,
    ) -> FleetChecker:
        from airflow_sparklag.fleet import FleetChecker

        return FleetChecker(list(locations), session=self.session, prefix=prefix, **options)

    def lag_history(self, location: str, *, batches: int = 100) -> LagHistory:
        """Per-partition lag at each retained batch, rebuilt from the checkpoint and Kafka
        (see :mod:`airflow_sparklag.history`); ``.to_dict()`` is JSON-safe for XCom."""
        from airflow_sparklag.history import history

        return history(self.session, location, batches=batches)

    def read_checkpoint(self, location: Location | str, *, history: int = 1) -> CheckpointState:
        return self.session.read(location, history=history)

    def committed_offsets(self, location: str) -> dict[str, Any]:
        """What the query has processed, JSON-safe (see ``conditions.committed_offsets``)."""
        from airflow_sparklag.conditions import committed_offsets

        return committed_offsets(self.session, location)

    def probe(self, condition: WaitCondition) -> Probe:
        return condition.probe(self.session)

    # -- connection test ---------------------------------------------------------------------

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's connection "Test" button: every connection the hook uses, with a real
        request bounded by its timeouts, and the ``sparklag`` connection's ``location`` when
        set. ``(True, what answered)`` or ``(False, which part failed and why)``, no secret."""
        passed: list[str] = []
        part = "reading the connections"
        try:
            for step in self._tests(passed):
                part = step  # named in the message if this step fails
        except Exception as exc:
            failed = f"{part} failed: {type(exc).__name__}: {exc}"
            before = f" (passed: {'; '.join(passed)})" if passed else ""
            return False, self.scrub(failed + before)
        return True, "; ".join(passed)

    def _tests(self, passed: list[str]) -> Iterator[str]:
        """Yields what it tests next, then tests it (adding what answered to ``passed``)."""
        if self.sparklag_conn_id:
            yield f"reading the sparklag connection {self.sparklag_conn_id!r}"
            self.use_bundle(self.get_connection(self.sparklag_conn_id))
        read: dict[str, Connection] = {}
        for role, conn_id in self.connection_ids():
            yield f"reading the {role} {conn_id!r}"
            if conn_id not in read:
                read[conn_id] = self.get_connection(conn_id)
        yield "reading the connections"
        # The connections just read replace any read before: the test is of what is saved now.
        self._connections = conns = self._resolve(read)
        yield f"Kafka (connection {self.kafka_config_id!r})"
        passed.append(self._test_kafka(conns.kafka_config))
        for source_id, mapped in sorted(conns.source_kafka.items()):
            yield f"Kafka of source {source_id} (connection {mapped.conn_id!r})"
            passed.append(f"source {source_id}: {self._test_kafka(mapped.config)}")
        if self.aws_conn_id:
            yield f"S3 (connection {self.aws_conn_id!r})"
            passed.append(self._test_s3())
        if conns.webhdfs_options is not None:
            yield f"WebHDFS (connection {self.webhdfs_conn_id!r})"
            passed.append(self._test_webhdfs(conns.webhdfs_options))
        for scheme, store, fsspec_conn_id in (
            ("gs", "GCS", self.gcp_conn_id),
            ("abfs", "Azure", self.wasb_conn_id),
        ):
            if fsspec_conn_id:
                yield f"{store} (connection {fsspec_conn_id!r})"
                # Without a location there is nothing to read (listing every bucket would need
                # rights a checkpoint reader lacks): gcsfs / adlfs build the filesystem from the
                # connection, refusing options they cannot use; a location reads for real.
                self.session.storage(f"{scheme}://")
                passed.append(f"{store} client built from the connection")
        location = self.bundle.location if self.bundle is not None else None
        if location:
            yield f"reading the checkpoint {redact_url(str(location))}"
            passed.append(self._test_checkpoint(location))

    def _test_s3(self) -> str:
        s3 = self.s3_client()
        assert s3 is not None
        buckets = s3.options["client"].list_buckets().get("Buckets", [])
        source = "amazon provider's AwsBaseHook" if s3.from_provider else "connection"
        return f"S3 answered ({len(buckets)} buckets; client from the {source})"

    def _test_checkpoint(self, location: Location) -> str:
        state = self.read_checkpoint(location)
        shown = redact_url(str(location))
        if state.committed is None:
            return f"checkpoint {shown} read: no batch committed yet"
        partitions = {
            topic: len(offsets)
            for source in state.committed.sources
            if source.kind == "kafka" and source.kafka is not None
            for topic, offsets in source.kafka.items()
        }
        topics = ", ".join(f"{topic} ({n} partitions)" for topic, n in sorted(partitions.items()))
        return f"checkpoint {shown} read: committed batch {state.committed_batch_id}" + (
            f", {topics}" if topics else ""
        )

    def _test_kafka(self, config: Mapping[str, Any]) -> str:
        from airflow_sparklag.session import Session

        # A fresh session, not the shared client: the test is that a new connection succeeds.
        with Session(kafka_config=config, kafka_timeout=self.kafka_timeout) as session:
            snapshot = session.kafka.snapshot([])
        return f"Kafka {config['bootstrap.servers']} answered (cluster {snapshot.cluster_id})"

    def _test_webhdfs(self, options: Mapping[str, Any]) -> str:
        from airflow_sparklag.session import Session

        url = options["url"][0] if isinstance(options["url"], list) else options["url"]
        host = url.split("://", 1)[-1].split("/", 1)[0]
        with Session(webhdfs_options=options) as session:
            if not session.storage(f"webhdfs://{host}/").exists("/"):
                raise ConnectionError("WebHDFS answered but '/' does not exist")
        return "WebHDFS answered"
