"""Checkpoint snapshots: a verified JSON record of what a Spark query has COMMITTED, so that a
query can restart on a new checkpoint without losing or re-reading data. Written once, read
back and verified; rules in docs/snapshots.md.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow_sparklag import params
from airflow_sparklag.errors import (
    NothingCommitted,
    SnapshotCorrupt,
    SnapshotError,
    SnapshotVerificationFailed,
    StorageNotFound,
)
from airflow_sparklag.location import Location, join
from airflow_sparklag.redact import redact_url
from airflow_sparklag.session import Session
from airflow_sparklag.storage import Storage, inside

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint_files import BatchOffsets, CheckpointState
    from airflow_sparklag.kafka import KafkaSnapshot


FORMAT_NAME = "sparklag-checkpoint-snapshot"
FORMAT_VERSION = 1
EARLIEST = -2  # Spark's startingOffsets value for "from the log start"
_TOOL = "airflow-provider-sparklag"


# -- the document ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotSource:
    """One source of a batch. ``kafka`` maps topic -> partition -> NEXT offset to read."""

    source_id: str
    kind: str  # "kafka" | "other" | "none"
    kafka: Mapping[str, Mapping[int, int]] | None
    raw: str | None = None  # the offset as Spark wrote it, for non-Kafka sources
    # The cluster the source's offsets were read against (docs/multi-cluster.md); None in
    # snapshots taken without Kafka and in those older tools wrote.
    bootstrap_servers: str | None = None
    cluster_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # The cluster only when known: an older document, without it, keeps its checksum.
        cluster = {"bootstrap_servers": self.bootstrap_servers, "cluster_id": self.cluster_id}
        return {
            "source_id": self.source_id,
            "kind": self.kind,
            "offsets": None if self.kafka is None else by_partition(self.kafka),
            "raw": self.raw if self.kind == "other" else None,
            **{key: value for key, value in cluster.items() if value is not None},
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> SnapshotSource:
        offsets = document.get("offsets")
        return cls(
            source_id=str(document["source_id"]),
            kind=str(document["kind"]),
            kafka=None if offsets is None else by_partition(offsets, int, int),
            raw=document.get("raw"),
            bootstrap_servers=document.get("bootstrap_servers"),
            cluster_id=document.get("cluster_id"),
        )


@dataclass(frozen=True)
class SnapshotBatch:
    """A batch as recorded in a snapshot (the committed one, or the one in flight)."""

    batch_id: int
    batch_timestamp_ms: int | None
    watermark_ms: int | None
    file_time: str | None  # commits/C (committed) or offsets/L (in flight) modification, UTC ISO
    sources: tuple[SnapshotSource, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "batch_timestamp_ms": self.batch_timestamp_ms,
            "watermark_ms": self.watermark_ms,
            "file_time": self.file_time,
            "sources": [source.to_dict() for source in self.sources],
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> SnapshotBatch:
        return cls(
            batch_id=int(document["batch_id"]),
            batch_timestamp_ms=document.get("batch_timestamp_ms"),
            watermark_ms=document.get("watermark_ms"),
            file_time=document.get("file_time"),
            sources=tuple(SnapshotSource.from_dict(s) for s in document["sources"]),
        )

    @classmethod
    def of(
        cls,
        batch: BatchOffsets,
        file_time: float | None,
        clusters: Mapping[str, tuple[str, str | None]],
    ) -> SnapshotBatch:
        """``batch`` as recorded, each source with its cluster (``clusters``: source id ->
        (bootstrap servers, cluster id))."""
        sources = []
        for s in batch.sources:
            servers, cluster_id = clusters.get(s.source_id, (None, None))
            kafka = None if s.kafka is None else by_partition(s.kafka, int)
            raw = s.raw if s.kind == "other" else None
            sources.append(SnapshotSource(s.source_id, s.kind, kafka, raw, servers, cluster_id))
        return cls(
            batch_id=batch.batch_id,
            batch_timestamp_ms=batch.batch_timestamp_ms,
            watermark_ms=batch.watermark_ms,
            file_time=None if file_time is None else utc_iso(file_time),
            sources=tuple(sources),
        )

    def kafka_sources(self) -> dict[str, Mapping[str, Mapping[int, int]]]:
        return {s.source_id: s.kafka for s in self.sources if s.kind == "kafka" and s.kafka}

    def source(self, source_id: str) -> SnapshotSource:
        return next(s for s in self.sources if s.source_id == source_id)


@dataclass(frozen=True)
class Snapshot:
    """What a query has committed, at one moment. Immutable; ``to_dict()`` is the document.

    Example::

        snapshot = build_snapshot(state, cluster_id="abc")
        snapshot.starting_offsets()            # {"orders": {"0": 1042, "1": 998}}
        document = snapshot.to_dict()          # includes {"checksum": {"sha256": ...}}
    """

    query_id: str | None
    checkpoint_location: str
    committed: SnapshotBatch
    in_flight: SnapshotBatch | None
    kafka_cluster_id: str | None
    snapshot_time: str  # UTC ISO
    tool_version: str
    # source id -> topic -> partition -> timestamp (ms) of the record at the committed offset;
    # None where there was no record yet (committed == log end).
    record_timestamps_ms: Mapping[str, Mapping[str, Mapping[int, int | None]]] | None = None
    kafka_fetched_at: str | None = None  # when the cluster id / timestamps were read, UTC ISO
    format_version: int = FORMAT_VERSION
    checksum: str = field(default="", compare=False)

    # -- document ------------------------------------------------------------------------

    def content(self) -> dict[str, Any]:
        """The document without its checksum: what the checksum covers."""
        stamps = self.record_timestamps_ms
        timestamps = None
        if stamps is not None:
            timestamps = {src: by_partition(topics) for src, topics in sorted(stamps.items())}
        return {
            "format": FORMAT_NAME,
            "format_version": self.format_version,
            "query_id": self.query_id,
            "checkpoint_location": self.checkpoint_location,
            "committed_batch": self.committed.to_dict(),
            "in_flight_batch": self.in_flight.to_dict() if self.in_flight else None,
            "kafka_cluster_id": self.kafka_cluster_id,
            "kafka_fetched_at": self.kafka_fetched_at,
            "commit_time": self.committed.file_time,
            "snapshot_time": self.snapshot_time,
            "tool": {"name": _TOOL, "version": self.tool_version},
            "record_timestamps_ms": timestamps,
        }

    def computed_checksum(self) -> str:
        return hashlib.sha256(canonical_bytes(self.content())).hexdigest()

    def sealed(self) -> Snapshot:
        """This snapshot with its checksum filled in."""
        return replace(self, checksum=self.computed_checksum())

    def to_dict(self) -> dict[str, Any]:
        document = self.content()
        document["checksum"] = {"algorithm": "sha256", "value": self.checksum}
        return document

    def to_json(self) -> bytes:
        return (json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], *, where: str = "snapshot") -> Snapshot:
        """Parse and verify a document (format, version, checksum)."""
        if document.get("format") != FORMAT_NAME:
            raise SnapshotCorrupt(
                f"{where}: not a {FORMAT_NAME} document (format={document.get('format')!r})"
            )
        version = document.get("format_version")
        if version != FORMAT_VERSION:
            raise SnapshotCorrupt(
                f"{where}: snapshot format version {version!r} is not supported (this tool "
                f"reads version {FORMAT_VERSION}); use the tool version that wrote it"
            )
        try:
            stamps = document.get("record_timestamps_ms")
            if stamps is not None:
                stamps = {src: by_partition(topics, int) for src, topics in stamps.items()}
            in_flight = document.get("in_flight_batch")
            snapshot = cls(
                query_id=document.get("query_id"),
                checkpoint_location=str(document["checkpoint_location"]),
                committed=SnapshotBatch.from_dict(document["committed_batch"]),
                in_flight=SnapshotBatch.from_dict(in_flight) if in_flight else None,
                kafka_cluster_id=document.get("kafka_cluster_id"),
                snapshot_time=str(document["snapshot_time"]),
                tool_version=str(document["tool"]["version"]),
                record_timestamps_ms=stamps,
                kafka_fetched_at=document.get("kafka_fetched_at"),
                format_version=int(version),
                checksum=str(document["checksum"]["value"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SnapshotCorrupt(f"{where}: malformed snapshot document ({exc!r})") from exc
        expected = snapshot.computed_checksum()
        if snapshot.checksum != expected:
            raise SnapshotCorrupt(
                f"{where}: checksum mismatch (document says {snapshot.checksum[:12]}..., content "
                f"hashes to {expected[:12]}...): the file was edited or damaged; do not use it"
            )
        return snapshot

    @classmethod
    def from_json(cls, data: bytes, *, where: str = "snapshot") -> Snapshot:
        try:
            document = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise SnapshotCorrupt(
                f"{where}: not a JSON snapshot document ({str(exc)[:120]})"
            ) from None
        if not isinstance(document, dict):
            raise SnapshotCorrupt(f"{where}: not a JSON object")
        return cls.from_dict(document, where=where)

    # -- starting offsets ----------------------------------------------------------------

    def kafka_source_id(self, source_id: str | None = None) -> str:
        """The one Kafka source's id (or check ``source_id``); several need an explicit one."""
        kafka_ids = list(self.committed.kafka_sources())
        if source_id is not None:
            if source_id not in kafka_ids:
                raise SnapshotError(
                    f"snapshot of {self.checkpoint_location} has no Kafka source {source_id!r} "
                    f"(Kafka sources: {kafka_ids})"
                )
            return source_id
        if not kafka_ids:
            raise SnapshotError(
                f"snapshot of {self.checkpoint_location}: batch {self.committed.batch_id} has "
                "no Kafka source offsets"
            )
        if len(kafka_ids) > 1:
            raise SnapshotError(
                f"snapshot of {self.checkpoint_location} has {len(kafka_ids)} Kafka sources "
                f"{kafka_ids}: say which one (source_id)"
            )
        return kafka_ids[0]

    def starting_offsets(
        self, kafka: KafkaSnapshot | None = None, *, source_id: str | None = None
    ) -> dict[str, dict[str, int]]:
        """Spark's ``startingOffsets`` for a new checkpoint: topic -> "partition" -> offset.

        With ``kafka``, every partition Kafka has is named: partitions the checkpoint lacks are
        read from earliest (-2), exactly what the old query would have done.
        """
        committed = self.committed.kafka_sources()[self.kafka_source_id(source_id)]
        result = {topic: dict(parts) for topic, parts in committed.items()}
        for topic, offsets in result.items():
            for partition in kafka.partitions.get(topic, {}) if kafka is not None else ():
                offsets.setdefault(partition, EARLIEST)
        return by_partition(result, value=int)

    def starting_offsets_by_timestamp(
        self, *, source_id: str | None = None
    ) -> dict[str, dict[str, int]]:
        """Spark's ``startingOffsetsByTimestamp``: the record time at each committed offset.

        Approximate by nature (it trusts record timestamps to grow with offsets); the exact form
        is :meth:`starting_offsets`. A partition with no record at its committed offset yet gets
        the time Kafka was read: use ``startingOffsetsByTimestampStrategy=latest`` with it.
        """
        sid = self.kafka_source_id(source_id)
        if self.record_timestamps_ms is None or sid not in self.record_timestamps_ms:
            raise SnapshotError(
                f"snapshot of {self.checkpoint_location} holds no record timestamps; take it "
                "with record timestamps to get startingOffsetsByTimestamp"
            )
        fallback = int(_from_iso(self.kafka_fetched_at or self.snapshot_time).timestamp() * 1000)
        stamps = self.record_timestamps_ms[sid]
        return by_partition(stamps, value=lambda ts: fallback if ts is None else ts)

    def replay_ranges(self) -> dict[str, dict[str, dict[str, dict[str, int]]]]:
        """What a restart from this snapshot may read twice: the in-flight batch's range.

        source id -> topic -> partition -> {"from": committed, "to": in-flight end}; only
        partitions where the in-flight batch planned to read something.
        """
        if self.in_flight is None:
            return {}
        planned = self.in_flight.kafka_sources()
        result: dict[str, dict[str, dict[str, dict[str, int]]]] = {}
        for sid, topics in self.committed.kafka_sources().items():
            for topic, parts in planned.get(sid, {}).items():
                for partition, end in parts.items():
                    start = topics.get(topic, {}).get(partition, 0)
                    if end > start:
                        result.setdefault(sid, {}).setdefault(topic, {})[str(partition)] = {
                            "from": int(start),
                            "to": int(end),
                        }
        return result


