"""Move a Spark query to a new checkpoint without losing data.

Restarting a changed query often needs a fresh checkpoint (new state schema, new sources). Done
by hand, it loses or replays data. :func:`migrate_checkpoint` does it in journaled steps::

    from airflow_sparklag.migration import migrate_checkpoint

    result = migrate_checkpoint(
        "s3a://bucket/ck/orders",
        archive_root="s3a://bucket/archive",
        kafka_config={"bootstrap.servers": "broker:9092"},
    )
    spark_options = {"startingOffsets": result.starting_offsets_json()}

1. preflight: refuse while the job looks alive (a commit or a planned batch within
   ``quiet_period`` seconds) unless ``force``;
2. snapshot: take, write and verify a snapshot of the last COMMITTED batch (or verify a given
   one);
3. validate against Kafka: a committed offset below the log start is data loss (refused unless
   ``allow_data_loss``, then the start is the log start and the loss is reported); partitions
   added since start from earliest (-2); a topic that is gone or was re-created is refused; a file
   sink whose ``_spark_metadata`` log holds batch ids the new checkpoint would reuse is refused
   unless ``move_sink_log`` (the log is archived with the checkpoint);
4. archive the old checkpoint (verified copy, then delete; a rename where the store has one);
5. return the new query's ``startingOffsets`` naming every partition.

Each step is recorded in a journal (``<archive_root>/<name>-<hash>/journal.json``) before the
next begins: a re-run after a crash resumes, or, when everything is done, returns the recorded
result. At no point is the checkpoint gone without a verified snapshot and a verified archive.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_sparklag.archive import archive_tree
from airflow_sparklag.checkpoint import CheckpointReader, parse_batch_id
from airflow_sparklag.errors import CheckpointNotFound, SparkLagError, StorageNotFound
from airflow_sparklag.snapshot import (
    EARLIEST,
    Snapshot,
    kafka_topics,
    load_snapshot,
    save_snapshot,
    snapshot_path,
    strip_credentials,
    take_snapshot,
    utc_iso,
)
from airflow_sparklag.storage import Storage, join, open_storage

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint import CheckpointState
    from airflow_sparklag.kafka import KafkaOffsetsClient, KafkaSnapshot

__all__ = [
    "DataLossRefused",
    "JobStillRunning",
    "MigrationRefused",
    "MigrationResult",
    "SinkLogConflict",
    "SnapshotMismatch",
    "TopicGone",
    "migrate_checkpoint",
]

JOURNAL_FORMAT = "sparklag-migration-journal"
STEPS = ("preflight", "snapshot", "validated", "archiving", "archived", "sink_logs", "completed")


class MigrationRefused(SparkLagError):
    """The migration would lose data or disturb a running job; nothing was changed."""


class JobStillRunning(MigrationRefused):
    """The query committed or planned a batch recently: it may still be running."""


class DataLossRefused(MigrationRefused):
    """Committed offsets are below the log start: records were deleted before being read."""


class TopicGone(MigrationRefused):
    """A topic of the checkpoint no longer exists (or was deleted and re-created)."""


class SinkLogConflict(MigrationRefused):
    """A file sink's ``_spark_metadata`` would make the new query skip its first batches."""


class SnapshotMismatch(MigrationRefused):
    """The given snapshot is not of this checkpoint, or the job ran on after it was taken."""


# -- result ----------------------------------------------------------------------------------


