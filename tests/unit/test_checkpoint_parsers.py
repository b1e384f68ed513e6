"""Checkpoint file parsers: every real sample file, then every way a file can be bad."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from airflow_sparklag.checkpoint_files import (
    CheckpointState,
    parse_batch_id,
    parse_commit,
    parse_metadata,
    parse_offsets,
    parse_source_start,
)
from airflow_sparklag.errors import CheckpointCorrupt, UnsupportedCheckpointVersion

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
SAMPLES = sorted(p.name for p in DATA.iterdir() if p.is_dir())


def _batch_files(kind: str) -> list[Path]:
    return sorted(
        path
        for sample in SAMPLES
        for path in (DATA / sample / kind).glob("*")
        if parse_batch_id(path.name) is not None
    )


def test_every_sample_is_present() -> None:
    assert SAMPLES == [
        "ck35",
        "ck43",
        "ck43v2",
        "cka",
        "cka4.0.5",
        "cka4.1.4",
        "ckc35",
        "ckm3.5.9",
        "ckm4.3.0",
        "ckn4.2.1",
        "ckn4.3.0",
        "ckr3.5.9",
        "ckr4.3.0",
    ]


# -- real files ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", _batch_files("offsets"), ids=lambda p: f"{p.parent.parent.name}/{p.name}"
)
def test_every_sample_offsets_file_parses(path: Path) -> None:
    batch = parse_offsets(path.read_bytes(), str(path), modified=1.5)
    assert batch.batch_id == int(path.name)
    assert batch.version in (1, 2)
    assert batch.sources
    assert batch.modified == 1.5
    # The samples use the rate source only: never mistaken for Kafka.
    assert all(source.kind == "other" for source in batch.sources)


@pytest.mark.parametrize(
    "path", _batch_files("commits"), ids=lambda p: f"{p.parent.parent.name}/{p.name}"
)
def test_every_sample_commit_file_parses(path: Path) -> None:
    assert parse_commit(path.read_bytes(), str(path)) in (1, 2, 3)


@pytest.mark.parametrize(
    ("file", "version", "timestamp_ms", "sources"),
    [
        ("ck35/offsets/6", 1, 1795276508560, [("0", "50"), ("1", "50")]),
        ("ck43/offsets/1", 1, 1795276443279, [("0", "7"), ("1", "6")]),
        # v2: lines "1:12" then "0:12" on disk (unsorted); returned in source order.
        ("ck43v2/offsets/15", 2, 1795276492257, [("0", "12"), ("1", "12")]),
        ("cka/offsets/6", 1, 1795276721701, [("0", "6")]),
        ("cka4.0.5/offsets/4", 1, 1795276989432, [("0", "6"), ("1", "6")]),
        ("cka4.1.4/offsets/7", 1, 1795277008130, [("0", "8"), ("1", "8")]),
        ("ckm3.5.9/offsets/6", 1, 1795276860001, [("0", "12")]),
        ("ckm4.3.0/offsets/3", 1, 1795276898004, [("0", "3")]),
        ("ckn4.2.1/offsets/5", 2, 1795276750001, [("alpha", "4"), ("beta_1", "4")]),
        ("ckn4.3.0/offsets/4", 2, 1795276762001, [("alpha", "4"), ("beta_1", "4")]),
        ("ckr3.5.9/offsets/0", 1, 1795276837794, [("0", "9")]),
    ],
)
def test_sample_offsets_content(
    file: str, version: int, timestamp_ms: int, sources: list[tuple[str, str]]
) -> None:
    path = DATA / file
    batch = parse_offsets(path.read_bytes(), str(path))
    assert batch.version == version
    assert batch.batch_timestamp_ms == timestamp_ms
    assert batch.watermark_ms == 0
    assert [(s.source_id, s.raw) for s in batch.sources] == sources
    assert batch.conf["spark.sql.streaming.multipleWatermarkPolicy"] == "min"


def test_continuous_offsets_have_empty_metadata_line() -> None:
    path = DATA / "ckc35" / "offsets" / "8"
    batch = parse_offsets(path.read_bytes(), str(path))
    assert batch.batch_timestamp_ms is None
    assert batch.watermark_ms is None
    assert dict(batch.conf) == {}
    [source] = batch.sources
    # rate-continuous {"<partition>": {"value": .., "runTimeMs": ..}} is not Kafka.
    assert source.kind == "other"
    assert source.raw.startswith('{"1":{"value":37')


@pytest.mark.parametrize(
    ("file", "version"),
    [("ck35/commits/6", 1), ("ck43v2/commits/15", 2), ("ckn4.3.0/commits/4", 1)],
)
def test_sample_commit_versions(file: str, version: int) -> None:
    path = DATA / file
    assert parse_commit(path.read_bytes(), str(path)) == version


@pytest.mark.parametrize(
    ("sample", "query_id"),
    [
        ("ck35", "a983b337-7405-45bc-aa6b-99679b3f6081"),
        ("ckr3.5.9", "c43700af-10ae-4058-bf11-5398eb68759e"),
        ("ckr4.3.0", "99286de1-3da7-4774-8a30-1bc11c8de6b1"),
    ],
)
def test_sample_metadata(sample: str, query_id: str) -> None:
    path = DATA / sample / "metadata"
    assert parse_metadata(path.read_bytes(), str(path)) == query_id


@pytest.mark.parametrize(
    ("file", "source_id", "raw"),
    [
        ("ck35/sources/0/0", "0", "1795276458264"),
        ("ck43v2/sources/1/0", "1", "1795276480054"),
        ("ckn4.2.1/sources/alpha/0", "alpha", "1795276745068"),
    ],
)
def test_sample_source_start_files(file: str, source_id: str, raw: str) -> None:
    path = DATA / file
    source = parse_source_start(path.read_bytes(), str(path), source_id)
    assert (source.source_id, source.kind, source.raw) == (source_id, "other", raw)


# -- Kafka offsets (format from Spark's KafkaSourceOffset / JsonUtils) ------------------------

_META = '{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{"a":"b"}}'


def test_kafka_source_is_recognised_by_content() -> None:
    data = f'v1\n{_META}\n{{"orders":{{"2":7,"0":23,"1":5}},"audit":{{"0":0}}}}\n-'.encode()
    batch = parse_offsets(data, "/ck/offsets/3")
    kafka, pending = batch.sources
    assert kafka.kind == "kafka"
    assert kafka.kafka is not None
    assert {t: dict(p) for t, p in kafka.kafka.items()} == {
        "orders": {0: 23, 1: 5, 2: 7},
        "audit": {0: 0},
    }
    assert (pending.source_id, pending.kind, pending.kafka) == ("1", "none", None)


def test_v2_splits_on_first_colon_and_sorts_sources() -> None:
    data = f'v2\n{_META}\nevents:{{"t.x":{{"0":4}}}}\n1:-\n0:{{"t":{{"0":9}}}}'.encode()
    batch = parse_offsets(data, "/ck/offsets/0")
    assert [s.source_id for s in batch.sources] == ["0", "1", "events"]
    events = batch.sources[2]
    assert events.kafka is not None and dict(events.kafka["t.x"]) == {0: 4}
    assert batch.sources[1].kind == "none"


def test_kafka_source_start_file_with_zero_byte() -> None:
    data = b'\x00v1\n{"orders":{"0":0,"1":0}}'
    source = parse_source_start(data, "/ck/sources/0/0", "0")
    assert source.kind == "kafka"
    assert source.kafka is not None and dict(source.kafka["orders"]) == {0: 0, 1: 0}


def test_source_start_file_without_version_spark_2_1() -> None:
    source = parse_source_start(b'\x00{"orders":{"0":5}}', "/ck/sources/0/0", "0")
    assert source.kafka is not None and dict(source.kafka["orders"]) == {0: 5}


# {"a":{"x":1}} is Kafka's shape with a damaged partition key: see test_checkpoint_hostile.py.
# Nested documents whose values are not numbers (Kinesis-like) are another kind of source.
@pytest.mark.parametrize(
    "raw", ["{}", '{"logOffset":3}', '{"a":{"x":"y"}}', '{"shard-0":{"seq":"4"}}', "[1,2]", '"s"']
)
def test_non_kafka_shapes_are_other(raw: str) -> None:
    batch = parse_offsets(f"v1\n{_META}\n{raw}".encode(), "/ck/offsets/0")
    assert batch.sources[0].kind == "other"
    assert batch.sources[0].raw == raw


def test_trailing_newline_and_unknown_metadata_keys_are_tolerated() -> None:
    meta = '{"batchWatermarkMs":5,"batchTimestampMs":6,"conf":{"n":1},"controlBatchInfo":{}}'
    batch = parse_offsets(f"v1\n{meta}\n7\n".encode(), "/ck/offsets/0")
    assert (batch.watermark_ms, batch.batch_timestamp_ms) == (5, 6)
    assert dict(batch.conf) == {"n": "1"}
    assert [s.raw for s in batch.sources] == ["7"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("0", 0),
        ("12", 12),
        ("100000000000", 100000000000),
        (".12.crc", None),
        ("12.crc", None),
        (".12.3f2a.tmp", None),
        ("12.tmp", None),
        ("-1", None),
        ("+1", None),
        ("", None),
        ("1a", None),
        ("١٢", None),  # non-ASCII digits
        ("_spark_metadata", None),
    ],
)
def test_parse_batch_id(name: str, expected: int | None) -> None:
    assert parse_batch_id(name) == expected


# -- bad inputs: each names the file and the problem -----------------------------------------

OFFSETS_PATH = "s3a://bucket/ck/offsets/42"

BAD_OFFSETS = [
    ("empty", b"", CheckpointCorrupt, "empty file"),
    ("not utf-8", b"v1\n\xff\xfe", CheckpointCorrupt, "not UTF-8"),
    ("no version header", _META.encode() + b"\n1", CheckpointCorrupt, "missing version header"),
    ("bad version header", b"version1\n{}\n1", CheckpointCorrupt, "missing version header"),
    ("unknown version v9", b"v9\n{}\n1", UnsupportedCheckpointVersion, "v9"),
    ("version v0", b"v0\n{}\n1", UnsupportedCheckpointVersion, "v0"),
    ("only the version line", b"v1", CheckpointCorrupt, "no metadata line"),
    ("no source lines", f"v1\n{_META}".encode(), CheckpointCorrupt, "no source offset lines"),
    ("garbage metadata", b"v1\n{not json\n1", CheckpointCorrupt, "not valid JSON"),
    (
        "truncated metadata",
        b'v1\n{"batchWatermarkMs":0,"batchTim\n1',
        CheckpointCorrupt,
        "not valid JSON",
    ),
    ("metadata not an object", b"v1\n[1]\n1", CheckpointCorrupt, "not a JSON object"),
    (
        "timestamp not an integer",
        b'v1\n{"batchTimestampMs":"soon"}\n1',
        CheckpointCorrupt,
        "'batchTimestampMs' is not an integer",
    ),
    (
        "conf not an object",
        b'v1\n{"conf":[1]}\n1',
        CheckpointCorrupt,
        '"conf" is not a JSON object',
    ),
    (
        "truncated source offset",
        f'v1\n{_META}\n{{"orders":{{"0":23,"1'.encode(),
        CheckpointCorrupt,
        "offset of source '0' is not valid JSON",
    ),
    (
        "non-integer kafka offset",
        f'v1\n{_META}\n{{"orders":{{"0":"23"}}}}'.encode(),
        CheckpointCorrupt,
        "topic 'orders' partition 0: offset '23' is not an integer",
    ),
    (
        "float kafka offset",
        f'v1\n{_META}\n{{"orders":{{"0":2.5}}}}'.encode(),
        CheckpointCorrupt,
        "is not an integer",
    ),
    (
        "negative kafka offset",
        f'v1\n{_META}\n{{"orders":{{"0":-1}}}}'.encode(),
        CheckpointCorrupt,
        "negative offset -1",
    ),
    (
        "v2 line without colon",
        f"v2\n{_META}\n12".encode(),
        CheckpointCorrupt,
        "'<sourceId>:<offset>'",
    ),
    (
        "v2 empty source id",
        f"v2\n{_META}\n:12".encode(),
        CheckpointCorrupt,
        "'<sourceId>:<offset>'",
    ),
    ("v2 duplicate source", f"v2\n{_META}\n0:1\n0:2".encode(), CheckpointCorrupt, "appears twice"),
]


@pytest.mark.parametrize(
    ("case", "data", "error", "problem"), BAD_OFFSETS, ids=[c[0] for c in BAD_OFFSETS]
)
def test_bad_offsets_file(case: str, data: bytes, error: type[Exception], problem: str) -> None:
    with pytest.raises(error) as raised:
        parse_offsets(data, OFFSETS_PATH)
    assert type(raised.value) is error
    assert OFFSETS_PATH in str(raised.value)
    assert problem in str(raised.value)


def test_offsets_file_name_must_be_a_batch_id() -> None:
    with pytest.raises(CheckpointCorrupt, match=r"/ck/offsets/\.7\.crc: not an offsets log file"):
        parse_offsets(b"v1\n{}\n1", "/ck/offsets/.7.crc")


def test_unsupported_version_says_what_to_do() -> None:
    with pytest.raises(UnsupportedCheckpointVersion, match=r"known: v1, v2.*upgrade"):
        parse_offsets(b"v3\n{}\n1", OFFSETS_PATH)


COMMIT_PATH = "hdfs://nn:8020/ck/commits/7"

BAD_COMMITS = [
    ("empty", b"", CheckpointCorrupt, "empty file"),
    (
        "no version header",
        b'{"nextBatchWatermarkMs":0}',
        CheckpointCorrupt,
        "missing version header",
    ),
    ("unknown version v4", b"v4\n{}", UnsupportedCheckpointVersion, "v4"),
    ("garbage metadata", b"v1\n{nope", CheckpointCorrupt, "commit metadata is not valid JSON"),
    ("metadata not an object", b"v2\n42", CheckpointCorrupt, "not a JSON object"),
]


@pytest.mark.parametrize(
    ("case", "data", "error", "problem"), BAD_COMMITS, ids=[c[0] for c in BAD_COMMITS]
)
def test_bad_commit_file(case: str, data: bytes, error: type[Exception], problem: str) -> None:
    with pytest.raises(error) as raised:
        parse_commit(data, COMMIT_PATH)
    assert type(raised.value) is error
    assert COMMIT_PATH in str(raised.value)
    assert problem in str(raised.value)


def test_commit_without_metadata_line_is_accepted_like_spark() -> None:
    assert parse_commit(b"v3", COMMIT_PATH) == 3


METADATA_PATH = "/ck/metadata"

BAD_METADATA = [
    ("empty", b"", "empty file"),
    ("garbage", b"{id: x", "metadata is not valid JSON"),
    ("not an object", b'["id"]', "not a JSON object"),
    ("no id", b'{"name":"x"}', 'no "id" string'),
    ("id not a string", b'{"id":7}', 'no "id" string'),
]


@pytest.mark.parametrize(
    ("case", "data", "problem"), BAD_METADATA, ids=[c[0] for c in BAD_METADATA]
)
def test_bad_metadata_file(case: str, data: bytes, problem: str) -> None:
    with pytest.raises(CheckpointCorrupt) as raised:
        parse_metadata(data, METADATA_PATH)
    assert METADATA_PATH in str(raised.value)
    assert problem in str(raised.value)


SOURCE_PATH = "/ck/sources/0/0"

BAD_SOURCE_STARTS = [
    ("empty", b"", CheckpointCorrupt, "empty file"),
    ("only the zero byte", b"\x00", CheckpointCorrupt, "empty file"),
    ("unknown version", b'\x00v2\n{"t":{"0":1}}', UnsupportedCheckpointVersion, "v2"),
    ("bad version header", b"\x00vX\n{}", CheckpointCorrupt, "missing version header"),
    ("no body", b"\x00v1\n", CheckpointCorrupt, "no offset after the header"),
    ("garbage body", b'\x00v1\n{"t":{"0":', CheckpointCorrupt, "not valid JSON"),
]


@pytest.mark.parametrize(
    ("case", "data", "error", "problem"), BAD_SOURCE_STARTS, ids=[c[0] for c in BAD_SOURCE_STARTS]
)
def test_bad_source_start_file(
    case: str, data: bytes, error: type[Exception], problem: str
) -> None:
    with pytest.raises(error) as raised:
        parse_source_start(data, SOURCE_PATH, "0")
    assert type(raised.value) is error
    assert SOURCE_PATH in str(raised.value)
    assert problem in str(raised.value)


def test_a_state_pickles_and_loads_read_only() -> None:
    """The Spark scan sends states between processes by pickle (mappingproxy alone cannot)."""
    data = b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"k":"v"}}\n{"orders":{"0":5}}'
    batch = parse_offsets(data, "ck/offsets/3", batch_id=3)
    state = CheckpointState("ck", None, 3, batch, None, None, (batch,), (3,), (3,), False)
    loaded = pickle.loads(pickle.dumps(state, pickle.HIGHEST_PROTOCOL))
    assert loaded == state and loaded.committed is not None
    kafka = loaded.committed.sources[0].kafka
    assert kafka is not None and kafka["orders"][0] == 5
    with pytest.raises(TypeError):
        loaded.committed.conf["k"] = "w"  # type: ignore[index]
    with pytest.raises(TypeError):
        kafka["orders"][0] = 6  # type: ignore[index]
