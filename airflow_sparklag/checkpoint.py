"""Read a Spark Structured Streaming checkpoint: what was committed, what is in flight.

The parsers are pure (bytes + path -> dataclass) and raise
:class:`~airflow_sparklag.errors.CheckpointCorrupt` or
:class:`~airflow_sparklag.errors.UnsupportedCheckpointVersion` naming the file and the problem.
:class:`CheckpointReader` lists only ``offsets/`` and ``commits/`` (never ``state/``, which can
hold 100k objects) and caches the immutable offsets files between reads.

Format details are in ``docs/`` and follow Spark's ``OffsetSeqLog``, ``CommitLog`` and
``KafkaSourceInitialOffsetWriter``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from airflow_sparklag.errors import (
    CheckpointCorrupt,
    CheckpointNotFound,
    SparkLagError,
    StorageNotFound,
    UnsupportedCheckpointVersion,
)
from airflow_sparklag.storage import (
    ObjectInfo,
    Storage,
    join,
    refuse_bucketless,
    trim_location,
)

__all__ = [
    "BatchOffsets",
    "CheckpointReader",
    "CheckpointState",
    "SourceOffset",
    "parse_batch_id",
    "parse_commit",
    "parse_metadata",
    "parse_offsets",
    "parse_source_start",
]

OFFSETS_VERSIONS = (1, 2)
COMMITS_VERSIONS = (1, 2, 3)
SOURCE_START_VERSIONS = (1,)
NO_OFFSET = "-"  # a source that has no offset yet
# The smallest commits/N Spark writes: 'v1\n{"nextBatchWatermarkMs":0}'. A listed size below it
# is a damaged or hand-made file whatever its listed hash says.
MIN_COMMIT_SIZE = 29
# An offsets file holds one offset per partition (~20 bytes each): 64 MiB is millions of
# partitions. A bigger listed size is a hostile or mistaken file; reading it would only cost memory.
MAX_LOG_FILE_SIZE = 64 * 1024 * 1024
INT64_MAX = 2**63 - 1  # Kafka offsets and Spark's timestamps are Java longs
LATEST_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last datetime Python has
INT32_MAX = 2**31 - 1  # Kafka partition ids are Java ints

_VERSION_LINE = re.compile(r"v([0-9]+)")
_SOURCE_VERSION_LINE = re.compile(rb"v[0-9]+(\n|$)")  # a start file with no byte before it
_PARTITION_KEY = re.compile(r"0|[1-9][0-9]*")  # as Spark writes an Int: no sign, no padding
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # Kafka's legal topic names
# The rate source's continuous offsets {"<partition>": {"value": .., "runTimeMs": ..}} have
# Kafka's nesting; these inner keys tell them apart.
_RATE_CONTINUOUS_KEYS = frozenset({"value", "runTimeMs"})


def _read_only(mapping: dict[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(mapping)


class _Pickled(dict[Any, Any]):
    """A mappingproxy on its way through pickle, which cannot take one: loads as one again."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _read_only, (dict(self),)


def _picklable(value: Any) -> Any:
    if isinstance(value, MappingProxyType):
        return _Pickled({key: _picklable(inner) for key, inner in value.items()})
    return value


class _ReadOnlyFields:
    """Picklable although fields hold read-only mappings (read-only again when loaded)."""

    def __getstate__(self) -> dict[str, Any]:
        return {name: _picklable(value) for name, value in vars(self).items()}

    def __copy__(self) -> Any:  # copy.copy would keep the stand-ins: frozen, so itself
        return self


@dataclass(frozen=True)
class SourceOffset(_ReadOnlyFields):
    """One source's offset in a batch. ``kafka`` maps topic -> partition -> NEXT offset to read."""

    source_id: str  # "0", "1", ... or the name given with DataStreamReader.name()
    kind: str  # "kafka" | "other" | "none" ("-": no offset yet)
    kafka: Mapping[str, Mapping[int, int]] | None
    raw: str  # the offset JSON as written


@dataclass(frozen=True)
class BatchOffsets(_ReadOnlyFields):
    """The content of ``offsets/<batch_id>``: the end offsets batch ``batch_id`` reads up to.

    Example::

        batch = parse_offsets(data, "s3://b/ck/offsets/12", batch_id=12)
        for source in batch.sources:
            if source.kind == "kafka":
                print(source.source_id, dict(source.kafka))
    """

    batch_id: int
    version: int  # 1 or 2
    batch_timestamp_ms: int | None  # None for continuous mode (empty metadata line)
    watermark_ms: int | None
    conf: Mapping[str, str]
    sources: tuple[SourceOffset, ...]
    modified: float | None  # storage LastModified of offsets/N