def by_partition(
    topics: Mapping[str, Mapping[Any, Any]],
    key: Callable[[Any], Any] = str,
    value: Callable[[Any], Any] = lambda v: v,
) -> dict[str, dict[Any, Any]]:
    """topic -> partition -> value, sorted, each partition made ``key(p)`` (``str`` for JSON,
    ``int`` back) and each value ``value(v)``."""
    return {
        str(t): {key(p): value(v) for p, v in sorted(parts.items())}
        for t, parts in sorted(topics.items())
    }


def canonical_bytes(document: Mapping[str, Any]) -> bytes:
    """Sorted keys, no whitespace, UTF-8: the bytes the checksum is computed over."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def utc_iso(epoch_seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(epoch_seconds, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _from_iso(text: str) -> datetime.datetime:
    """The moment of a ``utc_iso`` text (Python 3.10's ``fromisoformat`` reads no "Z")."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def build_snapshot(
    state: CheckpointState,
    *,
    cluster_id: str | None = None,
    record_timestamps: Mapping[str, Mapping[tuple[str, int], int | None]] | None = None,
    kafka_fetched_at: float | None = None,
    now: float | None = None,
    clusters: Mapping[str, tuple[str, str | None]] | None = None,
) -> Snapshot:
    """A sealed snapshot of ``state``'s COMMITTED batch (pure: no I/O).

    ``record_timestamps`` ({source id: {(topic, partition): ms | None}}, the record at each
    committed offset) makes :meth:`Snapshot.starting_offsets_by_timestamp` available.
    ``clusters`` ({source id: (bootstrap servers, cluster id)}) records the cluster each Kafka
    source was read against; ``cluster_id`` is the main cluster's.
    """
    from airflow_sparklag import __version__

    if state.committed is None or state.committed_batch_id is None:
        planned = (
            f" (batch {state.in_flight.batch_id} is planned but not committed)"
            if state.in_flight
            else ""
        )
        raise NothingCommitted(
            f"{redact_url(state.location)}: no committed batch{planned}: there are no "
            "processed offsets to carry over; let the query commit a batch first, or start the "
            "new query from earliest"
        )
    clusters = clusters or {}
    committed = SnapshotBatch.of(state.committed, state.commit_modified, clusters)
    timestamps: dict[str, dict[str, dict[int, int | None]]] | None = None
    if record_timestamps is not None:
        timestamps = {}
        for sid, topics in committed.kafka_sources().items():
            stamps = record_timestamps.get(sid, {})
            timestamps[sid] = {
                topic: {p: stamps.get((topic, p)) for p in parts} for topic, parts in topics.items()
            }
    in_flight = state.in_flight
    return Snapshot(
        query_id=state.query_id,
        checkpoint_location=redact_url(state.location),
        committed=committed,
        in_flight=None
        if in_flight is None
        else SnapshotBatch.of(in_flight, in_flight.modified, clusters),
        kafka_cluster_id=cluster_id,
        snapshot_time=utc_iso(time.time() if now is None else now),
        tool_version=__version__,
        record_timestamps_ms=timestamps,
        kafka_fetched_at=utc_iso(kafka_fetched_at) if kafka_fetched_at is not None else None,
    ).sealed()