@dataclass
class MigrationResult:
    """The plan (dry run) or the outcome of a migration. ``to_dict()`` is JSON-safe."""

    checkpoint: str
    status: str  # "planned" | "completed" | "already-completed"
    journal_path: str
    archive_location: str
    snapshot_path: str | None
    query_id: str | None
    committed_batch_id: int | None
    in_flight_batch_id: int | None
    starting_offsets: dict[str, dict[str, dict[str, int]]]  # source -> topic -> "p" -> offset
    starting_offsets_by_timestamp: dict[str, dict[str, dict[str, int]]] = field(
        default_factory=dict
    )
    partitions_added: dict[str, list[int]] = field(default_factory=dict)
    records_lost: dict[str, dict[str, int]] = field(default_factory=dict)
    replay_ranges: dict[str, Any] = field(default_factory=dict)
    sink_logs: list[dict[str, Any]] = field(default_factory=list)
    archives: list[dict[str, Any]] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    steps_done: list[str] = field(default_factory=list)

    def starting_offsets_json(self, source_id: str | None = None) -> str:
        """``startingOffsets`` of one Kafka source (the only one unless ``source_id``)."""
        if source_id is None:
            if len(self.starting_offsets) != 1:
                raise ValueError(
                    f"{len(self.starting_offsets)} Kafka sources {sorted(self.starting_offsets)}: "
                    "say which one (source_id)"
                )
            source_id = next(iter(self.starting_offsets))
        return json.dumps(self.starting_offsets[source_id], separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "status": self.status,
            "journal_path": self.journal_path,
            "archive_location": self.archive_location,
            "snapshot_path": self.snapshot_path,
            "query_id": self.query_id,
            "committed_batch_id": self.committed_batch_id,
            "in_flight_batch_id": self.in_flight_batch_id,
            "starting_offsets": self.starting_offsets,
            "starting_offsets_by_timestamp": self.starting_offsets_by_timestamp,
            "partitions_added": self.partitions_added,
            "records_lost": self.records_lost,
            "replay_ranges": self.replay_ranges,
            "sink_logs": self.sink_logs,
            "archives": self.archives,
            "refusals": self.refusals,
            "warnings": self.warnings,
            "steps_done": self.steps_done,
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> MigrationResult:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in document.items() if k in names})


# -- journal ---------------------------------------------------------------------------------


class _Journal:
    """One small JSON document, rewritten atomically after every step."""

    def __init__(self, storage: Storage, path: str, document: dict[str, Any]) -> None:
        self.storage = storage
        self.path = path
        self.document = document

    @classmethod
    def load(cls, storage: Storage, path: str) -> _Journal | None:
        try:
            data = storage.read(path)
        except StorageNotFound:
            return None
        document = json.loads(data)
        if document.get("format") != JOURNAL_FORMAT:
            raise SparkLagError(f"{path}: not a migration journal; move it aside")
        return cls(storage, path, document)

    def done(self, step: str) -> bool:
        return step in self.document["steps"]

    def get(self, step: str) -> dict[str, Any]:
        return dict(self.document["steps"].get(step) or {})

    def record(self, step: str, **details: Any) -> None:
        self.document["steps"][step] = {"at": utc_iso(time.time()), **details}
        self.document["last_step"] = step
        self.document["updated_at"] = utc_iso(time.time())
        body = json.dumps(self.document, indent=2, sort_keys=True).encode()
        self.storage.write_atomic(self.path, body, overwrite=True)


def _base_dir(archive_root: str, location: str) -> str:
    clean = strip_credentials(location).rstrip("/")
    name = clean.rsplit("/", 1)[-1] or "checkpoint"
    digest = hashlib.sha256(clean.encode()).hexdigest()[:10]
    return join(archive_root, f"{name}-{digest}")


# -- checks ----------------------------------------------------------------------------------


class _Checks:
    """Refusals raise, except in a dry run, where they are collected into the plan."""

    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.refusals: list[str] = []

    def refuse(self, error: MigrationRefused) -> None:
        if not self.dry_run:
            raise error
        self.refusals.append(f"{type(error).__name__}: {error}")


def _preflight(
    state: CheckpointState, *, now: float, quiet_period: float, force: bool, checks: _Checks
) -> None:
    recent = []
    if state.commit_modified is not None and now - state.commit_modified < quiet_period:
        recent.append(
            f"batch {state.committed_batch_id} was committed {now - state.commit_modified:.0f} s "
            "ago"
        )
    if state.in_flight is not None and state.in_flight.modified is not None:
        age = now - state.in_flight.modified
        if age < quiet_period:
            recent.append(f"batch {state.in_flight.batch_id} was planned {age:.0f} s ago")
    if recent and not force:
        checks.refuse(
            JobStillRunning(
                f"{strip_credentials(state.location)}: the query looks alive ("
                + "; ".join(recent)
                + f", quiet period {quiet_period:g} s). Stop it and wait, or pass force=True "
                "if you know it is stopped"
            )
        )