@dataclass(frozen=True)
class CheckpointState:
    """A snapshot of a checkpoint: the last committed batch and the one in flight.

    Example::

        state = CheckpointReader(open_storage(url), url).read(history=5)
        if state.committed is None:
            print("no batch committed yet")
        elif state.in_flight is not None:
            print(f"batch {state.in_flight.batch_id} planned, {state.committed_batch_id} done")
    """

    location: str
    query_id: str | None
    committed_batch_id: int | None  # C = newest commits/N, which must have offsets/N
    committed: BatchOffsets | None  # offsets/C: what the job has PROCESSED
    commit_modified: float | None  # commits/C LastModified
    in_flight: BatchOffsets | None  # offsets/L when L > C (planned, not committed)
    history: tuple[BatchOffsets, ...]  # retained committed batches, oldest first, ends with C
    offsets_ids: tuple[int, ...]  # ids on disk (sorted numerically)
    commit_ids: tuple[int, ...]
    continuous: bool
    # read(lazy_history=True): the older committed batches of the window, listed but not read
    # (their offsets files, oldest first); CheckpointReader.read_history(state) reads them.
    unread_history: tuple[ObjectInfo, ...] = ()
    # When a batch has real-time mode's shape (``real_time_interval``): the LastModified of
    # what Spark wrote before it began (the offsets file below it, else ``metadata``).
    # A copied checkpoint has every file written at copy time, after every batch time.
    written_before: float | None = None
    # When the newest batch is C with real-time's shape but a span under
    # ``REAL_TIME_SURE_INTERVAL``: offsets/P, the batch before it (P < C, the newest listed),
    # and commits/P's LastModified (None: not committed), which must have that shape too.
    preceding: BatchOffsets | None = None
    preceding_commit_modified: float | None = None
    # (batch id, offsets/N LastModified, commits/N LastModified or None) for each batch of the
    # window, C and the in-flight one, oldest first: from the listing, read or not (pace.py).
    listed_times: tuple[tuple[int, float, float | None], ...] = ()


# -- parsers ---------------------------------------------------------------------------------


def parse_batch_id(name: str) -> int | None:
    """The batch id of a log file name, or None for ``.0.crc``, ``.1.abc.tmp``, ``x``, ``-1``,
    ``00012``.

    Spark parses names as a Java long and skips the rest (as it skips "x.tmp"): ASCII digits,
    at most 19 of them, at most ``INT64_MAX``. It then reads batch N from the file named
    ``str(N)``, so ``00012`` or ``+7`` (which a Java long parses) is never batch 12 or 7 to it:
    only the name Spark writes counts, without leading zeros."""
    if not (name.isdigit() and name.isascii() and len(name) <= 19):
        return None
    if name[0] == "0" and name != "0":
        return None
    batch_id = int(name)
    return batch_id if batch_id <= INT64_MAX else None


def parse_offsets(
    data: bytes, path: str, *, batch_id: int | None = None, modified: float | None = None
) -> BatchOffsets:
    """Parse ``offsets/N`` (v1 or v2). ``batch_id`` defaults to the file's name."""
    if batch_id is None:
        batch_id = parse_batch_id(path.rstrip("/").rsplit("/", 1)[-1])
        if batch_id is None:
            raise CheckpointCorrupt(f"{path}: not an offsets log file (name is not a batch id)")
    text = _decode(data, path)
    lines = text.split("\n")
    version = _version(lines[0], path, "offsets log", OFFSETS_VERSIONS)
    # Spark writes no trailing newline; tolerate one (or more) from hand-edited files, but keep
    # line 2 even when blank: continuous mode writes an empty metadata line.
    while len(lines) > 2 and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CheckpointCorrupt(
            f"{path}: truncated offsets file: no metadata line after 'v{version}'"
        )
    timestamp_ms, watermark_ms, conf = _offsets_metadata(lines[1], path)
    source_lines = lines[2:]
    if not source_lines:
        raise CheckpointCorrupt(f"{path}: truncated offsets file: no source offset lines")
    if version == 1:
        sources = tuple(
            _source_offset(str(index), line, path) for index, line in enumerate(source_lines)
        )
    else:
        sources = _v2_sources(source_lines, path)
    return BatchOffsets(
        batch_id=batch_id,
        version=version,
        batch_timestamp_ms=timestamp_ms,
        watermark_ms=watermark_ms,
        conf=MappingProxyType(conf),
        sources=sources,
        modified=modified,
    )


def parse_commit(data: bytes, path: str) -> int:
    """Validate ``commits/N`` (v1, v2 or v3) and return its version.

    Only the file's existence matters for lag; this catches a file that is not a commit log entry.
    """
    text = _decode(data, path)
    lines = text.split("\n")
    version = _version(lines[0], path, "commit log", COMMITS_VERSIONS)
    # Like Spark's CommitLog, a missing metadata line means "{}".
    if len(lines) > 1 and lines[1].strip():
        _json_object(lines[1], path, "commit metadata")
    return version


def parse_metadata(data: bytes, path: str) -> str:
    """The query id from the checkpoint's ``metadata`` file (``{"id": "<uuid>"}``)."""
    text = _decode(data, path).strip()
    document = _json_object(text, path, "metadata")
    query_id = document.get("id")
    if not isinstance(query_id, str) or not query_id:
        raise CheckpointCorrupt(f'{path}: metadata has no "id" string (found {text[:80]!r})')
    return query_id


