"""The files of a Spark checkpoint (``offsets/N``, ``commits/N``, ``metadata``,
``sources/<id>/0``) parsed by pure functions (bytes + path -> dataclass) that raise
:class:`~airflow_sparklag.errors.CheckpointCorrupt` or ``UnsupportedCheckpointVersion`` naming
the file; the formats follow Spark's ``OffsetSeqLog``, ``CommitLog`` and
``KafkaSourceInitialOffsetWriter`` (docs/architecture.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from airflow_sparklag.errors import CheckpointCorrupt, UnsupportedCheckpointVersion
from airflow_sparklag.storage import ObjectInfo

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
    kind = "other" if kafka is None else "kafka"
    return SourceOffset(source_id=source_id, kind=kind, kafka=kafka, raw=raw)


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
