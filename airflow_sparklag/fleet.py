"""Many checkpoints at once: find them under a prefix, and check them again and again cheaply.

    from airflow_sparklag.fleet import FleetChecker, discover_checkpoints

    s3 = {"region_name": "eu-west-1"}
    roots = discover_checkpoints("s3a://bucket/checkpoints", s3_options=s3)
    fleet = FleetChecker(roots, kafka_config={"bootstrap.servers": "broker:9092"}, s3_options=s3)
    results = fleet.check()      # first poll: 3 storage requests per checkpoint on S3 (4 on HDFS)
    results = fleet.check()      # next polls: 1 LIST on S3 (2 on HDFS) + one GET per new batch

A checkpoint is a directory that holds ``offsets/``, ``commits/`` or ``metadata``. Discovery lists
one directory per request and never descends into a checkpoint, so ``state/`` (which can hold
tens of thousands of objects) is never listed.

Storage clients are shared: one backend per (scheme, host) for the whole fleet, not one per
checkpoint. Nothing heavy is imported at module level.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_sparklag.errors import SparkLagError, StorageError
from airflow_sparklag.health import Health, HealthVerdict, Thresholds
from airflow_sparklag.kafka import KafkaOffsetsClient
from airflow_sparklag.monitor import CheckResult, as_thresholds, judge_states
from airflow_sparklag.storage import LOCAL_SCHEMES, S3_SCHEMES, join, open_storage, scheme_of

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint import CheckpointReader, CheckpointState
    from airflow_sparklag.storage import Storage

__all__ = [
    "MAX_READERS",
    "FleetChecker",
    "StoragePool",
    "check_fleet",
    "discover_checkpoints",
    "list_children",
]

MAX_READERS = 16  # checkpoints read at once: each read is a few small, latency-bound requests
CHECKPOINT_MARKERS = frozenset({"offsets", "commits"})  # directories that make a checkpoint
Progress = Callable[[int, int], None]  # (checkpoints read so far, total)


@dataclass(frozen=True)
class Children:
    """What one directory listing shows: the names of files and of subdirectories."""

    files: frozenset[str]
    directories: frozenset[str]

    @property
    def is_checkpoint(self) -> bool:
        return "metadata" in self.files or bool(CHECKPOINT_MARKERS & self.directories)


class StoragePool:
    """One storage backend per (scheme, host), shared by every checkpoint of a fleet.

    A boto3 client costs tens of milliseconds and a few MB to build; one per checkpoint would
    dominate a 1,000-checkpoint check. The backends are thread-safe for reads.

    >>> pool = StoragePool(s3_options={"region_name": "eu-west-1"})
    >>> pool.for_location("s3a://b/ck/a") is pool.for_location("s3a://b/ck/b")
    True
    """

    def __init__(
        self,
        *,
        s3_options: dict[str, Any] | None = None,
        webhdfs_options: dict[str, Any] | None = None,
        fsspec_options: dict[str, Any] | None = None,
    ) -> None:
        self.options = {
            "s3_options": s3_options,
            "webhdfs_options": webhdfs_options,
            "fsspec_options": fsspec_options,
        }
        self._backends: dict[tuple[str, str], Storage] = {}
        self._lock = threading.Lock()

    def for_location(self, location: str) -> Storage:
        scheme = scheme_of(location)
        # One S3 client serves every bucket and one local backend every path; WebHDFS and
        # fsspec backends are bound to a host.
        if scheme in S3_SCHEMES:
            key = ("s3", "")
        elif scheme in LOCAL_SCHEMES:
            key = ("", "")
        else:
            key = (scheme, urlsplit(location).netloc)
        with self._lock:
            backend = self._backends.get(key)
            if backend is None:
                backend = open_storage(location, **self.options)
                self._backends[key] = backend
            return backend

    @property
    def backends(self) -> list[Storage]:
        with self._lock:
            return list(self._backends.values())

    @property
    def requests_total(self) -> int:
        """Storage requests sent by every backend of the pool so far."""
        return sum(backend.requests.total for backend in self.backends)


def list_children(storage: Storage, path: str) -> Children:
    """Files and subdirectories directly under ``path``, in one listing (paginated on S3).

    The ``Storage`` interface lists files only; discovery also needs subdirectories, so this
    asks each known backend in its own terms. Missing directory: no children.
    """
    from airflow_sparklag.storage.local import LocalStorage
    from airflow_sparklag.storage.s3 import S3Storage
    from airflow_sparklag.storage.webhdfs import WebHDFSStorage

    if isinstance(storage, LocalStorage):
        return _local_children(storage, path)
    if isinstance(storage, S3Storage):
        return _s3_children(storage, path)
    if isinstance(storage, WebHDFSStorage):
        return _webhdfs_children(storage, path)
    return _fsspec_children(storage, path)


def _local_children(storage: Any, path: str) -> Children:
    import os

    from airflow_sparklag.storage.local import local_path

    storage.requests.add("list")
    files: set[str] = set()
    directories: set[str] = set()
    try:
        with os.scandir(local_path(path)) as scan:
            for entry in scan:
                try:
                    (directories if entry.is_dir() else files).add(entry.name)
                except FileNotFoundError:
                    continue
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as exc:
        raise StorageError(f"{path}: list directory failed: {exc.strerror or exc}") from exc
    return Children(frozenset(files), frozenset(directories))


def _s3_children(storage: Any, path: str) -> Children:
    from airflow_sparklag.storage.s3 import split_s3_url

    bucket, key = split_s3_url(path)
    prefix = key.rstrip("/") + "/" if key.rstrip("/") else ""
    files: set[str] = set()
    directories: set[str] = set()
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
        if token:
            kwargs["ContinuationToken"] = token
        storage.requests.add("list")
        response = storage.call(path, "list", storage.client.list_objects_v2, **kwargs)
        for item in response.get("Contents", []):
            name = item["Key"][len(prefix) :]
            if name and "/" not in name:
                files.add(name)
        for common in response.get("CommonPrefixes", []):
            name = common["Prefix"][len(prefix) :].rstrip("/")
            if name:
                directories.add(name)
        token = response.get("NextContinuationToken") if response.get("IsTruncated") else None
        if not token:
            return Children(frozenset(files), frozenset(directories))


def _webhdfs_children(storage: Any, path: str) -> Children:
    from airflow_sparklag.errors import StorageNotFound

    storage.requests.add("list")
    try:
        response = storage.namenode("GET", path, "LISTSTATUS")
    except StorageNotFound:
        return Children(frozenset(), frozenset())
    statuses = response.json().get("FileStatuses", {}).get("FileStatus", [])
    files = {s["pathSuffix"] for s in statuses if s.get("type") == "FILE" and s.get("pathSuffix")}
    directories = {
        s["pathSuffix"] for s in statuses if s.get("type") == "DIRECTORY" and s.get("pathSuffix")
    }
    return Children(frozenset(files), frozenset(directories))


def _fsspec_children(storage: Any, path: str) -> Children:
    storage.requests.add("list")
    try:
        entries = storage.filesystem.ls(path, detail=True)
    except FileNotFoundError:
        return Children(frozenset(), frozenset())
    except Exception as exc:  # each fsspec implementation raises its own errors
        raise StorageError(f"{path}: list directory failed: {type(exc).__name__}: {exc}") from exc
    own = path.rstrip("/").split("://", 1)[-1]
    files: set[str] = set()
    directories: set[str] = set()
    for entry in entries:
        full = str(entry["name"]).rstrip("/")
        if full.split("://", 1)[-1] == own:
            continue
        name = full.rsplit("/", 1)[-1]
        (directories if entry.get("type") == "directory" else files).add(name)
    return Children(frozenset(files), frozenset(directories))


def discover_checkpoints(
    prefix: str,
    *,
    storage: Storage | None = None,
    s3_options: dict[str, Any] | None = None,
    webhdfs_options: dict[str, Any] | None = None,
    fsspec_options: dict[str, Any] | None = None,
    max_depth: int = 4,
    max_workers: int = MAX_READERS,
) -> list[str]:
    """Checkpoint roots at or under ``prefix`` (sorted), at most ``max_depth`` levels down.

    Costs one listing per directory visited (level by level, ``max_workers`` at once). A
    checkpoint's own subdirectories are never listed, and directories whose name starts with
    ``.`` or ``_`` (``_spark_metadata``, ``_temporary``, hidden ones) are skipped.

    >>> discover_checkpoints("s3a://bucket/checkpoints")          # doctest: +SKIP
    ['s3a://bucket/checkpoints/team-a/orders', 's3a://bucket/checkpoints/team-b/clicks']
    """
    backend = storage or open_storage(
        prefix,
        s3_options=s3_options,
        webhdfs_options=webhdfs_options,
        fsspec_options=fsspec_options,
    )
    root = prefix.rstrip("/") or prefix
    found: list[str] = []
    level = [root]
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        for depth in range(max_depth + 1):
            if not level:
                break
            next_level: list[str] = []
            for directory, children in zip(
                level, pool.map(lambda d: list_children(backend, d), level), strict=True
            ):
                if children.is_checkpoint:
                    found.append(directory)
                elif depth < max_depth:
                    next_level.extend(
                        join(directory, name)
                        for name in sorted(children.directories)
                        if not name.startswith((".", "_"))
                    )
            level = next_level
    return sorted(found)


class FleetChecker:
    """Checks a fixed (or discovered) set of checkpoints repeatedly, e.g. from a sensor loop.

    It keeps one :class:`~airflow_sparklag.checkpoint.CheckpointReader` per location across
    polls, so a poll re-reads only what is new: the listing(s), and one GET per
    new batch (and per new in-flight batch). Each poll takes ONE Kafka snapshot for every topic
    of every checkpoint. Readers forget batches that fell out of the history window, so memory
    stays flat however long the checker lives.

    >>> fleet = FleetChecker(prefix="s3a://bucket/checkpoints",
    ...                      kafka_config={"bootstrap.servers": "broker:9092"})  # doctest: +SKIP
    >>> for result in fleet.check():                                        # doctest: +SKIP
    ...     print(result.location, result.verdict.health.value)
    >>> fleet.storage_requests                                              # doctest: +SKIP
    2000

    ``rediscover_seconds`` (with ``prefix``) lists the prefix again when that much time has
    passed since the last discovery, to pick up new jobs and drop deleted ones.

    ``query_ids=True`` also reads each checkpoint's ``metadata`` (once per reader) so reports
    carry the query id; by default they do not (``query_id`` is ``None``): lag and health do
    not need it, and it would cost a third request per job on a first check.
    """

    def __init__(
        self,
        locations: Sequence[str] = (),
        *,
        kafka_config: Mapping[str, Any],
        prefix: str | Sequence[str] | None = None,
        s3_options: dict[str, Any] | None = None,
        webhdfs_options: dict[str, Any] | None = None,
        fsspec_options: dict[str, Any] | None = None,
        thresholds: Thresholds | Mapping[str, Any] | None = None,
        history: int = 10,
        exact_time_lag: bool = False,
        read_committed: bool | None = None,
        kafka_timeout: float = 10.0,
        kafka_client: KafkaOffsetsClient | None = None,
        max_workers: int = MAX_READERS,
        max_depth: int = 4,
        rediscover_seconds: float | None = None,
        query_ids: bool = False,
    ) -> None:
        if not locations and not prefix:
            raise ValueError("FleetChecker needs checkpoint locations or a prefix to discover")
        self.kafka_config = dict(kafka_config)
        self.storages = StoragePool(
            s3_options=s3_options, webhdfs_options=webhdfs_options, fsspec_options=fsspec_options
        )
        self.prefixes = [prefix] if isinstance(prefix, str) else list(prefix or ())
        self.thresholds = as_thresholds(thresholds)
        self.history = history
        self.exact_time_lag = exact_time_lag
        self.read_committed = read_committed
        self.kafka_timeout = kafka_timeout
        self.max_workers = max_workers
        self.max_depth = max_depth
        self.rediscover_seconds = rediscover_seconds
        self.query_ids = query_ids
        self._given = list(dict.fromkeys(loc.rstrip("/") or loc for loc in locations))
        self._locations: list[str] = list(self._given)
        self._discovered_at: float | None = None
        self._readers: dict[str, CheckpointReader] = {}
        self._kafka = kafka_client
        self._own_kafka = kafka_client is None
        self.polls = 0

    # -- locations ------------------------------------------------------------------------------

    @property
    def locations(self) -> list[str]:
        """The checkpoints the next poll checks (discovering them first if needed)."""
        self._maybe_discover()
        return list(self._locations)

    def discover(self) -> list[str]:
        """List the prefixes again; readers of vanished checkpoints are dropped."""
        found: list[str] = []
        for prefix in self.prefixes:
            found.extend(
                discover_checkpoints(
                    prefix,
                    storage=self.storages.for_location(prefix),
                    max_depth=self.max_depth,
                    max_workers=self.max_workers,
                )
            )
        self._locations = list(dict.fromkeys([*self._given, *found]))
        self._discovered_at = time.monotonic()
        keep = set(self._locations)
        for location in list(self._readers):
            if location not in keep:
                del self._readers[location]
        return list(self._locations)

    def _maybe_discover(self) -> None:
        if not self.prefixes:
            return
        stale = self._discovered_at is None or (
            self.rediscover_seconds is not None
            and time.monotonic() - self._discovered_at >= self.rediscover_seconds
        )
        if stale:
            self.discover()

    # -- polling --------------------------------------------------------------------------------

    @property
    def storage_requests(self) -> int:
        """Storage requests sent so far (discovery included), over every backend."""
        return self.storages.requests_total

    def _reader(self, location: str) -> CheckpointReader:
        from airflow_sparklag.checkpoint import CheckpointReader

        reader = self._readers.get(location)
        if reader is None:
            reader = CheckpointReader(
                self.storages.for_location(location), location, query_id=self.query_ids
            )
            self._readers[location] = reader
        return reader

    def read_states(
        self, progress: Progress | None = None
    ) -> tuple[dict[str, CheckpointState], dict[str, CheckResult]]:
        """Read every checkpoint (in parallel): states, and a failed result per unreadable one."""
        locations = self.locations
        readers = {loc: self._reader(loc) for loc in locations}
        states: dict[str, CheckpointState] = {}
        failures: dict[str, CheckResult] = {}

        def read(location: str) -> tuple[str, CheckpointState | SparkLagError]:
            reader = readers[location]
            try:
                state = reader.read(history=self.history)
            except SparkLagError as exc:
                return location, exc
            return location, state

        done = 0
        if locations:
            workers = max(1, min(self.max_workers, len(locations)))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for location, outcome in pool.map(read, locations):
                    if isinstance(outcome, SparkLagError):
                        failures[location] = _failed(location, outcome)
                    else:
                        states[location] = outcome
                    done += 1
                    if progress is not None:
                        progress(done, len(locations))
        return states, failures

    def check(
        self, *, now: float | None = None, progress: Progress | None = None
    ) -> list[CheckResult]:
        """One poll: read every checkpoint, one Kafka snapshot, a result per location in order.

        An unreadable checkpoint gives ``error`` and an UNKNOWN verdict; Kafka errors concern
        every job and are raised. ``progress(done, total)`` is called as checkpoints are read.
        """
        states, failures = self.read_states(progress)
        judged: dict[str, CheckResult] = {}
        if states:
            judged = judge_states(
                states,
                kafka_config=self.kafka_config,
                kafka_client=self._kafka_client(),
                kafka_timeout=self.kafka_timeout,
                thresholds=self.thresholds,
                exact_time_lag=self.exact_time_lag,
                read_committed=self.read_committed,
                now=now,
            )
        self.polls += 1
        return [judged.get(loc) or failures[loc] for loc in self._locations]

    def _kafka_client(self) -> KafkaOffsetsClient:
        # One client for the checker's life: its connections are reused from poll to poll.
        if self._kafka is None:
            self._kafka = KafkaOffsetsClient(self.kafka_config, timeout=self.kafka_timeout)
        return self._kafka

    def close(self) -> None:
        if self._own_kafka and self._kafka is not None:
            self._kafka.close()
            self._kafka = None

    def __enter__(self) -> FleetChecker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def check_fleet(
    locations: Iterable[str] = (),
    *,
    kafka_config: Mapping[str, Any],
    prefix: str | Sequence[str] | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> list[CheckResult]:
    """One check of many checkpoints (and/or those found under ``prefix``); see FleetChecker."""
    with FleetChecker(
        list(locations), kafka_config=kafka_config, prefix=prefix, **options
    ) as fleet:
        return fleet.check(progress=progress)


def _failed(location: str, error: SparkLagError) -> CheckResult:
    message = f"{type(error).__name__}: {error}"
    return CheckResult(
        None, HealthVerdict(Health.UNKNOWN, message, "unreadable"), location, message
    )