def parse_source_start(data: bytes, path: str, source_id: str) -> SourceOffset:
    """Parse ``sources/<id>/0``: the offsets the source started from.

    Other sources (rate) write ``v1\\n<offset>``. Kafka writes one byte first (0x00; Spark 2.1.0
    the JSON's length, and no version line), which Spark drops whatever it is.
    """
    if not _SOURCE_VERSION_LINE.match(data):
        data = data[1:]
    text = _decode(data, path)
    if text.startswith("v"):
        header, _, body = text.partition("\n")
        _version(header, path, "source start offsets", SOURCE_START_VERSIONS)
    else:
        body = text
    if not body.strip():
        raise CheckpointCorrupt(f"{path}: truncated source start file: no offset after the header")
    return _source_offset(source_id, body.strip(), path)


# -- parser helpers --------------------------------------------------------------------------


def _decode(data: bytes, path: str) -> str:
    if not data:
        raise CheckpointCorrupt(f"{path}: empty file (a crashed write or a truncated copy)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointCorrupt(
            f"{path}: not UTF-8 text (byte {exc.start}): not a Spark log"
        ) from exc


def _version(line: str, path: str, what: str, supported: tuple[int, ...]) -> int:
    match = _VERSION_LINE.fullmatch(line.strip())
    if match is None:
        raise CheckpointCorrupt(
            f"{path}: missing version header: {what} files start with a line like "
            f"'v{supported[0]}', found {line[:40]!r}"
        )
    version = int(match.group(1))
    if version not in supported:
        known = ", ".join(f"v{v}" for v in supported)
        why = (
            "it was written by a newer Spark: upgrade airflow-provider-sparklag"
            if version > max(supported)
            else "no Spark writes it (versions start at v1): the file is damaged"
        )
        raise UnsupportedCheckpointVersion(
            f"{path}: {what} version v{version} is not supported (known: {known}); {why}"
        )
    return version


