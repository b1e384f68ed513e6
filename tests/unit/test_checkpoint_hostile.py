"""Hostile checkpoint files: every one is a typed error naming the file and what is wrong.

Hand-made damaged files only (the real samples are in test_checkpoint_parsers.py): offsets
beyond a Java long, negative offsets, partition keys that are not partition numbers, commit log
entries that are empty, unversioned or from an unknown version.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.checkpoint_files import (
    INT64_MAX,
    MAX_LOG_FILE_SIZE,
    MIN_COMMIT_SIZE,
    parse_batch_id,
    parse_commit,
    parse_offsets,
    parse_source_start,
)
from airflow_sparklag.errors import CheckpointCorrupt, UnsupportedCheckpointVersion
from airflow_sparklag.storage.local import LocalStorage

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
META = '{"batchWatermarkMs":0,"batchTimestampMs":1795276508560,"conf":{}}'
OFFSETS_PATH = "s3a://bucket/ck/offsets/42"


def _offsets(source: str, version: int = 1) -> bytes:
    line = source if version == 1 else f"0:{source}"
    return f"v{version}\n{META}\n{line}".encode()


# (case, source offset JSON, what the message must say besides the file)
BAD_KAFKA = [
    ("offset 2**63", '{"orders":{"0":9223372036854775808}}', ["partition 0", "64-bit"]),
    ("offset 2**70", '{"orders":{"0":1180591620717411303424}}', ["partition 0", "64-bit"]),
    ("offset -5", '{"orders":{"0":-5}}', ["partition 0", "negative offset -5"]),
    ("offset -1 (latest)", '{"orders":{"0":-1}}', ["partition 0", "negative offset -1"]),
    ("offset -2 (earliest)", '{"orders":{"1":7,"0":-2}}', ["partition 0", "negative offset -2"]),
    ("offset 1e3", '{"orders":{"0":1e3}}', ["partition 0", "not an integer"]),
    ("offset NaN", '{"orders":{"0":NaN}}', ["partition 0", "not an integer"]),
    ("offset true", '{"orders":{"0":true}}', ["partition 0", "not an integer"]),
    ("offset null", '{"orders":{"0":null}}', ["partition 0", "not an integer"]),
    ("partition 'zero'", '{"orders":{"zero":5}}', ["partition zero", "'zero' is not a partition"]),
    ("partition 'x' beside '0'", '{"orders":{"0":5,"x":3}}', ["'x' is not a partition number"]),
    ("partition '-1'", '{"orders":{"-1":5}}', ["'-1' is not a partition number"]),
    ("partition '1.5'", '{"orders":{"1.5":5}}', ["'1.5' is not a partition number"]),
    ("partition '01'", '{"orders":{"01":5}}', ["'01' is not a partition number"]),
    ("partition ' 1'", '{"orders":{" 1":5}}', ["' 1' is not a partition number"]),
    ("partition 2**32", '{"orders":{"4294967296":5}}', ["32-bit partition ids"]),
    ("empty topic", '{"":{"0":5}}', ["empty topic name"]),
    # Kafka names are [a-zA-Z0-9._-]{1,249}: others were asked of the broker ("Invalid topic")
    # and printed raw, an ANSI escape included, to the terminal
    ("escape in topic", '{"ord\\u001b[2Jers":{"0":5}}', ["'ord\\x1b[2Jers' is not a Kafka topic"]),
    ("bidi override", '{"\\u202eorders":{"0":5}}', ["'\\u202eorders' is not a Kafka topic name"]),
    ("topic '..'", '{"..":{"0":5}}', ["'..' is not a Kafka topic name"]),
    ("topic of 250", '{"' + "a" * 250 + '":{"0":5}}', ["is not a Kafka topic name"]),
]


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize(("case", "source", "problems"), BAD_KAFKA, ids=[c[0] for c in BAD_KAFKA])
def test_bad_kafka_offsets_name_file_topic_and_partition(
    case: str, source: str, problems: list[str], version: int
) -> None:
    with pytest.raises(CheckpointCorrupt) as raised:
        parse_offsets(_offsets(source, version), OFFSETS_PATH)
    message = str(raised.value)
    assert message.startswith(f"{OFFSETS_PATH}: source '0'")
    if case != "empty topic" and "not a Kafka topic" not in problems[0]:
        assert "topic 'orders'" in message
    for problem in problems:
        assert problem in message


def test_largest_long_offset_and_partition_are_accepted() -> None:
    source = f'{{"orders":{{"2147483647":{INT64_MAX},"0":0}}}}'
    batch = parse_offsets(_offsets(source), OFFSETS_PATH)
    kafka = batch.sources[0].kafka
    assert kafka is not None and dict(kafka["orders"]) == {2147483647: INT64_MAX, 0: 0}


@pytest.mark.parametrize(
    "raw",
    [
        '{"0":{"value":37,"runTimeMs":1795276508560},"1":{"value":38,"runTimeMs":1}}',
        '{"metadata":{"streamName":"s","batchId":"3"},"shardId-0":{"iteratorPosition":"9"}}',
    ],
    ids=["rate continuous", "kinesis-like"],
)
def test_other_nested_sources_are_not_taken_for_damaged_kafka(raw: str) -> None:
    assert parse_offsets(_offsets(raw), OFFSETS_PATH).sources[0].kind == "other"


@pytest.mark.parametrize("key", ["batchTimestampMs", "batchWatermarkMs"])
@pytest.mark.parametrize("value", [2**63, 2**70, -(2**63) - 1])
def test_metadata_times_beyond_a_long_are_corrupt(key: str, value: int) -> None:
    data = f'v1\n{{"{key}":{value}}}\n{{"t":{{"0":1}}}}'.encode()
    with pytest.raises(CheckpointCorrupt, match=rf"offsets/42: offsets metadata '{key}'.*64-bit"):
        parse_offsets(data, OFFSETS_PATH)


@pytest.mark.parametrize("value", [-1, -5, 253_402_300_800_000])
def test_batch_times_before_1970_or_after_9999_are_corrupt(value: int) -> None:
    # Were read: -5 went to Kafka's ListOffsets by time (history failed, "invalid offset -5";
    # -1 reads as LATEST), year 10000 failed history with "internal error: ValueError".
    data = f'v1\n{{"batchTimestampMs":{value}}}\n{{"t":{{"0":1}}}}'.encode()
    with pytest.raises(CheckpointCorrupt, match=rf"offsets/42: .*'batchTimestampMs' is {value}"):
        parse_offsets(data, OFFSETS_PATH)
    negative_watermark = b'v1\n{"batchWatermarkMs":-5,"batchTimestampMs":0}\n{"t":{"0":1}}'
    assert parse_offsets(negative_watermark, OFFSETS_PATH).batch_timestamp_ms == 0


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'\x00v1\n{"orders":{"0":1180591620717411303424}}', "64-bit"),
        (b'\x00v1\n{"orders":{"p0":0}}', "'p0' is not a partition number"),
        (b'\x00v1\n{"orders":{"0":-3}}', "negative offset -3"),
    ],
)
def test_bad_source_start_file(data: bytes, problem: str) -> None:
    path = "/ck/sources/0/0"
    with pytest.raises(CheckpointCorrupt, match=r"/ck/sources/0/0: source '0' topic 'orders'") as e:
        parse_source_start(data, path, "0")
    assert problem in str(e.value)


def test_smallest_file_spark_writes_is_a_valid_commit() -> None:
    data = b'v1\n{"nextBatchWatermarkMs":0}'
    assert len(data) == MIN_COMMIT_SIZE and parse_commit(data, "/ck/commits/0") == 1


# -- the reader checks commits/C -------------------------------------------------------------


def _copy(tmp_path: Path, sample: str = "ck35") -> Path:
    target = tmp_path / sample
    shutil.copytree(DATA / sample, target)
    return target


BAD_COMMITS = [
    ("empty", b"", CheckpointCorrupt, "commits/6: empty file"),
    ("blank line", b"\n", CheckpointCorrupt, "commits/6: missing version header"),
    ("garbage", b"garbage", CheckpointCorrupt, "commits/6: missing version header"),
    ("json only", b'{"x":0}', CheckpointCorrupt, "commits/6: missing version header"),
    ("v99", b"v99", UnsupportedCheckpointVersion, "commits/6: commit log version v99"),
    ("v99 + json", b"v99\n{}", UnsupportedCheckpointVersion, "commits/6: commit log version v99"),
    ("v0", b"v0\n{}", UnsupportedCheckpointVersion, "v0 is not supported (known: v1, v2, v3); no"),
    ("bad json", b"v1\n{nope", CheckpointCorrupt, "commits/6: commit metadata is not valid JSON"),
    ("not utf-8", b"v1\n\xff", CheckpointCorrupt, "commits/6: not UTF-8"),
]


@pytest.mark.parametrize(
    ("case", "data", "error", "problem"), BAD_COMMITS, ids=[c[0] for c in BAD_COMMITS]
)
def test_damaged_commit_of_the_committed_batch(
    tmp_path: Path, case: str, data: bytes, error: type[Exception], problem: str
) -> None:
    location = _copy(tmp_path)
    (location / "commits" / "6").write_bytes(data)
    with pytest.raises(error) as raised:
        CheckpointReader(LocalStorage(), str(location)).read(history=1)
    assert type(raised.value) is error
    assert str(location / "commits" / "6") in str(raised.value)
    assert problem in str(raised.value)


def test_small_valid_commit_costs_one_read_once(tmp_path: Path) -> None:
    location = _copy(tmp_path)
    (location / "commits" / "6").write_bytes(b"v1")  # Spark reads a bare version line as {}
    storage = LocalStorage()
    reader = CheckpointReader(storage, str(location))
    assert reader.read(history=1).committed_batch_id == 6
    # LIST commits/, LIST offsets/, GET metadata, GET offsets/6, GET commits/6
    assert storage.requests.by_operation == {"list": 2, "read": 3}
    storage.requests.reset()
    reader.read(history=1)
    assert storage.requests.by_operation == {"list": 2}


# Full-size files (>= MIN_COMMIT_SIZE, as big as a real commit): their listed size proves nothing.
FULL_SIZE_BAD_COMMITS = [
    ("v99", b'v99\n{"nextBatchWatermarkMs":0}', UnsupportedCheckpointVersion, "version v99"),
    ("broken json", b'v1\n{"nextBatchWatermarkMs":0]', CheckpointCorrupt, "not valid JSON"),
    ("json array", b'v1\n["nextBatchWatermarkMs", 0]', CheckpointCorrupt, "commit metadata"),
    ("no version", b'{"nextBatchWatermarkMs":0}\n\n\n', CheckpointCorrupt, "version header"),
]


@pytest.mark.parametrize(
    ("case", "data", "error", "problem"),
    FULL_SIZE_BAD_COMMITS,
    ids=[c[0] for c in FULL_SIZE_BAD_COMMITS],
)
def test_full_size_damaged_commit_is_named(
    tmp_path: Path, case: str, data: bytes, error: type[Exception], problem: str
) -> None:
    assert len(data) >= MIN_COMMIT_SIZE
    location = _copy(tmp_path)
    (location / "commits" / "6").write_bytes(data)
    with pytest.raises(error) as raised:
        CheckpointReader(LocalStorage(), str(location)).read(history=1)
    assert str(location / "commits" / "6") in str(raised.value)
    assert problem in str(raised.value)


def test_valid_commit_is_read_once_per_committed_batch(tmp_path: Path) -> None:
    location = _copy(tmp_path)
    storage = LocalStorage()
    reader = CheckpointReader(storage, str(location))
    reader.read(history=1)
    # metadata, offsets/6, commits/6: a local listing carries no content hash
    assert storage.requests.by_operation == {"list": 2, "read": 3}
    storage.requests.reset()
    reader.read(history=1)
    assert storage.requests.by_operation == {"list": 2}


def test_older_damaged_commits_are_not_the_readers_business(tmp_path: Path) -> None:
    location = _copy(tmp_path)
    (location / "commits" / "3").write_bytes(b"")
    assert CheckpointReader(LocalStorage(), str(location)).read().committed_batch_id == 6


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ('{"orders":{"0":1180591620717411303424}}', "64-bit"),
        ('{"orders":{"zero":5}}', "not a partition number"),
        ('{"orders":{"0":-7}}', "negative offset -7"),
    ],
)
def test_reader_names_the_damaged_committed_offsets_file(
    tmp_path: Path, source: str, problem: str
) -> None:
    location = _copy(tmp_path)
    (location / "offsets" / "6").write_bytes(_offsets(source))
    with pytest.raises(CheckpointCorrupt) as raised:
        CheckpointReader(LocalStorage(), str(location)).read(history=1)
    assert f"{location / 'offsets' / '6'}: source '0' topic 'orders'" in str(raised.value)
    assert problem in str(raised.value)


# -- JSON that only a hostile hand writes: every failure names the file -------------------------

HOSTILE_JSON = [
    ("nested 100k deep", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("5,000-digit number", '{"orders":{"0":' + "9" * 5000 + "}}", "not valid JSON"),
    ("nested object in metadata", None, "not valid JSON"),
]


@pytest.mark.parametrize(
    ("case", "source", "problem"), HOSTILE_JSON, ids=[c[0] for c in HOSTILE_JSON]
)
def test_hostile_json_is_a_typed_error_naming_the_file(
    case: str, source: str | None, problem: str
) -> None:
    if source is None:  # the metadata line itself is the hostile part
        data = ("v1\n" + "{" * 50_000 + "\n" + '{"orders":{"0":1}}').encode()
    else:
        data = _offsets(source)
    with pytest.raises(CheckpointCorrupt) as raised:
        parse_offsets(data, "s3a://b/ck/offsets/6", batch_id=6)
    assert "s3a://b/ck/offsets/6" in str(raised.value)
    assert problem in str(raised.value)
    assert len(str(raised.value)) < 400  # the document is not echoed whole


def test_batch_names_beyond_a_java_long_are_not_batches(tmp_path: Path) -> None:
    # Spark parses log file names as a Java long and skips what does not parse.
    location = _copy(tmp_path)
    for name in ("9223372036854775808", "99999999999999999999999", "9" * 5000):
        for log in ("offsets", "commits"):
            (location / log / name[:200]).write_bytes((location / log / "6").read_bytes())
    state = CheckpointReader(LocalStorage(), str(location)).read(history=1)
    assert state.committed_batch_id == 6
    assert parse_batch_id("9223372036854775807") == INT64_MAX
    assert parse_batch_id("9" * 5000) is None


def test_names_spark_never_reads_as_a_batch_are_not_batches(tmp_path: Path) -> None:
    # A Java long parses "0012" and "+12", but Spark reads batch 12 from the file "12": a
    # copy left as offsets/0012 was taken for the newest batch (12, with its rates and
    # real-time shape measured from it).
    location = _copy(tmp_path)
    for name in ("0012", "+12", "012", "\u0661\u0662"):
        for log in ("offsets", "commits"):
            (location / log / name).write_bytes((location / log / "6").read_bytes())
    state = CheckpointReader(LocalStorage(), str(location)).read(history=3)
    assert state.committed_batch_id == 6 and state.in_flight is None
    assert [parse_batch_id(n) for n in ("0", "10", "0012", "+12")] == [0, 10, None, None]


def test_an_offsets_file_too_big_to_be_spark_s_is_not_read(tmp_path: Path) -> None:
    location = _copy(tmp_path)
    with (location / "offsets" / "6").open("ab") as handle:
        handle.truncate(MAX_LOG_FILE_SIZE + 1)  # sparse: no disk used
    storage = LocalStorage()
    with pytest.raises(CheckpointCorrupt) as raised:
        CheckpointReader(storage, str(location)).read(history=1)
    assert f"{location / 'offsets' / '6'}: 67,108,865 bytes" in str(raised.value)
    assert storage.requests.by_operation["read"] <= 1  # metadata only, never offsets/6
