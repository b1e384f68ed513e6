"""Move a Spark query to a new checkpoint without losing data, in journaled steps
(:attr:`Migration.STEPS`): preflight, snapshot, validate, archive, complete. A re-run after a
crash resumes from the journal; at no point is the checkpoint gone without a verified snapshot
and a verified archive. Rules in docs/snapshots.md.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from airflow_sparklag import params
from airflow_sparklag.archive import archive_tree
from airflow_sparklag.checkpoint_files import parse_batch_id
from airflow_sparklag.errors import (
    CheckpointNotFound,
    DataLossRefused,
    JobStillRunning,
    MigrationRefused,
    SinkLogConflict,
    SnapshotMismatch,
    SparkLagError,
    StorageNotFound,
    TopicGone,
)
from airflow_sparklag.location import Location, join
from airflow_sparklag.redact import redact_url
from airflow_sparklag.session import Session
from airflow_sparklag.snapshot import (
    Snapshot,
    load_snapshot,
    outside_checkpoint,
    save_snapshot,
    snapshot_path,
    source_snapshots,
    take_snapshot,
    utc_iso,
)
from airflow_sparklag.storage import Storage

if TYPE_CHECKING:
    from airflow_sparklag.checkpoint_files import CheckpointState
    from airflow_sparklag.kafka import KafkaSnapshot


JOURNAL_FORMAT = "sparklag-migration-journal"


# -- result ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigrationResult:
    """The plan (dry run) or the outcome of a migration. ``to_dict()`` is JSON-safe; a step
    that learns more makes a new result (``dataclasses.replace``)."""

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
        return asdict(self)

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> MigrationResult:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in document.items() if k in names})


# -- journal ---------------------------------------------------------------------------------


@dataclass
class _Journal:
    """One small JSON document, rewritten atomically after every step."""

    storage: Storage
    path: str
    document: dict[str, Any]

    @classmethod
    def load(cls, storage: Storage, path: str) -> _Journal | None:
        try:
            data = storage.read(path)
        except StorageNotFound:
            return None
        try:
            document = json.loads(data)
        except (ValueError, RecursionError):  # also bytes that are not UTF-8
            document = None
        if not isinstance(document, dict) or document.get("format") != JOURNAL_FORMAT:
            raise SparkLagError(f"{path}: not a migration journal; move it aside")
        return cls(storage, path, document)

    @property
    def run(self) -> str:
        """This migration's directory: snapshots, manifests and the archived checkpoint."""
        return str(self.document["run"])

    def steps(self) -> list[str]:
        return list(self.document["steps"])

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
    clean = redact_url(location).rstrip("/")
    name = clean.rsplit("/", 1)[-1] or "checkpoint"
    digest = hashlib.sha256(clean.encode()).hexdigest()[:10]
    return join(archive_root, f"{name}-{digest}")


# -- parameters ------------------------------------------------------------------------------
# The core takes typed values only: text from a template or a CLI is read with
# airflow_sparklag.params first. A value of the wrong type is refused before anything is read
# or written (`bool("False")` is True: a string must never decide whether data is archived).