def _load_json(text: str, path: str, what: str) -> Any:
    """``json.loads`` whose every failure is a :class:`CheckpointCorrupt` naming the file."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        problem = exc.msg
    except ValueError as exc:  # a number longer than Python's int-parsing limit
        problem = str(exc).split(";")[0]
    except RecursionError:
        problem = "nested too deeply to be a Spark log"
    raise CheckpointCorrupt(f"{path}: {what} is not valid JSON ({problem}): {text[:80]!r}")


def _json_object(text: str, path: str, what: str) -> dict[str, Any]:
    document = _load_json(text, path, what)
    if not isinstance(document, dict):
        raise CheckpointCorrupt(f"{path}: {what} is not a JSON object: {text[:80]!r}")
    return document


def _offsets_metadata(line: str, path: str) -> tuple[int | None, int | None, dict[str, str]]:
    if not line.strip():
        return None, None, {}  # continuous trigger
    document = _json_object(line, path, "offsets metadata")
    timestamp_ms = _optional_int(document, "batchTimestampMs", path)
    if timestamp_ms is not None and not 0 <= timestamp_ms <= LATEST_TIME_MS:
        # The driver's clock when it planned the batch: never before 1970 (Kafka reads a
        # negative time as a code, -1 LATEST) nor past year 9999 (no date to print).
        raise CheckpointCorrupt(
            f"{path}: offsets metadata 'batchTimestampMs' is {timestamp_ms}, not a time from "
            "1970 to 9999: the file is damaged"
        )
    watermark_ms = _optional_int(document, "batchWatermarkMs", path)  # event time: any long
    raw_conf = document.get("conf", {})
    if not isinstance(raw_conf, dict):
        raise CheckpointCorrupt(f'{path}: offsets metadata "conf" is not a JSON object')
    # The key set grows with each Spark release; keep everything, interpret nothing here.
    conf = {
        str(key): value if isinstance(value, str) else json.dumps(value)
        for key, value in raw_conf.items()
    }
    return timestamp_ms, watermark_ms, conf


def _optional_int(document: Mapping[str, Any], key: str, path: str) -> int | None:
    value = document.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointCorrupt(f"{path}: offsets metadata {key!r} is not an integer: {value!r}")
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise CheckpointCorrupt(
            f"{path}: offsets metadata {key!r} is {value}, beyond a signed 64-bit integer "
            "(Spark writes a Java long): the file is damaged"
        )
    return value


def _v2_sources(lines: list[str], path: str) -> tuple[SourceOffset, ...]:
    sources: dict[str, SourceOffset] = {}
    for number, line in enumerate(lines, start=3):
        # Split on the FIRST colon: the offset JSON itself contains colons.
        source_id, colon, raw = line.partition(":")
        if not colon or not source_id:
            raise CheckpointCorrupt(
                f"{path}: line {number} is not '<sourceId>:<offset>' (offsets v2): {line[:80]!r}"
            )
        if source_id in sources:
            raise CheckpointCorrupt(f"{path}: source {source_id!r} appears twice")
        sources[source_id] = _source_offset(source_id, raw, path)
    # Lines are not sorted on disk; numeric ids in number order, then names.
    ordered = sorted(sources, key=lambda sid: (0, int(sid), "") if sid.isdigit() else (1, 0, sid))
    return tuple(sources[sid] for sid in ordered)


def _source_offset(source_id: str, raw: str, path: str) -> SourceOffset:
    if raw.strip() == NO_OFFSET:
        return SourceOffset(source_id=source_id, kind="none", kafka=None, raw=raw)
    document = _load_json(raw, path, f"offset of source {source_id!r}")
    kafka = _kafka_offsets(document, source_id, path)
    if kafka is None:
        return SourceOffset(source_id=source_id, kind="other", kafka=None, raw=raw)
    return SourceOffset(source_id=source_id, kind="kafka", kafka=kafka, raw=raw)


def _kafka_offsets(
    document: Any, source_id: str, path: str
) -> Mapping[str, Mapping[int, int]] | None:
    """Kafka offsets are recognised by shape: ``{topic: {"<partition>": <offset>}}``.

    Any other shape (rate ``50``, rate-continuous ``{"0": {"value": .., "runTimeMs": ..}}``,
    file sources, an empty ``{}``) is another kind of source. A Kafka-shaped document with a
    bad partition key or offset is corrupt, named down to the partition: Spark stores only
    resolved offsets (0 .. 2**63-1; the -1/-2 of ``startingOffsets`` never reach a checkpoint)
    under partition numbers (0 .. 2**31-1).
    """
    if not _is_kafka_shaped(document):
        return None
    topics: dict[str, Mapping[int, int]] = {}
    for topic, partitions in document.items():
        if not topic:
            raise CheckpointCorrupt(f"{path}: source {source_id!r} has an empty topic name")
        if not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
            raise CheckpointCorrupt(
                f"{path}: source {source_id!r} topic {ascii(topic)[:120]} is not a Kafka topic "
                "name (at most 249 of a-z A-Z 0-9 . _ -)"
            )
        offsets: dict[int, int] = {}
        for key, offset in partitions.items():
            # The common case checked inline; anything else is named down to the partition.
            if type(offset) is int and 0 <= offset <= INT64_MAX and _PARTITION_KEY.fullmatch(key):
                partition = int(key)
                if partition <= INT32_MAX:
                    offsets[partition] = offset
                    continue
            where = f"{path}: source {source_id!r} topic {topic!r} partition {key}"
            offsets[_partition(key, where)] = _offset(offset, where)
        topics[topic] = MappingProxyType(offsets)
    return MappingProxyType(topics)


def _is_kafka_shaped(document: Any) -> bool:
    """Topic -> {partition: offset}: partition numbers as keys, or numbers as values (a
    damaged Kafka offset has one of the two); the rate source's continuous offsets excepted."""
    if not isinstance(document, dict) or not document:
        return False
    if not all(isinstance(partitions, dict) for partitions in document.values()):
        return False
    entries = [entry for partitions in document.values() for entry in partitions.items()]
    if entries and all(key in _RATE_CONTINUOUS_KEYS for key, _ in entries):
        return False
    return all(isinstance(key, str) and key.isdigit() for key, _ in entries) or all(
        isinstance(value, (int, float)) and not isinstance(value, bool) for _, value in entries
    )


def _partition(key: str, where: str) -> int:
    if not _PARTITION_KEY.fullmatch(key):
        raise CheckpointCorrupt(
            f"{where}: the partition key {key!r} is not a partition number (Spark writes "
            "0, 1, 2, ...): the file is damaged"
        )
    partition = int(key)
    if partition > INT32_MAX:
        raise CheckpointCorrupt(
            f"{where}: partition number beyond Kafka's 32-bit partition ids: the file is damaged"
        )
    return partition


def _offset(offset: Any, where: str) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise CheckpointCorrupt(f"{where}: offset {offset!r} is not an integer")
    if offset < 0:
        raise CheckpointCorrupt(
            f"{where}: negative offset {offset} (a checkpoint stores only resolved offsets; "
            "-1/-2 mean latest/earliest in startingOffsets, never in a checkpoint)"
        )
    if offset > INT64_MAX:
        raise CheckpointCorrupt(
            f"{where}: offset {offset} is beyond a signed 64-bit integer (Kafka offsets are "
            "at most 2**63-1): the file is damaged"
        )
    return offset


# -- reader ----------------------------------------------------------------------------------