# -- storage ---------------------------------------------------------------------------------


def outside_checkpoint(name: str, root: str | Location | None, location: str | Location) -> None:
    """Refuse a ``root`` (archive or snapshot) inside the checkpoint at ``location``: written
    there, it would be copied or moved with the checkpoint (``InvalidParameter`` naming it)."""
    if root is not None and inside(root, location):
        raise params.invalid(
            name,
            f"{redact_url(str(root))} is inside the checkpoint {redact_url(str(location))}: it "
            "would be copied or moved with the checkpoint; give a root outside it (e.g. beside it)",
        )


def snapshot_path(root: str, snapshot: Snapshot) -> str:
    """``<root>/<query id>/<batch id>-<UTC time>.json``."""
    stamp = _from_iso(snapshot.snapshot_time).strftime("%Y%m%dT%H%M%S.%fZ")
    query = snapshot.query_id or "unknown-query"
    return join(root, query, f"{snapshot.committed.batch_id}-{stamp}.json")


def save_snapshot(snapshot: Snapshot, storage: Storage, path: str) -> str:
    """Write once (never overwrite), read back and verify; returns ``path``.

    Raises :class:`~airflow_sparklag.errors.StorageAlreadyExists` if ``path`` exists and
    :class:`SnapshotVerificationFailed` when what is read back differs.
    """
    if snapshot.checksum != snapshot.computed_checksum():
        raise SnapshotCorrupt("refusing to write a snapshot whose checksum does not match")
    storage.write_atomic(path, snapshot.to_json(), overwrite=False)
    try:  # read back: checksum valid, and the same checksum and offsets as written
        stored = load_snapshot(storage, path)
    except (SnapshotCorrupt, StorageNotFound) as exc:
        raise SnapshotVerificationFailed(
            f"{path}: written snapshot does not read back: {exc}"
        ) from exc
    if stored.checksum != snapshot.checksum or stored.committed != snapshot.committed:
        raise SnapshotVerificationFailed(
            f"{path}: the snapshot read back differs from the one written (checksum "
            f"{stored.checksum[:12]} vs {snapshot.checksum[:12]}); do not use it"
        )
    return path