def _number(name: str, value: Any, what: str, minimum: float = -math.inf, hint: str = "") -> float:
    """A finite int or float >= ``minimum``: never a bool, never text."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value < minimum:
        raise params.invalid(name, f"must be {what}, got {value!r}{hint}")
    return float(value)


def _path(name: str, value: Location | Any) -> str:
    return Location.of(value, name, bucket=False).text


def _paths(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise params.invalid(name, f"must be a list of paths, got {value!r}")
    items = tuple(value)
    for item in items:
        _path(name, item)
    return items


@dataclass(frozen=True)
class MigrationOptions:
    """How to migrate: THE options of a migration, declared once (``params.option``): the CLI's
    ``migrate`` flags and ``CheckpointMigrationOperator``'s keyword arguments are made from
    these fields (docs/operators/checkpoint-migration.md). Typed values only, checked when made.

    >>> MigrationOptions(quiet_period=0, dry_run=True).dry_run
    True
    """

    snapshot_root: str | None = params.option(
        None,
        read=params.optional_location,
        flag="--snapshot-root",
        doc="snapshot root (default: the archive directory)",
    )
    snapshot: str | None = params.option(
        None,
        read=params.optional_location,
        flag="--snapshot",
        doc="use this existing snapshot instead of taking one",
    )
    quiet_period: float = params.option(
        60.0,
        read=params.duration,
        flag="--quiet-period",
        doc="time without commits before the job counts as stopped (default 60 s)",
    )
    force: bool = params.option(
        False, read=params.boolean, flag="--force", doc="migrate even if it looks alive"
    )
    allow_data_loss: bool = params.option(
        False,
        read=params.boolean,
        flag="--allow-data-loss",
        doc="start from the log start on data loss",
    )
    file_sink_paths: tuple[str, ...] = params.option(
        factory=tuple,
        read=params.locations,
        flag="--file-sink-path",
        doc="output path of a file sink the new query writes to (repeatable)",
    )
    move_sink_log: bool = params.option(
        False, read=params.boolean, flag="--move-sink-log", doc="move sink logs aside"
    )
    dry_run: bool = params.option(
        False, read=params.boolean, flag="--dry-run", doc="print the plan, change nothing"
    )

    def __post_init__(self) -> None:
        for name in ("force", "allow_data_loss", "move_sink_log", "dry_run"):
            if not isinstance(flag := getattr(self, name), bool):
                raise params.invalid(
                    name,
                    f"must be True or False, got {flag!r} (read text with params.boolean first)",
                )
        quiet_period = _number(
            "quiet_period",
            self.quiet_period,
            "a finite number of seconds >= 0",
            minimum=0,
            hint=" (read text with params.duration first)",
        )
        object.__setattr__(self, "quiet_period", quiet_period)
        for name in ("snapshot_root", "snapshot"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _path(name, getattr(self, name)))
        object.__setattr__(self, "file_sink_paths", _paths("file_sink_paths", self.file_sink_paths))


MIGRATION_OPTIONS = tuple(f.name for f in fields(MigrationOptions))


def _wrong_cluster(snapshot: Snapshot, sid: str, kafka: KafkaSnapshot) -> TopicGone | None:
    """The refusal when source ``sid`` was snapshotted on another cluster than ``kafka``'s (a
    snapshot without per-source clusters, from older tools, names the main one for all)."""
    recorded = snapshot.committed.source(sid)
    taken_on = recorded.cluster_id or snapshot.kafka_cluster_id
    if not taken_on or not kafka.cluster_id or taken_on == kafka.cluster_id:
        return None
    servers = f" ({recorded.bootstrap_servers})" if recorded.bootstrap_servers else ""
    return TopicGone(
        f"{snapshot.checkpoint_location}: source {sid}: snapshot was taken on Kafka cluster "
        f"{taken_on}{servers}, the configured cluster is {kafka.cluster_id}: wrong bootstrap "
        "servers (or source mapping)?"
    )


def _validate(
    snapshot: Snapshot, kafka: Mapping[str, KafkaSnapshot], options: MigrationOptions, run: _Run
) -> tuple[dict[str, dict[str, dict[str, int]]], dict[str, list[int]], dict[str, dict[str, int]]]:
    """startingOffsets per source, partitions added, records lost (per topic/partition);
    ``kafka``: each source's own cluster's snapshot."""
    where = snapshot.checkpoint_location
    starting: dict[str, dict[str, dict[str, int]]] = {}
    added: dict[str, list[int]] = {}
    lost: dict[str, dict[str, int]] = {}
    for sid, topics in snapshot.committed.kafka_sources().items():
        wrong = None if options.force else _wrong_cluster(snapshot, sid, kafka[sid])
        if wrong is not None:
            run.refuse(wrong)
        # the committed offsets, and EARLIEST for partitions added since
        starting[sid] = snapshot.starting_offsets(kafka[sid], source_id=sid)
        for topic, parts in sorted(topics.items()):
            if topic in kafka[sid].missing_topics or topic not in kafka[sid].partitions:
                run.refuse(
                    TopicGone(
                        f"{where}: topic {topic!r} no longer exists in Kafka: the new query "
                        "cannot start from its offsets. Re-create it, or drop it from the job "
                        "and migrate with a snapshot that does not name it"
                    )
                )
                del starting[sid][topic]
                continue
            live = kafka[sid].partitions[topic]
            offsets = starting[sid][topic]
            for partition, committed in sorted(parts.items()):
                log = live.get(partition)
                if log is None or committed > log.log_end:
                    run.refuse(
                        TopicGone(
                            f"{where}: topic {topic!r} partition {partition}: committed offset "
                            f"{committed} is beyond the log "
                            f"({'partition missing' if log is None else f'end {log.log_end}'}): "
                            "the topic was deleted and re-created; refusing"
                        )
                    )
                    del offsets[str(partition)]
                elif committed < log.log_start:
                    lost.setdefault(topic, {})[str(partition)] = log.log_start - committed
                    offsets[str(partition)] = log.log_start
            for partition in sorted(set(live) - set(parts)):
                added.setdefault(topic, []).append(partition)
    if lost and not options.allow_data_loss:
        detail = "; ".join(
            f"{topic}[{p}]: {n} records" for topic, parts in lost.items() for p, n in parts.items()
        )
        run.refuse(
            DataLossRefused(
                f"{where}: committed offsets are below the log start, records deleted before the "
                f"query read them: {detail}. Pass allow_data_loss=True to start from the log "
                "start and accept the loss"
            )
        )
    return starting, added, lost


# -- the migration ---------------------------------------------------------------------------


@dataclass
class _Run:
    """One run of a migration: its journal, its refusals, and what each step hands on."""

    journal: _Journal
    dry_run: bool
    refusals: list[str] = field(default_factory=list)
    state: CheckpointState | None = None  # None once archiving started: the checkpoint moves
    taken: tuple[Snapshot, str] | None = None  # the snapshot the later steps work from, its path
    warnings: list[str] = field(default_factory=list)
    result: MigrationResult | None = None  # the plan once validated, then the outcome

    @property
    def archive_location(self) -> str:
        return join(self.journal.run, "checkpoint")

    def refuse(self, error: MigrationRefused) -> None:
        """Raise, except in a dry run, where the refusal is collected into the plan."""
        if not self.dry_run:
            raise error
        self.refusals.append(f"{type(error).__name__}: {error}")

    def plan(self) -> MigrationResult:
        assert self.result is not None, "validate step"
        return self.result


class Migration:
    """One checkpoint's move to a new checkpoint, step by step, through one session.

    Example::

        with Session(kafka_config={"bootstrap.servers": "broker:9092"}) as session:
            result = Migration(session, "s3a://b/ck/orders", "s3a://b/archive").run()

    :meth:`run` calls the methods named in :attr:`STEPS`, in order; each skips what the journal
    says is done. A dry run stops after ``validate`` and writes nothing. Every parameter is
    checked when the migration is made, before anything is read or written. The session stays
    open: it is the caller's. ``fault`` is a test hook called with each journal step name.
    """

    STEPS = ("preflight", "snapshot", "validate", "archive", "sink_logs", "complete")
    PLAN_STEPS = STEPS[:3]  # a dry run: read and check, never write

    def __init__(
        self,
        session: Session,
        location: Location | str,
        archive_root: Location | str,
        options: MigrationOptions | None = None,
        *,
        now: float | None = None,
        fault: Callable[[str], None] | None = None,
        **given: Any,
    ) -> None:
        """``options``, or its fields as keyword arguments (``dry_run=True``, ...)."""
        self.options = params.take(MIGRATION_OPTIONS, MigrationOptions, given, options)
        if given:
            raise TypeError(f"Migration got unexpected arguments: {', '.join(sorted(given))}")
        self.now = None if now is None else _number("now", now, "epoch seconds (a finite number)")
        self.checkpoint = Location.of(location, "location", bucket=False)
        self.archive_to = Location.of(archive_root, "archive_root", bucket=False)
        self.location, self.archive_root = self.checkpoint.text, self.archive_to.text
        outside_checkpoint("archive_root", self.archive_root, self.location)
        outside_checkpoint("snapshot_root", self.options.snapshot_root, self.location)
        self.session = session
        self.hit: Callable[[str], None] = fault or (lambda step: None)
        self.base = _base_dir(self.archive_root, self.location)
        self.journal_path = join(self.base, "journal.json")

    def run(self) -> MigrationResult:
        """Run the steps the journal has not recorded; return the plan or the outcome."""
        journal = _Journal.load(self.session.storage(self.archive_to), self.journal_path)
        if journal is not None and journal.done("completed"):
            if not self._checkpoint_present():
                recorded = MigrationResult.from_dict(journal.get("completed")["result"])
                return replace(recorded, status="already-completed")
            journal = None  # the checkpoint is back (a new job used the path): a new migration
        if not self.session.has_kafka:
            raise ValueError("kafka_config (or kafka_client) is required to validate offsets")
        run = _Run(journal or self._new_journal(), self.options.dry_run)
        for step in self.PLAN_STEPS if self.options.dry_run else self.STEPS:
            getattr(self, step)(run)
        return run.plan()

    def _checkpoint_present(self) -> bool:
        store = self.session.storage(self.checkpoint)
        return store.exists(self.location) and any(
            store.list_dir(join(self.location, logs)) for logs in ("offsets", "commits")
        )

    def _new_journal(self) -> _Journal:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        document = {
            "format": JOURNAL_FORMAT,
            "checkpoint": redact_url(self.location),
            "run": join(self.base, stamp),
            "steps": {},
        }
        return _Journal(self.session.storage(self.archive_to), self.journal_path, document)

    # -- 1. preflight: only while the checkpoint is still whole ------------------------------

    def preflight(self, run: _Run) -> None:
        """Refuse while the job looks alive, or when it ran since this migration began."""
        journal = run.journal
        if journal.done("archiving"):
            return
        state = run.state = self._read_checkpoint(journal)
        batches = [state.committed_batch_id, state.in_flight.batch_id if state.in_flight else None]
        if not journal.done("preflight"):
            self._refuse_if_alive(state, run)
            if not self.options.dry_run:
                journal.record("preflight", batches=batches)
        elif batches != journal.get("preflight").get("batches"):
            run.refuse(
                JobStillRunning(
                    f"{redact_url(self.location)}: the checkpoint changed since this "
                    f"migration's preflight ({journal.get('preflight').get('batches')} -> "
                    f"{batches}): the job ran again. Stop it, delete the journal "
                    f"{journal.path} and migrate again"
                )
            )
        self.hit("preflight")

    def _refuse_if_alive(self, state: CheckpointState, run: _Run) -> None:
        """A commit or a planned batch within ``quiet_period``: the job looks alive."""
        now = self.now if self.now is not None else time.time()
        quiet_period = self.options.quiet_period
        written = [(state.committed_batch_id, "committed", state.commit_modified)]
        if state.in_flight is not None:
            written.append((state.in_flight.batch_id, "planned", state.in_flight.modified))
        recent = [
            f"batch {batch_id} was {what} {now - at:.0f} s ago"
            for batch_id, what, at in written
            if at is not None and now - at < quiet_period
        ]
        if recent and not self.options.force:
            run.refuse(
                JobStillRunning(
                    f"{redact_url(state.location)}: the query looks alive ("
                    + "; ".join(recent)
                    + f", quiet period {quiet_period:g} s). Stop it and wait, or pass force=True "
                    "if you know it is stopped"
                )
            )

    def _read_checkpoint(self, journal: _Journal) -> CheckpointState:
        try:
            return self.session.read(self.checkpoint, history=1)
        except CheckpointNotFound:
            if not journal.done("snapshot"):
                raise
            raise CheckpointNotFound(
                f"{redact_url(self.location)}: the checkpoint is gone although the "
                f"migration journal {journal.path} says archiving never started; the verified "
                f"snapshot is {journal.get('snapshot').get('path')}: restore the checkpoint or "
                "start the new query from that snapshot's offsets"
            ) from None

    # -- 2. snapshot: take and verify one, or verify the given / journaled one ---------------

    def snapshot(self, run: _Run) -> None:
        """Take, write and verify a snapshot of the committed batch (or load the known one)."""
        journal = run.journal
        snap, path = self._snapshot_of(run)
        if run.state is not None:
            self._check_snapshot(run, run.state, snap, path)
        if not self.options.dry_run and not journal.done("snapshot"):
            journal.record(
                "snapshot",
                path=path,
                checksum=snap.checksum,
                committed_batch_id=snap.committed.batch_id,
            )
        run.taken = snap, path
        self.hit("snapshot")

    def _snapshot_of(self, run: _Run) -> tuple[Snapshot, str]:
        journal = run.journal
        if journal.done("snapshot"):
            recorded = journal.get("snapshot")
            path = str(recorded["path"])
            snap = load_snapshot(self.session.storage(path), path)
            if snap.checksum != recorded["checksum"]:
                raise SnapshotMismatch(
                    f"{path}: checksum {snap.checksum[:12]} differs from the one the journal "
                    f"{journal.path} recorded ({recorded['checksum'][:12]}); refusing"
                )
            return snap, path
        if self.options.snapshot is not None:
            path = self.options.snapshot
            return load_snapshot(self.session.storage(path), path), path
        # The journal records the snapshot before archiving starts: the checkpoint was read.
        assert run.state is not None
        snap, _ = take_snapshot(run.state, self.session, now=self.now)
        path = snapshot_path(self.options.snapshot_root or join(journal.run, "snapshots"), snap)
        if not self.options.dry_run:
            save_snapshot(snap, self.session.storage(path), path)
        return snap, path

    def _check_snapshot(self, run: _Run, state: CheckpointState, snap: Snapshot, path: str) -> None:
        """The snapshot is of this query, and the job did not commit after it was taken."""
        if state.query_id and snap.query_id and state.query_id != snap.query_id:
            run.refuse(
                SnapshotMismatch(
                    f"{path}: snapshot of query {snap.query_id}, but the checkpoint at "
                    f"{redact_url(self.location)} belongs to query {state.query_id}"
                )
            )
        if state.committed_batch_id is None or state.committed_batch_id <= snap.committed.batch_id:
            return
        message = (
            f"the checkpoint committed batch {state.committed_batch_id} after the snapshot "
            f"{path} (batch {snap.committed.batch_id}) was taken"
        )
        if run.journal.done("snapshot"):
            run.refuse(
                SnapshotMismatch(
                    f"{message}: the job ran again during the migration. Stop it, delete "
                    f"the journal {run.journal.path} and migrate again"
                )
            )
        else:
            run.warnings.append(f"{message}: starting from the snapshot replays the batches since")

    # -- 3. validate against Kafka now, and the file sinks' logs -----------------------------

    def validate(self, run: _Run) -> None:
        """Check the snapshot against Kafka and the file sinks; the result is the plan."""
        assert run.taken is not None, "snapshot step"
        snap, path = run.taken
        kafka = source_snapshots(self.session, snap.committed.kafka_sources())
        starting, added, lost = _validate(snap, kafka, self.options, run)
        sink_logs = self._checked_sink_logs(run)
        by_time: dict[str, dict[str, dict[str, int]]] = {}
        if snap.record_timestamps_ms is not None:
            by_time = {sid: snap.starting_offsets_by_timestamp(source_id=sid) for sid in starting}
        warnings = list(run.warnings)
        if lost:
            warnings.append(
                "records lost (log start moved past the committed offset): "
                + json.dumps(lost, sort_keys=True)
            )
        plan = MigrationResult(
            checkpoint=redact_url(self.location),
            status="planned",
            journal_path=run.journal.path,
            archive_location=run.archive_location,
            snapshot_path=path,
            query_id=snap.query_id,
            committed_batch_id=snap.committed.batch_id,
            in_flight_batch_id=snap.in_flight.batch_id if snap.in_flight else None,
            starting_offsets=starting,
            starting_offsets_by_timestamp=by_time,
            partitions_added=added,
            records_lost=lost,
            replay_ranges=snap.replay_ranges(),
            sink_logs=sink_logs,
            refusals=list(run.refusals),
            warnings=warnings,
        )
        if self.options.dry_run:
            run.result = replace(plan, steps_done=run.journal.steps())
            return
        if not run.journal.done("validated"):
            run.journal.record("validated", starting_offsets=starting)
        run.result = plan
        self.hit("validated")

    def _checked_sink_logs(self, run: _Run) -> list[dict[str, Any]]:
        """Each file sink's ``_spark_metadata``: its newest batch and what the migration does."""
        checked = []
        for path in self.options.file_sink_paths:
            log = join(path, "_spark_metadata")
            names = [
                info.name.removesuffix(".compact")
                for info in self.session.storage(log).list_dir(log)
            ]
            latest = max((b for b in map(parse_batch_id, names) if b is not None), default=None)
            action = "refused"
            if latest is None:
                action = "none (empty log)"
            elif self.options.move_sink_log:
                action = f"move aside to {join(run.journal.run, 'sink-logs')}"
            checked.append(
                {"path": redact_url(path), "log": log, "latest_batch_id": latest, "action": action}
            )
        for sink in checked:
            if sink["action"] == "refused":
                run.refuse(
                    SinkLogConflict(
                        f"{sink['path']}: the file sink log {sink['log']} holds batches up to "
                        f"{sink['latest_batch_id']}; a query on a new checkpoint restarts at batch "
                        f"0 and the sink would silently SKIP batches 0..{sink['latest_batch_id']} "
                        "(data loss). Write the new query to a new output path, or pass "
                        "move_sink_log=True to move the log aside into the archive (old files "
                        "then stay on disk, but readers that use the log no longer see them)"
                    )
                )
        return checked

    # -- 4. archive the checkpoint (and the sink logs when asked) ----------------------------

    def archive(self, run: _Run) -> None:
        """Move the checkpoint into the archive: a verified copy then delete, or a rename."""
        journal = run.journal
        if not journal.done("archived"):
            if not journal.done("archiving"):
                journal.record("archiving", target=run.archive_location)
            manifest = join(journal.run, "checkpoint.manifest.json")
            journal.record(
                "archived", **self._archive(self.location, run.archive_location, manifest)
            )
        self.hit("archived")

    def sink_logs(self, run: _Run) -> None:
        """With ``move_sink_log``: move each file sink's ``_spark_metadata`` into the archive."""
        journal = run.journal
        if self.options.move_sink_log and not journal.done("sink_logs"):
            moved = [
                self._archive(
                    sink["log"],
                    join(journal.run, "sink-logs", str(index), "_spark_metadata"),
                    join(journal.run, "sink-logs", f"{index}.manifest.json"),
                )
                for index, sink in enumerate(run.plan().sink_logs)
                if sink["latest_batch_id"] is not None
            ]
            journal.record("sink_logs", moved=moved)
        self.hit("sink_logs")

    def _archive(self, source: str, target: str, manifest: str) -> dict[str, Any]:
        """``archive_tree`` of ``source`` to ``target`` in the archive root's store."""
        report = archive_tree(
            self.session.storage(source),
            source,
            target,
            manifest_path=manifest,
            target=self.session.storage(self.archive_to),
            fault=self.hit,
        )
        return report.to_dict()

    # -- 5. done: the journal keeps the result, so a re-run returns it -----------------------

    def complete(self, run: _Run) -> None:
        """Record the outcome in the journal."""
        journal = run.journal
        archives = [journal.get("archived")]
        if self.options.move_sink_log:
            archives.extend(journal.get("sink_logs").get("moved", []))
        result = replace(
            run.plan(),
            status="completed",
            archives=archives,
            steps_done=[*journal.steps(), "completed"],
        )
        journal.record("completed", result=result.to_dict())
        run.result = result