class _Vanished(Exception):
    """A listed file was gone when read (purge, or the checkpoint is being replaced)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class CheckpointReader:
    """Reads a checkpoint's state, caching the offsets files it has already parsed.

    Example::

        reader = CheckpointReader(open_storage("s3a://bucket/ck/orders"), "s3a://bucket/ck/orders")
        state = reader.read(history=10)   # first call: LIST offsets/, LIST commits/, GET ...
        state = reader.read(history=10)   # later calls GET only the new offsets files

    Rules (see ``docs/``):

    - a batch file's whole name is a non-negative integer; ids compare numerically and may have
      gaps (async progress tracking);
    - committed batch C is the newest ``commits/N``; ``offsets/C`` must exist, otherwise the
      checkpoint is damaged (commits ahead of offsets: the committed offsets are unknown) and
      :class:`~airflow_sparklag.errors.CheckpointCorrupt` is raised;
    - ``commits/C`` must parse as a commit log entry (v1-v3), otherwise
      :class:`~airflow_sparklag.errors.CheckpointCorrupt` names it; it is read once per new
      committed batch unless the listing's content hash proves it (see :meth:`_check_commit`);
    - in flight is ``offsets/L`` for the newest L > C;
    - a checkpoint whose directories exist (or whose ``metadata`` exists) but hold no batch yet
      gives a state with ``committed=None``: the query has not completed a batch;
    - no ``offsets/``, ``commits/`` or ``metadata`` at all:
      :class:`~airflow_sparklag.errors.CheckpointNotFound`.

    Request budget (docs/architecture.md, "Checkpoint state"): a first ``read(history=1)`` is
    LIST commits/, LIST offsets/ (one listing on S3: ``list_checkpoint``), GET offsets/C, GET
    metadata (once per reader, never with ``query_id=False``) and GET offsets/L when a batch is
    in flight; each extra history batch one GET, once; ``commits/C`` one GET per new committed
    batch unless the listing's content hash proves it. ``read(history, lazy_history=True)``
    costs what ``history=1`` does and leaves the older batches to :meth:`read_history`.
    """

    def __init__(self, storage: Storage, location: str, *, query_id: bool = True) -> None:
        self.storage = storage
        refuse_bucketless(location)
        self.location = trim_location(location)
        self.wants_query_id = query_id
        self._offsets_cache: dict[int, tuple[ObjectInfo, BatchOffsets]] = {}
        self._metadata_read = False
        self._listed_keys: int | None = None  # keys of the last single listing (S3)
        self._query_id: str | None = None
        self._commit_checked: tuple[str, int, float] | None = None  # a small commits/C, read

    def batches_read(self) -> list[BatchOffsets]:
        """The offsets files this reader holds (those of its newest read), oldest first."""
        return [batch for _, (_, batch) in sorted(self._offsets_cache.items())]

    def read(self, history: int = 10, *, lazy_history: bool = False) -> CheckpointState:
        """A fresh snapshot; ``history`` bounds how many committed batches are returned.

        ``lazy_history=True`` reads no older batch (unless the listing hints at a rewind): the
        state's ``history`` is offsets/C alone and ``unread_history`` lists the older batches
        of the window, which :meth:`read_history` reads when a rule needs them.
        """
        try:
            return self._read_once(history, lazy_history)
        except _Vanished:
            pass
        # A file we just listed vanished: the listing is stale (checkpoint deleted/replaced while
        # we read it). One fresh listing settles it; a second miss means it really is broken.
        try:
            return self._read_once(history, lazy_history)
        except _Vanished as vanished:
            raise CheckpointCorrupt(
                f"{vanished.path}: listed but gone when read, twice; the checkpoint at "
                f"{self.location} is being deleted or rewritten"
            ) from None

    def _read_once(self, history: int, lazy_history: bool = False) -> CheckpointState:
        # commits/ first: offsets/N is written before commits/N, so any commit we see has its
        # offsets file in the listing that follows (no false "commits ahead of offsets").
        commits, offsets, metadata = self._list_logs()
        metadata_listed = None if metadata is None else bool(metadata)
        query_id = self._read_query_id(metadata_listed) if self.wants_query_id else None
        commit_ids = tuple(sorted(commits))
        offsets_ids = tuple(sorted(offsets))

        if not commits and not offsets and not metadata_listed and not self._exists():
            raise CheckpointNotFound(
                f"{self.location}: no Spark checkpoint here (no offsets/, commits/ or metadata); "
                "check the path and that the query has started with this checkpointLocation"
            )

        committed_id = commit_ids[-1] if commit_ids else None
        committed: BatchOffsets | None = None
        if committed_id is not None:
            if committed_id not in offsets:
                newest = f"newest is offsets/{offsets_ids[-1]}" if offsets_ids else "it is empty"
                raise CheckpointCorrupt(
                    f"{join(self.location, 'offsets', str(committed_id))}: missing although "
                    f"commits/{committed_id} exists ({newest}); offsets/ was deleted or purged by "
                    "hand, so the committed offsets are unknown: restore offsets/ or restart the "
                    "query on a new checkpoint"
                )
            committed = self._offsets(committed_id, offsets[committed_id])

        latest_id = offsets_ids[-1] if offsets_ids else None
        in_flight: BatchOffsets | None = None
        if latest_id is not None and (committed_id is None or latest_id > committed_id):
            in_flight = self._offsets(latest_id, offsets[latest_id])
        if committed_id is not None:
            watermarks = {b.watermark_ms for b in (committed, in_flight) if b is not None}
            self._check_commit(commits[committed_id], watermarks)

        window = _window(commit_ids, offsets, committed_id, history)
        unread: tuple[ObjectInfo, ...] = ()
        # An older offsets file listed larger than offsets/C hints at a rewind (offsets only
        # grow, and with them their digits): only the older batches show it, read them now.
        if (
            lazy_history
            and committed_id is not None
            and not any(offsets[i].size > offsets[committed_id].size for i in window)
        ):
            past: tuple[BatchOffsets, ...] = ()
            unread = tuple(offsets[batch_id] for batch_id in window)
        else:
            past = self._read_batches(window, offsets)
        current = committed or in_flight
        preceding = self._preceding(committed, in_flight, offsets, commits)
        # Keep only what the next read can ask for again: a reader that polls for days (sensors,
        # FleetChecker) must not grow with every batch the job ever ran. The whole window is
        # kept, read or not: a lazy read must not drop what read_history would ask for again.
        keep = set(window)
        keep.update(b.batch_id for b in (committed, in_flight) if b is not None)
        for stale in [i for i in self._offsets_cache if i not in keep]:
            del self._offsets_cache[stale]
        return CheckpointState(
            location=self.location,
            query_id=query_id,
            committed_batch_id=committed_id,
            committed=committed,
            commit_modified=commits[committed_id].modified if committed_id is not None else None,
            in_flight=in_flight,
            history=past + ((committed,) if committed is not None and history > 0 else ()),
            offsets_ids=offsets_ids,
            commit_ids=commit_ids,
            continuous=current is not None and _is_continuous(current),
            unread_history=unread,
            written_before=self._written_before(in_flight or committed, offsets, metadata),
            preceding=preceding[0],
            preceding_commit_modified=preceding[1],
            listed_times=tuple(
                (i, offsets[i].modified, commits[i].modified if i in commits else None)
                for i in sorted(keep)
                if i in offsets
            ),
        )

    def _written_before(
        self,
        newest: BatchOffsets | None,
        offsets: Mapping[int, ObjectInfo],
        metadata: list[ObjectInfo] | None,
    ) -> float | None:
        """``CheckpointState.written_before`` for ``newest``: only when it has real-time's
        span (one listing of the checkpoint's root more, without S3's combined listing, when
        it is the first batch)."""
        span = _span(newest)
        if newest is None or span is None or span < REAL_TIME_MIN_INTERVAL:
            return None
        earlier = [i for i in offsets if i < newest.batch_id]
        if earlier:
            return offsets[max(earlier)].modified
        if metadata is None:
            try:
                metadata = [e for e in self.storage.list_dir(self.location) if e.name == "metadata"]
            except SparkLagError:
                return None
        return metadata[0].modified if metadata else None

    def _preceding(
        self,
        committed: BatchOffsets | None,
        in_flight: BatchOffsets | None,
        offsets: Mapping[int, ObjectInfo],
        commits: Mapping[int, ObjectInfo],
    ) -> tuple[BatchOffsets | None, float | None]:
        """``CheckpointState.preceding`` and its commit time: only when offsets/C is the newest
        and C has real-time's shape with a span under ``REAL_TIME_SURE_INTERVAL`` (one GET
        more, unless the history read it)."""
        if committed is None or in_flight is not None:
            return None, None
        commit = commits.get(committed.batch_id)
        span = _shape(committed, None if commit is None else commit.modified)
        earlier = [i for i in offsets if i < committed.batch_id]
        if span is None or span >= REAL_TIME_SURE_INTERVAL or not earlier:
            return None, None
        batch_id = max(earlier)
        try:
            batch = self._offsets(batch_id, offsets[batch_id])
        except _Vanished:
            return None, None  # purged since the listing: not corroborated
        before = commits.get(batch_id)
        return batch, None if before is None else before.modified

    def read_history(
        self, state: CheckpointState, newest: int | None = None, *, pool: Executor | None = None
    ) -> CheckpointState:
        """``state`` with the older batches a lazy :meth:`read` left unread: the same history
        an eager read of the same listing returns (a batch purged since is skipped as there).

        ``newest=N`` reads only the N newest of them and leaves the others unread (a later
        call reads those). One GET per batch not cached yet, all at once in ``pool`` if given
        (else one after another); a state with nothing unread is returned as is."""
        if not state.unread_history:
            return state
        listed = _batches(state.unread_history)
        ids = list(listed)
        take = ids if newest is None else ids[len(ids) - max(0, newest) :]
        left = tuple(listed[i] for i in ids[: len(ids) - len(take)])
        past = self._read_batches(take, listed, pool)
        return dataclasses.replace(state, history=past + state.history, unread_history=left)

    def _read_batches(
        self, wanted: list[int], offsets: Mapping[int, ObjectInfo], pool: Executor | None = None
    ) -> tuple[BatchOffsets, ...]:
        """The offsets files of ``wanted`` (older committed batches), oldest first; read in
        ``pool`` when given."""

        def read(batch_id: int) -> BatchOffsets | None:
            try:
                return self._offsets(batch_id, offsets[batch_id])
            except _Vanished:
                return None  # purged by Spark (minBatchesToRetain) since the listing: expected

        if pool is not None and len(wanted) > 1:
            found = list(pool.map(read, wanted))
        else:
            found = [read(batch_id) for batch_id in wanted]
        return tuple(batch for batch in found if batch is not None)

    def _list_logs(
        self,
    ) -> tuple[dict[int, ObjectInfo], dict[int, ObjectInfo], list[ObjectInfo] | None]:
        """commits/ and offsets/ batches, and ``metadata`` as listed (None: not asked).

        A backend with ``list_checkpoint`` (S3) lists both logs and ``metadata`` in one
        request; the others list commits/ then offsets/. Either way commits/ is listed first
        (S3 returns keys in order, and commits/ sorts before offsets/).
        """
        list_checkpoint = getattr(self.storage, "list_checkpoint", None)
        if callable(list_checkpoint):
            # Size the first page from the last listing (room for new batches), so a page does
            # not run deep into state/: every listed key costs client CPU.
            keys = self._listed_keys
            sized = {} if keys is None else {"first_page": min(1000, 2 * keys + 64)}
            listing = list_checkpoint(self.location, **sized)
            self._listed_keys = sum(len(entries) for entries in listing.values())
            return (
                _batches(listing["commits"]),
                _batches(listing["offsets"]),
                list(listing.get("metadata") or ()),
            )
        commits = _batches(self.storage.list_dir(join(self.location, "commits")))
        offsets = _batches(self.storage.list_dir(join(self.location, "offsets")))
        return commits, offsets, None

    def _offsets(self, batch_id: int, info: ObjectInfo) -> BatchOffsets:
        cached = self._offsets_cache.get(batch_id)
        # Offsets files are immutable; a different size/time means the checkpoint was replaced.
        if cached is not None and (cached[0].size, cached[0].modified) == (
            info.size,
            info.modified,
        ):
            return cached[1]
        path = join(self.location, "offsets", info.name)
        if info.size > MAX_LOG_FILE_SIZE:
            raise CheckpointCorrupt(
                f"{path}: {info.size:,} bytes, far larger than any offsets file Spark writes "
                f"(a query over 100,000 partitions writes ~2 MB); not read"
            )
        data = self._read_listed(path)
        batch = parse_offsets(data, path, batch_id=batch_id, modified=info.modified)
        self._offsets_cache[batch_id] = (info, batch)
        return batch

    def _check_commit(self, info: ObjectInfo, watermarks: set[int | None]) -> None:
        """Is ``commits/C`` a commit log entry? Checked once per new committed batch.

        Spark writes ``v1`` + ``{"nextBatchWatermarkMs":W}``, W almost always 0 or the
        watermark of ``offsets/C`` or ``offsets/C+1``: when the listing's content hash (S3 ETag,
        GCS md5Hash) is the MD5 of one of those texts the file is not read. Otherwise it is read
        and parsed, once: a damaged one is :class:`~airflow_sparklag.errors.CheckpointCorrupt`.
        """
        key = (info.name, info.size, info.modified)
        if key == self._commit_checked:
            return
        if (
            info.size >= MIN_COMMIT_SIZE
            and info.content_md5 is not None
            and info.content_md5 in _commit_md5s(watermarks)
        ):
            self._commit_checked = key
            return
        path = join(self.location, "commits", info.name)
        parse_commit(self._read_listed(path), path)
        self._commit_checked = key

    def _read_listed(self, path: str) -> bytes:
        """A listed file's content; :class:`_Vanished` when it is gone."""
        try:
            return self.storage.read(path)
        except StorageNotFound:
            raise _Vanished(path) from None

    def _read_query_id(self, listed: bool | None = None) -> str | None:
        if listed is False and self._query_id is None:
            # The listing shows no metadata: no GET (asked again once it appears).
            return None
        if not self._metadata_read:
            path = join(self.location, "metadata")
            try:
                self._query_id = parse_metadata(self.storage.read(path), path)
            except StorageNotFound:
                self._query_id = None  # Spark < 4.2 runs without it (ckm4.3.0 sample lacks it too)
            self._metadata_read = True
        return self._query_id

    def _exists(self) -> bool:
        """Is there a checkpoint with no batch yet? Only asked when both listings are empty."""
        if self._query_id is not None:
            return True
        # Local and HDFS keep empty directories; object stores have none, but metadata is
        # written before the first batch there.
        names = ["offsets", "commits"]
        if not self.wants_query_id:
            names.append("metadata")  # not read by this reader, but proof of a checkpoint
        return any(self.storage.exists(join(self.location, name)) for name in names)


