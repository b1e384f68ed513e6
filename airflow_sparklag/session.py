"""The one place that builds storage backends, checkpoint readers and the Kafka client
(docs/architecture.md, "One session"); :class:`ClientCache` shares clients between the Airflow
hooks of a process. Nothing heavy (boto3, confluent_kafka, requests) is imported here.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_sparklag.errors import KafkaError
from airflow_sparklag.location import Location
from airflow_sparklag.storage import Storage, StorageOptions

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint import CheckpointReader, CheckpointState
    from airflow_sparklag.kafka import KafkaOffsetsClient
    from airflow_sparklag.kafka_model import KafkaOffsets


DEFAULT_KAFKA_TIMEOUT = 10.0  # seconds any one Kafka request may take
SHARED_CLIENTS_MAX = 32  # clients (S3 and Kafka together) a process keeps in the shared cache
_Client = TypeVar("_Client")


class SourceClusters:
    """Which cluster each mapped source reads, numbered once: 0 is the main cluster, 1.. the
    distinct others (sources with equal configs, or the same client, share one number; a
    source mapped to the main cluster's config or client gets 0)."""

    def __init__(
        self,
        main_config: Mapping[str, Any],
        main_client: KafkaOffsets | None,
        configs: Mapping[str, Mapping[str, Any]],
        clients: Mapping[str, KafkaOffsets],
    ) -> None:
        self.configs: dict[str, dict[str, Any]] = {}
        self.of_source: dict[str, int] = {}
        self.servers: dict[int, str] = {}
        self.built: dict[int, dict[str, Any]] = {}  # cluster -> config its client is built from
        # handed in, or built by the session; 0 is the main cluster's
        self.clients: dict[int, KafkaOffsets] = {} if main_client is None else {0: main_client}
        self.owned: set[int] = set()
        for source_id in sorted(set(configs) | set(clients)):
            if not isinstance(source_id, str) or not source_id.strip():
                raise KafkaError(f"source ids must be non-empty names, got {source_id!r}")
            config = dict(configs.get(source_id) or {})
            client = clients.get(source_id)
            if client is None and not config.get("bootstrap.servers"):
                raise KafkaError(f"source {source_id}: its Kafka config has no 'bootstrap.servers'")
            self.configs[source_id] = config
            self.of_source[source_id] = self._number(config, client, main_config)

    def _number(
        self, config: dict[str, Any], client: KafkaOffsets | None, main: Mapping[str, Any]
    ) -> int:
        if client is not None:
            same = [n for n, known in self.clients.items() if known is client]
        else:
            if config == dict(main):
                return 0
            same = [n for n, known in self.built.items() if known == config]
        if same:
            return same[0]
        cluster = len(self.servers) + 1
        self.servers[cluster] = str(
            client.bootstrap_servers if client is not None else config["bootstrap.servers"]
        )
        if client is not None:
            self.clients[cluster] = client
        else:
            self.built[cluster] = config
        return cluster

    def take_owned(self) -> list[KafkaOffsets]:
        """The clients the session built (to close); handed-in ones stay with their owner."""
        owned = [self.clients.pop(n) for n in sorted(self.owned) if n in self.clients]
        self.owned.clear()
        return owned


class Session:
    """Storage backends, checkpoint readers and the Kafka client of one unit of work; each
    built once, thread-safe, closed with the session (what was handed in is the caller's).

    ``kafka_config`` is librdkafka configuration, ``kafka_client`` a ready client instead.
    The checkpoint does not record which cluster a source reads: ``source_kafka`` maps a
    source to its cluster's config, ``source_kafka_clients`` to a ready client
    (docs/multi-cluster.md)::

        with Session(kafka_config={"bootstrap.servers": "broker:9092"}) as session:
            state = session.read("s3a://lake/ck/orders")
    """

    def __init__(
        self,
        *,
        kafka_config: Mapping[str, Any] | None = None,
        kafka_client: KafkaOffsets | None = None,
        storage: StorageOptions | None = None,
        s3_options: Mapping[str, Any] | None = None,
        webhdfs_options: Mapping[str, Any] | None = None,
        fsspec_options: Mapping[str, Any] | None = None,
        kafka_timeout: float = DEFAULT_KAFKA_TIMEOUT,
        source_kafka: Mapping[str, Mapping[str, Any]] | None = None,
        source_kafka_clients: Mapping[str, KafkaOffsets] | None = None,
    ) -> None:
        if storage is None:
            storage = StorageOptions(s3_options, webhdfs_options, fsspec_options)
        self.storage_options = storage
        from airflow_sparklag.kafka import check_bootstrap_servers

        self.kafka_config: dict[str, Any] = dict(kafka_config or {})
        for config in (self.kafka_config, *(source_kafka or {}).values()):
            if config and config.get("bootstrap.servers"):  # refused before anything is read
                check_bootstrap_servers(config["bootstrap.servers"])
        self.kafka_timeout = float(kafka_timeout)
        self._clusters = SourceClusters(
            self.kafka_config, kafka_client, source_kafka or {}, source_kafka_clients or {}
        )
        self._lock = threading.Lock()
        self._building: dict[Hashable, threading.Lock] = {}
        self._backends: dict[tuple[str, str], Storage] = {}
        self._readers: dict[tuple[str, bool], CheckpointReader] = {}
        self.closed = False

    # -- storage ---------------------------------------------------------------------------

    def storage(self, location: Location | str) -> Storage:
        """The backend serving ``location`` (a bare ``s3a://`` names the store)."""
        where = Location.of(location, bucket=False)
        key = where.store
        backend: Storage = self._once(self._backends, key, lambda: self._new_backend(key, where))
        return backend

    def _new_backend(self, key: tuple[str, str], location: Location) -> Storage:
        backend = self.storage_options.open(location)
        if key == ("s3", ""):
            # boto3 builds its client lazily; build it now, under this key's lock, so threads
            # arriving together share one client (16 threads built 16 clients before).
            backend.prepare()  # type: ignore[attr-defined]
        with self._lock:
            self._backends[key] = backend
        return backend

    def _once(self, built: Mapping[Any, Any], key: Hashable, build: Callable[[], Any]) -> Any:
        return _build_once(self._lock, self._building, key, built.get, build)

    @property
    def backends(self) -> list[Storage]:
        with self._lock:
            return list(self._backends.values())

    @property
    def storage_requests(self) -> int:
        return sum(backend.requests.total for backend in self.backends)

    # -- checkpoints -------------------------------------------------------------------------

    def reader(self, location: Location | str, *, query_id: bool = True) -> CheckpointReader:
        """The reader of ``location``, kept for the session's life (it caches batch files)."""
        from airflow_sparklag.checkpoint import CheckpointReader

        given = location.text if isinstance(location, Location) else location
        with self._lock:
            reader = self._readers.get((given, query_id)) if isinstance(given, str) else None
        if reader is None:
            where = Location.of(location)
            built = CheckpointReader(self.storage(where), where, query_id=query_id)
            with self._lock:
                reader = self._readers.setdefault((where.text, query_id), built)
        return reader

    def read(
        self, location: Location | str, *, history: int = 10, query_id: bool = True
    ) -> CheckpointState:
        return self.reader(location, query_id=query_id).read(history=history)

    def sources_read(self) -> dict[str, dict[str, set[str]]]:
        """What the session read, for lineage: each checkpoint -> the bootstrap servers of the
        cluster each of its Kafka sources is measured against -> the topics (from the offsets
        files read; a checkpoint that could not be read maps to ``{}``)."""
        with self._lock:
            readers = list(self._readers.values())
        found: dict[str, dict[str, set[str]]] = {}
        for reader in readers:
            clusters = found.setdefault(reader.location, {})
            for batch in reader.batches_read():
                for source in batch.sources:
                    if source.kind == "kafka" and source.kafka:
                        servers = self.cluster_servers(self.cluster_of(source.source_id))
                        clusters.setdefault(servers, set()).update(source.kafka)
        return found

    def forget(self, keep: Iterable[Location | str]) -> None:
        """Drop the readers of every checkpoint not in ``keep`` (a fleet lost some jobs)."""
        wanted = {Location.of(loc, bucket=False).text for loc in keep}
        with self._lock:
            for key in [k for k in self._readers if k[0] not in wanted]:
                del self._readers[key]

    # -- Kafka -------------------------------------------------------------------------------

    @property
    def has_kafka(self) -> bool:
        return 0 in self._clusters.clients or bool(self.kafka_config.get("bootstrap.servers"))

    @property
    def kafka(self) -> KafkaOffsets:
        return self.cluster_kafka(0)

    @property
    def source_kafka(self) -> Mapping[str, Mapping[str, Any]]:
        """Source id -> librdkafka config of its cluster."""
        return self._clusters.configs

    def cluster_of(self, source_id: str) -> int:
        """The cluster a source is measured against: 0 is the main one, 1.. the mapped ones."""
        return self._clusters.of_source.get(source_id, 0)

    def cluster_servers(self, cluster: int) -> str:
        if cluster == 0:
            servers = self.kafka_config.get("bootstrap.servers")
            client = self._clusters.clients.get(0)
            return str(servers or (client.bootstrap_servers if client is not None else "-"))
        return self._clusters.servers[cluster]

    def kafka_for(self, source_id: str) -> KafkaOffsets:
        return self.cluster_kafka(self.cluster_of(source_id))

    def cluster_kafka(self, cluster: int) -> KafkaOffsets:
        client: KafkaOffsets = self._once(
            self._clusters.clients, cluster, lambda: self._new_kafka(cluster)
        )
        return client

    def _new_kafka(self, cluster: int) -> KafkaOffsetsClient:
        if cluster == 0 and not self.kafka_config.get("bootstrap.servers"):
            raise KafkaError(
                "no Kafka configured: give the bootstrap servers (CLI --bootstrap-servers, "
                'the Airflow `kafka` connection\'s extra {"bootstrap.servers": ...})'
            )
        config = self.kafka_config if cluster == 0 else self._clusters.built[cluster]
        client = build_kafka_client(config, self.kafka_timeout)
        with self._lock:
            self._clusters.clients[cluster] = client
            self._clusters.owned.add(cluster)
        return client

    # -- life --------------------------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def using(cls, session: Session | None, **options: Any) -> Iterator[Session]:
        """``session`` as it is (left open), or a new one from ``options``, closed at the end:
        how the script entry points (``check_checkpoint``, ...) take either."""
        if session is not None:
            given = {name: value for name, value in options.items() if value is not None}
            if given:
                raise TypeError(f"give a session or its options, not both (got {sorted(given)})")
            yield session
            return
        with cls(**options) as own:
            yield own

    def close(self) -> None:
        with self._lock:
            owned = self._clusters.take_owned()
            self._clusters.clients.pop(0, None)  # a handed-in main client is forgotten too
            self._readers.clear()
            self._backends.clear()
            self.closed = True
        for client in owned:
            client.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def build_kafka_client(config: Mapping[str, Any], timeout: float) -> KafkaOffsetsClient:
    """A new Kafka client: a session's, or one the hook shares (:data:`SHARED_CLIENTS`)."""
    from airflow_sparklag.kafka import KafkaOffsetsClient

    return KafkaOffsetsClient(config, timeout=timeout)


def _build_once(
    lock: threading.Lock,
    building: dict[Hashable, threading.Lock],
    key: Hashable,
    find: Callable[[Hashable], Any],
    build: Callable[[], Any],
) -> Any:
    """``find(key)`` (called under ``lock``), else ``build()``, which keeps what it built where
    ``find`` looks: once per key even when threads ask at the same time (the others wait for
    it); a build that fails keeps nothing, and the next asker builds again."""
    with lock:
        found = find(key)
        if found is not None:
            return found
        key_lock = building.setdefault(key, threading.Lock())
    with key_lock:
        try:
            with lock:
                found = find(key)  # another thread built it while this one waited
            return build() if found is None else found
        finally:
            with lock:
                if building.get(key) is key_lock:
                    del building[key]


class ClientCache:
    """Clients shared by everything in a process (a triggerer's 100 deferred sensors on one
    connection hold one client of each): thread-safe, least recently used first out beyond
    ``maxsize`` keys, each built once per key. Nothing is closed explicitly: a client dropped
    while others use it is freed with the last reference. Keys must hold no secret."""

    def __init__(self, maxsize: int = SHARED_CLIENTS_MAX) -> None:
        self.maxsize = maxsize
        self._lock = threading.Lock()
        self._clients: OrderedDict[Hashable, Any] = OrderedDict()
        self._building: dict[Hashable, threading.Lock] = {}
        self._forked_away: list[Any] = []

    def get(self, key: Hashable, build: Callable[[], _Client]) -> _Client:

        def build_and_keep() -> _Client:
            client = build()
            with self._lock:
                self._clients[key] = client
                while len(self._clients) > self.maxsize:
                    self._clients.popitem(last=False)
            return client

        found: _Client = _build_once(self._lock, self._building, key, self._hit, build_and_keep)
        return found

    def _hit(self, key: Hashable) -> Any:
        client = self._clients.get(key)
        if client is not None:
            self._clients.move_to_end(key)
        return client

    def cached_keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._clients)

    def __len__(self) -> int:
        return len(self._clients)

    def _after_fork_in_child(self) -> None:
        # A forked child must not use its parent's clients (their sockets are the parent's and
        # librdkafka's threads are not copied), nor free them (freeing a librdkafka handle whose
        # threads are gone can hang): keep them unreachable, start empty, with a new lock (the
        # old one may have been held by a thread that does not exist in the child).
        self._forked_away.append(self._clients)
        self._clients = OrderedDict()
        self._building = {}
        self._lock = threading.Lock()


SHARED_CLIENTS = ClientCache()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=SHARED_CLIENTS._after_fork_in_child)