def load_snapshot(storage: Storage, path: str) -> Snapshot:
    """Read and verify a snapshot document."""
    return Snapshot.from_json(storage.read(path), where=path)


# -- one call: checkpoint -> verified snapshot -----------------------------------------------


@dataclass(frozen=True)
class SnapshotResult:
    """A written, verified snapshot plus the Kafka view it was taken with: each Kafka source's
    own cluster's (``kafka``: source id -> snapshot; None without Kafka)."""

    snapshot: Snapshot
    path: str | None  # None when not written (dry run)
    kafka: Mapping[str, KafkaSnapshot] | None

    def starting_offsets(self, source_id: str | None = None) -> dict[str, dict[str, int]]:
        sid = self.snapshot.kafka_source_id(source_id)
        return self.snapshot.starting_offsets((self.kafka or {}).get(sid), source_id=sid)

    def starting_offsets_json(self, source_id: str | None = None) -> str:
        return json.dumps(self.starting_offsets(source_id), separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (XCom, ``--json``)."""
        starting: dict[str, Any] = {}
        by_time: dict[str, Any] = {}
        clusters: dict[str, Any] = {}
        for sid in self.snapshot.committed.kafka_sources():
            starting[sid] = self.starting_offsets(sid)
            if self.snapshot.record_timestamps_ms is not None:
                by_time[sid] = self.snapshot.starting_offsets_by_timestamp(source_id=sid)
            source = self.snapshot.committed.source(sid)
            clusters[sid] = {
                "bootstrap_servers": source.bootstrap_servers,
                "cluster_id": source.cluster_id,
            }
        return {
            "path": self.path,
            "query_id": self.snapshot.query_id,
            "checkpoint_location": self.snapshot.checkpoint_location,
            "committed_batch_id": self.snapshot.committed.batch_id,
            "in_flight_batch_id": (
                self.snapshot.in_flight.batch_id if self.snapshot.in_flight else None
            ),
            "replay_ranges": self.snapshot.replay_ranges(),
            "checksum": self.snapshot.checksum,
            "starting_offsets": starting,
            "starting_offsets_by_timestamp": by_time,
            "kafka_cluster_id": self.snapshot.kafka_cluster_id,
            "source_clusters": clusters,
        }


def source_snapshots(
    session: Session, sources: Mapping[str, Mapping[str, Mapping[int, int]]]
) -> dict[str, KafkaSnapshot]:
    """Each Kafka source's view of its own cluster (``Session.cluster_of``): one snapshot per
    cluster, of the topics of the sources it serves."""
    topics: dict[int, set[str]] = {}
    for sid, offsets in sources.items():
        topics.setdefault(session.cluster_of(sid), set()).update(offsets)
    taken = {c: session.cluster_kafka(c).snapshot(sorted(t)) for c, t in sorted(topics.items())}
    return {sid: taken[session.cluster_of(sid)] for sid in sources}


def take_snapshot(
    state: CheckpointState,
    session: Session,
    *,
    now: float | None = None,
    record_timestamps: bool = True,
) -> tuple[Snapshot, dict[str, KafkaSnapshot] | None]:
    """Build a snapshot of ``state`` with each Kafka source's cluster (servers, id) and record
    times read from that cluster; without Kafka in the session, a snapshot without them."""
    draft = build_snapshot(state, now=now)
    if not session.has_kafka and not session.source_kafka:
        return draft, None
    sources = draft.committed.kafka_sources()
    views = source_snapshots(session, sources)
    timestamps = None
    if record_timestamps:
        timestamps = {}
        for sid, topics in sources.items():
            wanted = {
                (topic, p): o
                for topic, parts in topics.items()
                if topic not in views[sid].missing_topics
                for p, o in parts.items()
            }
            timestamps[sid] = session.kafka_for(sid).record_timestamps(wanted) if wanted else {}
    main = [views[sid] for sid in sources if session.cluster_of(sid) == 0]
    if not main and session.has_kafka:  # no source reads it: its id all the same
        main = [session.kafka.snapshot([])]
    snapshot = build_snapshot(
        state,
        cluster_id=main[0].cluster_id if main else None,
        record_timestamps=timestamps,
        kafka_fetched_at=max((v.fetched_at for v in views.values()), default=None),
        now=now,
        clusters={
            sid: (session.cluster_servers(session.cluster_of(sid)), view.cluster_id)
            for sid, view in views.items()
        },
    )
    return snapshot, views


def export_to_group(session: Session, group_id: str, result: SnapshotResult) -> dict[str, Any]:
    """Commit the snapshot's offsets to ``group_id`` on each Kafka source's own cluster, within
    the session's Kafka timeout: one cluster gives its ``ConsumerGroupExport.to_dict()``,
    several give ``{"group_id", "total_lag", "clusters": {servers: export}}``."""
    from airflow_sparklag.consumer_group import export_offsets

    by_cluster: dict[int, dict[str, dict[int, int]]] = {}
    configs: dict[int, Mapping[str, Any]] = {}
    for sid, topics in result.snapshot.committed.kafka_sources().items():
        cluster = session.cluster_of(sid)
        configs[cluster] = session.source_kafka.get(sid, session.kafka_config)
        offsets = by_cluster.setdefault(cluster, {})
        for topic, parts in topics.items():
            mine = {int(p): int(o) for p, o in parts.items()}
            if offsets.setdefault(topic, mine) != mine:
                raise SnapshotError(
                    f"snapshot of {result.snapshot.checkpoint_location}: two Kafka sources read "
                    f"topic {topic!r} on cluster {session.cluster_servers(cluster)} at different "
                    "offsets: one consumer group cannot hold both"
                )
    exports = {}
    for cluster, offsets in sorted(by_cluster.items()):
        ends = {
            t: {p: po.log_end for p, po in ps.items()}
            for sid, view in (result.kafka or {}).items()
            if session.cluster_of(sid) == cluster
            for t, ps in view.partitions.items()
        }
        exports[session.cluster_servers(cluster)] = export_offsets(
            configs[cluster],
            group_id,
            offsets,
            timeout=session.kafka_timeout,
            log_ends=ends or None,
        ).to_dict()
    if len(exports) == 1:
        return next(iter(exports.values()))
    total = [e["total_lag"] for e in exports.values()]
    return {
        "group_id": group_id,
        "total_lag": None if None in total else sum(total),
        "clusters": exports,
    }


def snapshot_checkpoint(
    location: Location | str,
    snapshot_root: Location | str,
    *,
    session: Session | None = None,
    record_timestamps: bool = True,
    write: bool = True,
    now: float | None = None,
    **session_options: Any,
) -> SnapshotResult:
    """Read ``location``'s checkpoint, snapshot its committed batch, write it under
    ``snapshot_root`` and verify it. Without Kafka the cluster id and the partitions added
    since are unknown (the snapshot is still valid). Without ``session``, one is opened from
    ``session_options`` (``kafka_config``, ...) and closed before returning.

    Example::

        result = snapshot_checkpoint("s3a://bucket/ck/orders", "s3a://bucket/snapshots",
                                     kafka_config={"bootstrap.servers": "broker:9092"})
        result.path                      # s3a://bucket/snapshots/<query id>/<batch>-<UTC>.json
        result.starting_offsets_json()   # {"orders":{"0":1042,"1":998,"2":1011}}
    """
    location = Location.of(location)
    root = Location.of(snapshot_root, "snapshot_root") if write else None
    if root is not None:  # (a consumer-group export reads only: no root)
        outside_checkpoint("snapshot_root", root.text, location.text)
    with Session.using(session, **session_options) as active:
        state = active.read(location, history=1)
        snapshot, kafka = take_snapshot(state, active, now=now, record_timestamps=record_timestamps)
        path = None
        if root is not None:
            path = snapshot_path(root.text, snapshot)
            save_snapshot(snapshot, active.storage(root), path)
        return SnapshotResult(snapshot=snapshot, path=path, kafka=kafka)