def _window(
    commit_ids: tuple[int, ...],
    offsets: Mapping[int, ObjectInfo],
    committed_id: int | None,
    history: int,
) -> list[int]:
    """The older committed batches (not C itself) a ``history`` of that many asks for, oldest
    first: those whose offsets file is listed."""
    if committed_id is None or history <= 1:
        return []
    older = [bid for bid in commit_ids if bid < committed_id and bid in offsets]
    return older[-(history - 1) :]


def _commit_md5s(watermarks: set[int | None]) -> set[str]:
    """MD5s of the v1 commit texts Spark writes for these next-batch watermarks (and 0)."""
    values = {0} | {w for w in watermarks if w is not None}
    return {_v1_commit_md5(value) for value in values}


@functools.lru_cache(maxsize=256)
def _v1_commit_md5(watermark_ms: int) -> str:
    text = f'v1\n{{"nextBatchWatermarkMs":{watermark_ms}}}'
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def _batches(entries: Iterable[ObjectInfo]) -> dict[int, ObjectInfo]:
    """Batch id -> entry, for the entries whose name :func:`parse_batch_id` accepts."""
    batches: dict[int, ObjectInfo] = {}
    for info in entries:
        batch_id = parse_batch_id(info.name)
        if batch_id is not None:
            batches[batch_id] = info
    return batches