def _validate(
    snapshot: Snapshot,
    kafka: KafkaSnapshot,
    *,
    allow_data_loss: bool,
    checks: _Checks,
    force: bool,
) -> tuple[dict[str, dict[str, dict[str, int]]], dict[str, list[int]], dict[str, dict[str, int]]]:
    """startingOffsets per source, partitions added, records lost (per topic/partition)."""
    where = snapshot.checkpoint_location
    if (
        snapshot.kafka_cluster_id
        and kafka.cluster_id
        and snapshot.kafka_cluster_id != (kafka.cluster_id)
    ) and not force:
        checks.refuse(
            TopicGone(
                f"{where}: snapshot was taken on Kafka cluster {snapshot.kafka_cluster_id}, "
                f"the configured cluster is {kafka.cluster_id}: wrong bootstrap servers?"
            )
        )
    starting: dict[str, dict[str, dict[str, int]]] = {}
    added: dict[str, list[int]] = {}
    lost: dict[str, dict[str, int]] = {}
    for sid, topics in snapshot.committed.kafka_sources().items():
        starting[sid] = {}
        for topic, parts in sorted(topics.items()):
            if topic in kafka.missing_topics or topic not in kafka.partitions:
                checks.refuse(
                    TopicGone(
                        f"{where}: topic {topic!r} no longer exists in Kafka: the new query "
                        "cannot start from its offsets. Re-create it, or drop it from the job "
                        "and migrate with a snapshot that does not name it"
                    )
                )
                continue
            live = kafka.partitions[topic]
            offsets: dict[str, int] = {}
            for partition, committed in sorted(parts.items()):
                log = live.get(partition)
                if log is None or committed > log.log_end:
                    checks.refuse(
                        TopicGone(
                            f"{where}: topic {topic!r} partition {partition}: committed offset "
                            f"{committed} is beyond the log "
                            f"({'partition missing' if log is None else f'end {log.log_end}'}): "
                            "the topic was deleted and re-created; refusing"
                        )
                    )
                    continue
                start = committed
                if committed < log.log_start:
                    lost.setdefault(topic, {})[str(partition)] = log.log_start - committed
                    start = log.log_start
                offsets[str(partition)] = start
            for partition in sorted(set(live) - set(parts)):
                offsets[str(partition)] = EARLIEST
                added.setdefault(topic, []).append(partition)
            starting[sid][topic] = dict(sorted(offsets.items(), key=lambda kv: int(kv[0])))
    if lost and not allow_data_loss:
        detail = "; ".join(
            f"{topic}[{p}]: {n} records" for topic, parts in lost.items() for p, n in parts.items()
        )
        checks.refuse(
            DataLossRefused(
                f"{where}: committed offsets are below the log start, records deleted before the "
                f"query read them: {detail}. Pass allow_data_loss=True to start from the log "
                "start and accept the loss"
            )
        )
    return starting, added, lost


def _sink_logs(paths: Iterable[str], storage_for: Callable[[str], Storage]) -> list[dict[str, Any]]:
    found = []
    for path in paths:
        log_dir = join(path, "_spark_metadata")
        ids = []
        for info in storage_for(log_dir).list_dir(log_dir):
            name = info.name[: -len(".compact")] if info.name.endswith(".compact") else info.name
            batch = parse_batch_id(name)
            if batch is not None:
                ids.append(batch)
        found.append(
            {
                "path": strip_credentials(path),
                "log": log_dir,
                "latest_batch_id": max(ids, default=None),
            }
        )
    return found


# -- the migration ---------------------------------------------------------------------------