def migrate_checkpoint(
    location: Location | str,
    archive_root: Location | str,
    *,
    session: Session | None = None,
    options: MigrationOptions | None = None,
    now: float | None = None,
    fault: Callable[[str], None] | None = None,
    **options_and_session: Any,
) -> MigrationResult:
    """Snapshot, validate and archive ``location``; return the new query's starting offsets.

    ``options`` (:class:`MigrationOptions`) or its fields as keyword arguments; without
    ``session``, one is opened from the other keyword arguments (``kafka_config``, ...) and
    closed before returning. ``fault``: test hook called with each step name.
    Raises :class:`~airflow_sparklag.errors.InvalidParameter` (nothing read or written),
    :class:`MigrationRefused` subclasses (nothing changed), storage/Kafka errors.

    Example::

        result = migrate_checkpoint("s3a://bucket/ck/orders", "s3a://bucket/archive",
                                    kafka_config={"bootstrap.servers": "broker:9092"})
        spark_options = {"startingOffsets": result.starting_offsets_json()}
    """
    # checked before a session
    chosen = params.take(MIGRATION_OPTIONS, MigrationOptions, options_and_session, options)
    with Session.using(session, **options_and_session) as active:
        return Migration(active, location, archive_root, chosen, now=now, fault=fault).run()