def _is_continuous(batch: BatchOffsets) -> bool:
    # Continuous mode writes an empty metadata line; micro-batch always writes the JSON.
    return batch.batch_timestamp_ms is None and batch.watermark_ms is None and not batch.conf


# Real-time mode (Spark >= 4.1) writes offsets/N at the END of interval N, just before
# commits/N, while batchTimestampMs is the interval's start; a micro-batch writes offsets/N when
# it plans batch N. The bounds below were measured on pyspark 4.2 (docs/lag-and-health.md, "The
# real-time trigger").
# Seconds from batchTimestampMs to offsets/C, at least: over the longest micro-batch plan seen.
REAL_TIME_MIN_INTERVAL = 1.0
# From this span on the newest checkpoint alone decides (no plan comes near it, and it leaves
# room for S3's 1 s times and some clock skew); a shorter one needs the batch before it to have
# the shape too: two plans in a row as long, each with a run under half of it.
REAL_TIME_SURE_INTERVAL = 4.0
# offsets/C to commits/C, at most this share of that span: 0.02-0.27 s on a quiet machine, 1.5 s
# of a 5.3 s span seen at load 11 on 2 cores, 0.44 s of a 2.1 s one at load 14.
REAL_TIME_MAX_WRITE_SHARE = 0.5
# An interval begins when the previous checkpoint is written (0.02-0.8 s later in real queries):
# what Spark wrote before it is at most this long after its batch time (S3 has 1 s times and
# the store's clock), and at most half the span (a copy written at once has every file within
# moments of offsets/C, a span after the batch time).
REAL_TIME_START_SLACK = 2.0