def migrate_checkpoint(
    location: str,
    archive_root: str,
    *,
    kafka_config: Mapping[str, Any] | None = None,
    kafka_client: KafkaOffsetsClient | None = None,
    s3_options: dict[str, Any] | None = None,
    webhdfs_options: dict[str, Any] | None = None,
    fsspec_options: dict[str, Any] | None = None,
    snapshot_root: str | None = None,
    snapshot: str | None = None,
    quiet_period: float = 60.0,
    force: bool = False,
    allow_data_loss: bool = False,
    file_sink_paths: Iterable[str] = (),
    move_sink_log: bool = False,
    dry_run: bool = False,
    kafka_timeout: float = 10.0,
    now: float | None = None,
    fault: Callable[[str], None] | None = None,
) -> MigrationResult:
    """Snapshot, validate and archive ``location``; return the new query's starting offsets.

    ``snapshot``: path of an existing snapshot to use instead of taking one. ``snapshot_root``:
    where to write the snapshot (default: the migration's archive directory).
    ``file_sink_paths``: output paths of FILE sinks the new query will write to (their
    ``_spark_metadata`` is checked). ``fault``: test hook called with each step name.
    Raises :class:`MigrationRefused` subclasses (nothing changed), storage/Kafka errors.
    """
    options = {
        "s3_options": s3_options,
        "webhdfs_options": webhdfs_options,
        "fsspec_options": fsspec_options,
    }
    stores: dict[str, Storage] = {}

    def storage_for(url: str) -> Storage:
        from airflow_sparklag.storage import scheme_of

        key = (
            scheme_of(url)
            + "://"
            + (url.split("://", 1)[1].split("/", 1)[0] if "://" in url else "")
        )
        if key not in stores:
            stores[key] = open_storage(url, **options)
        return stores[key]

    hit = fault or (lambda step: None)
    checks = _Checks(dry_run)
    base = _base_dir(archive_root, location)
    journal_path = join(base, "journal.json")
    archive_store = storage_for(archive_root)
    checkpoint_store = storage_for(location)
    sink_paths = list(file_sink_paths)

    journal = _Journal.load(archive_store, journal_path)
    if journal is not None and journal.done("completed"):
        if not checkpoint_store.exists(location) or not _has_batches(checkpoint_store, location):
            recorded = MigrationResult.from_dict(journal.get("completed")["result"])
            recorded.status = "already-completed"
            return recorded
        journal = None  # the checkpoint is back (a new job used the path): a new migration
    if journal is None:
        run = join(base, datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ"))
        journal = _Journal(
            archive_store,
            journal_path,
            {
                "format": JOURNAL_FORMAT,
                "checkpoint": strip_credentials(location),
                "run": run,
                "steps": {},
            },
        )
    run = journal.document["run"]
    archive_location = join(run, "checkpoint")

    client = kafka_client
    owned = False
    if client is None:
        if not kafka_config:
            raise ValueError("kafka_config (or kafka_client) is required to validate offsets")
        from airflow_sparklag.kafka import KafkaOffsetsClient

        client = KafkaOffsetsClient(kafka_config, kafka_timeout)
        owned = True
    try:
        return _run(
            location=location,
            checkpoint_store=checkpoint_store,
            archive_store=archive_store,
            storage_for=storage_for,
            journal=journal,
            archive_location=archive_location,
            client=client,
            snapshot_root=snapshot_root,
            given_snapshot=snapshot,
            quiet_period=quiet_period,
            force=force,
            allow_data_loss=allow_data_loss,
            sink_paths=sink_paths,
            move_sink_log=move_sink_log,
            dry_run=dry_run,
            now=now,
            hit=hit,
            checks=checks,
        )
    finally:
        if owned:
            client.close()


def _batch_ids(state: CheckpointState) -> list[int | None]:
    return [state.committed_batch_id, state.in_flight.batch_id if state.in_flight else None]


def _has_batches(storage: Storage, location: str) -> bool:
    return bool(storage.list_dir(join(location, "offsets"))) or bool(
        storage.list_dir(join(location, "commits"))
    )


def _run(
    *,
    location: str,
    checkpoint_store: Storage,
    archive_store: Storage,
    storage_for: Callable[[str], Storage],
    journal: _Journal,
    archive_location: str,
    client: KafkaOffsetsClient,
    snapshot_root: str | None,
    given_snapshot: str | None,
    quiet_period: float,
    force: bool,
    allow_data_loss: bool,
    sink_paths: list[str],
    move_sink_log: bool,
    dry_run: bool,
    now: float | None,
    hit: Callable[[str], None],
    checks: _Checks,
) -> MigrationResult:
    run = journal.document["run"]
    warnings: list[str] = []
    archiving_started = journal.done("archiving")

    # 1. preflight: only while the checkpoint is still whole.
    state: CheckpointState | None = None
    if not archiving_started:
        try:
            state = CheckpointReader(checkpoint_store, location).read(history=1)
        except CheckpointNotFound:
            if not journal.done("snapshot"):
                raise
            raise CheckpointNotFound(
                f"{strip_credentials(location)}: the checkpoint is gone although the migration "
                f"journal {journal.path} says archiving never started; the verified snapshot is "
                f"{journal.get('snapshot').get('path')}: restore the checkpoint or start the new "
                "query from that snapshot's offsets"
            ) from None
        moment = now if now is not None else time.time()
        if not journal.done("preflight"):
            _preflight(state, now=moment, quiet_period=quiet_period, force=force, checks=checks)
        elif _batch_ids(state) != journal.get("preflight").get("batches"):
            checks.refuse(
                JobStillRunning(
                    f"{strip_credentials(location)}: the checkpoint changed since this "
                    f"migration's preflight ({journal.get('preflight').get('batches')} -> "
                    f"{_batch_ids(state)}): the job ran again. Stop it, delete the journal "
                    f"{journal.path} and migrate again"
                )
            )
        if not dry_run and not journal.done("preflight"):
            journal.record("preflight", batches=_batch_ids(state))
        hit("preflight")

    # 2. snapshot: take and verify one, or verify the given / journaled one.
    kafka_fresh: KafkaSnapshot | None = None
    snap: Snapshot
    snap_path: str | None
    if journal.done("snapshot"):
        recorded = journal.get("snapshot")
        snap_path = recorded["path"]
        snap = load_snapshot(storage_for(snap_path), snap_path)
        if snap.checksum != recorded["checksum"]:
            raise SnapshotMismatch(
                f"{snap_path}: checksum {snap.checksum[:12]} differs from the one the journal "
                f"{journal.path} recorded ({recorded['checksum'][:12]}); refusing"
            )
    elif given_snapshot is not None:
        snap_path = given_snapshot
        snap = load_snapshot(storage_for(given_snapshot), given_snapshot)
    else:
        assert state is not None
        snap, _ = take_snapshot(state, client, now=now)
        root = snapshot_root or join(run, "snapshots")
        snap_path = snapshot_path(root, snap)
        if not dry_run:
            save_snapshot(snap, storage_for(snap_path), snap_path)
    if state is not None:
        if state.query_id and snap.query_id and state.query_id != snap.query_id:
            checks.refuse(
                SnapshotMismatch(
                    f"{snap_path}: snapshot of query {snap.query_id}, but the checkpoint at "
                    f"{strip_credentials(location)} belongs to query {state.query_id}"
                )
            )
        if state.committed_batch_id is not None and state.committed_batch_id > (
            snap.committed.batch_id
        ):
            message = (
                f"the checkpoint committed batch {state.committed_batch_id} after the snapshot "
                f"{snap_path} (batch {snap.committed.batch_id}) was taken"
            )
            if journal.done("snapshot"):
                checks.refuse(
                    SnapshotMismatch(
                        f"{message}: the job ran again during the migration. Stop it, delete "
                        f"the journal {journal.path} and migrate again"
                    )
                )
            else:
                warnings.append(f"{message}: starting from the snapshot replays the batches since")
    if not dry_run and not journal.done("snapshot"):
        journal.record(
            "snapshot",
            path=snap_path,
            checksum=snap.checksum,
            committed_batch_id=snap.committed.batch_id,
        )
    hit("snapshot")

    # 3. validate against Kafka now, and the file sinks' logs.
    kafka_fresh = client.snapshot(sorted(kafka_topics(snap)))
    starting, added, lost = _validate(
        snap, kafka_fresh, allow_data_loss=allow_data_loss, checks=checks, force=force
    )
    sink_logs = _sink_logs(sink_paths, storage_for)
    for sink in sink_logs:
        if sink["latest_batch_id"] is None:
            sink["action"] = "none (empty log)"
            continue
        if move_sink_log:
            sink["action"] = f"move aside to {join(run, 'sink-logs')}"
            continue
        sink["action"] = "refused"
        checks.refuse(
            SinkLogConflict(
                f"{sink['path']}: the file sink log {sink['log']} holds batches up to "
                f"{sink['latest_batch_id']}; a query on a new checkpoint restarts at batch 0 and "
                f"the sink would silently SKIP batches 0..{sink['latest_batch_id']} (data loss). "
                "Write the new query to a new output path, or pass move_sink_log=True to move "
                "the log aside into the archive (old files then stay on disk, but readers that "
                "use the log no longer see them)"
            )
        )
    by_time: dict[str, dict[str, dict[str, int]]] = {}
    if snap.record_timestamps_ms is not None:
        for sid in starting:
            by_time[sid] = snap.starting_offsets_by_timestamp(source_id=sid)
    if lost:
        warnings.append(
            "records lost (log start moved past the committed offset): "
            + json.dumps(lost, sort_keys=True)
        )
    result = MigrationResult(
        checkpoint=strip_credentials(location),
        status="planned",
        journal_path=journal.path,
        archive_location=archive_location,
        snapshot_path=snap_path,
        query_id=snap.query_id,
        committed_batch_id=snap.committed.batch_id,
        in_flight_batch_id=snap.in_flight.batch_id if snap.in_flight else None,
        starting_offsets=starting,
        starting_offsets_by_timestamp=by_time,
        partitions_added=added,
        records_lost=lost,
        replay_ranges=snap.replay_ranges(),
        sink_logs=sink_logs,
        refusals=checks.refusals,
        warnings=warnings,
    )
    if dry_run:
        result.steps_done = list(journal.document["steps"])
        return result
    if not journal.done("validated"):
        journal.record("validated", starting_offsets=starting)
    hit("validated")

    # 4. archive the checkpoint (and the sink logs when asked).
    if not journal.done("archived"):
        if not archiving_started:
            journal.record("archiving", target=archive_location)
        report = archive_tree(
            checkpoint_store,
            location,
            archive_location,
            manifest_path=join(run, "checkpoint.manifest.json"),
            target=archive_store,
            fault=hit,
        )
        journal.record("archived", **report.to_dict())
    result.archives.append(journal.get("archived"))
    hit("archived")
    if move_sink_log and not journal.done("sink_logs"):
        moved = []
        for index, sink in enumerate(sink_logs):
            if sink["latest_batch_id"] is None:
                continue
            target = join(run, "sink-logs", str(index), "_spark_metadata")
            report = archive_tree(
                storage_for(sink["log"]),
                sink["log"],
                target,
                manifest_path=join(run, "sink-logs", f"{index}.manifest.json"),
                target=archive_store,
                fault=hit,
            )
            moved.append(report.to_dict())
        journal.record("sink_logs", moved=moved)
    if move_sink_log:
        result.archives.extend(journal.get("sink_logs").get("moved", []))
    hit("sink_logs")

    # 5. done: the journal keeps the result, so a re-run returns it.
    result.status = "completed"
    result.steps_done = [*journal.document["steps"], "completed"]
    journal.record("completed", result=result.to_dict())
    return result