def real_time_interval(state: CheckpointState) -> float | None:
    """The newest checkpoint's interval (seconds from its ``batchTimestampMs`` to the time
    ``offsets/C`` was written) when the files have real-time mode's shape, else None.

    The checkpoint records no trigger, so the shape decides (docs/lag-and-health.md, "The
    real-time trigger"): ``offsets/C`` written at least ``REAL_TIME_MIN_INTERVAL`` after its
    batch time, ``commits/C`` within half of that span after it, and under
    ``REAL_TIME_SURE_INTERVAL`` the batch before C (``state.preceding``) too. An ``offsets/L``
    without its commit with that span is real-time's, read between the two writes. The
    interval began after what Spark wrote before it (``written_before``), which a copied
    checkpoint, every file written at copy time, fails.
    """
    newest = state.in_flight or state.committed
    span = _span(newest)
    if newest is None or span is None or span < REAL_TIME_MIN_INTERVAL:
        return None
    assert newest.batch_timestamp_ms is not None  # _span has it
    slack = min(REAL_TIME_START_SLACK, span / 2)
    if state.written_before is None or state.written_before > (
        newest.batch_timestamp_ms / 1000.0 + slack
    ):
        return None
    if state.committed is None:  # real-time's first checkpoint, caught between its writes
        return span if span >= REAL_TIME_SURE_INTERVAL else None
    interval = _shape(state.committed, state.commit_modified)
    if interval is None or state.in_flight is not None or interval >= REAL_TIME_SURE_INTERVAL:
        return interval
    if _shape(state.preceding, state.preceding_commit_modified) is None:
        return None
    return interval


def _shape(batch: BatchOffsets | None, commit_modified: float | None) -> float | None:
    """A committed batch's span when it has real-time's shape: offsets written at least
    ``REAL_TIME_MIN_INTERVAL`` after its batch time, its commit within
    ``REAL_TIME_MAX_WRITE_SHARE`` of that span after them."""
    span = _span(batch)
    if span is None or batch is None or batch.modified is None or commit_modified is None:
        return None
    wrote = commit_modified - batch.modified
    if span < REAL_TIME_MIN_INTERVAL or not 0 <= wrote <= REAL_TIME_MAX_WRITE_SHARE * span:
        return None
    return span


def _span(batch: BatchOffsets | None) -> float | None:
    """Seconds from a batch's time to its offsets file's."""
    if batch is None or batch.batch_timestamp_ms is None or batch.modified is None:
        return None
    return batch.modified - batch.batch_timestamp_ms / 1000.0
