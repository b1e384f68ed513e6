"""Spark's own checkpoint test files: what our reader reads against what Spark itself reads.

Spark's test jars ship the checkpoints and log files its compatibility tests restart from,
written by Spark 2.1.0 to 4.0.1: ``spark-sql_2.13`` and ``spark-sql-kafka-0-10_2.13`` with the
``tests`` classifier, at 4.2.0 and 3.5.7, the test bed's two Spark versions (scripts/setup.sh
fetches them: testbed/jars/spark-tests and spark35-tests).

- Every checkpoint directory is read by ``CheckpointReader`` and each of its offsets, commits
  and ``sources/<id>/0`` files by the parsers, and compared file by file with what Spark's own
  ``OffsetSeqLog``, ``CommitLog``, ``StreamMetadata`` and ``KafkaSourceInitialOffsetWriter``
  read from the same files (py4j in the test bed's one SparkSession, in one pass).
- The loose files that Spark's suites read themselves are compared with the values those suites
  assert (each named where it is used).
- Status and history on every checkpoint: the one with a Kafka source against the records
  Spark's test reads from it, the others UNKNOWN (no Kafka source), alike in both.
- The Spark 2.1.0 initial-offset file starts a real query, as Spark's test does, and
  ``sparklag history`` counts what that query's first batch read.

Not read: ``state/`` (the reader never lists it), file sinks' logs (``_spark_metadata``: a
sink's output, not a checkpoint) and query event logs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.checkpoint_files import (
    BatchOffsets,
    SourceOffset,
    parse_batch_id,
    parse_commit,
    parse_metadata,
    parse_offsets,
    parse_source_start,
)
from airflow_sparklag.errors import (
    CheckpointCorrupt,
    SparkLagError,
    UnsupportedCheckpointVersion,
)
from airflow_sparklag.history import history
from airflow_sparklag.model.verdict import NO_KAFKA_SOURCE
from airflow_sparklag.monitor import check
from airflow_sparklag.session import Session
from airflow_sparklag.storage import open_storage
from testbed.paths import JARS, jar_dir

pytestmark = pytest.mark.testbed

REPO = Path(__file__).resolve().parents[2]
SPARKLAG = Path(sys.executable).parent / "sparklag"
# Spark version -> the test bed component holding its test jars
VERSIONS = {"4.2.0": "spark-tests", "3.5.7": "spark35-tests"}
KAFKA_CHECKPOINT = "structured-streaming/checkpoint-version-2.4.3-kafka-include-headers-default"
INITIAL_2_1_0 = "kafka-source-initial-offset-version-2.1.0.bin"
INITIAL_FUTURE = "kafka-source-initial-offset-future-version.bin"


def _wanted(name: str) -> bool:
    """The jar members this module reads: checkpoint resources without their state."""
    if name.endswith("/") or "/state/" in name:
        return False
    return name.startswith("structured-streaming/") or name.startswith("kafka-source-")


def _members() -> dict[str, str]:
    """Resource path -> the Spark version whose jar has it (4.2.0 first), over every test jar
    fetched; empty when none is (test_the_test_jars_are_fetched says so)."""
    found: dict[str, str] = {}
    for version, component in VERSIONS.items():
        for jar in sorted((JARS / component).glob("*-tests.jar")):
            with zipfile.ZipFile(jar) as archive:
                for name in archive.namelist():
                    if _wanted(name):
                        found.setdefault(name, version)
    return found


MEMBERS = _members()
# Every directory holding an offsets log file: a checkpoint (its relative path -> Spark version)
CHECKPOINTS = {
    name.rsplit("/offsets/", 1)[0]: version
    for name, version in sorted(MEMBERS.items())
    if "/offsets/" in name and parse_batch_id(name.rsplit("/", 1)[1]) is not None
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The resources, extracted once: ``<root>/<relative path>``."""
    root = tmp_path_factory.mktemp("spark-test-corpus")
    for version, component in VERSIONS.items():
        for jar in sorted(jar_dir(component).glob("*-tests.jar")):
            with zipfile.ZipFile(jar) as archive:
                names = [n for n in archive.namelist() if MEMBERS.get(n) == version]
                archive.extractall(root, names)
    return root


def test_the_test_jars_are_fetched() -> None:
    for component in VERSIONS.values():
        assert len(list(jar_dir(component).glob("*-tests.jar"))) == 2, component
    # 40 checkpoints in 4.2.0's jar, and 3.5.4's, which only 3.5.7's has
    assert len(CHECKPOINTS) >= 41
    assert CHECKPOINTS["structured-streaming/checkpoint-version-3.5.4"] == "3.5.7"
    assert KAFKA_CHECKPOINT in CHECKPOINTS


# -- what Spark reads ------------------------------------------------------------------------


# An offsets file: (log version, source id -> offset JSON or None, batchTimestampMs, watermark)
Batch = tuple[int, dict[str, str | None], int | None, int | None]


@dataclass(frozen=True)
class SparkRead:
    """One checkpoint as Spark's own classes read it."""

    offsets: dict[int, Batch]  # batch id -> what its offsets file holds
    commits: tuple[int, ...]
    query_id: str | None
    source_starts: dict[str, str]  # source id -> KafkaSourceInitialOffsetWriter's JSON


def _option_json(option: Any) -> str | None:
    return str(option.get().json()) if option.isDefined() else None


def _spark_batch(seq: Any, scala: Any) -> Batch:
    if seq.version() == 2:
        sources = {str(k): _option_json(v) for k, v in scala.asJava(seq.offsetsMap()).items()}
    else:
        sources = {str(i): _option_json(o) for i, o in enumerate(scala.asJava(seq.offsets()))}
    meta = seq.metadataOpt()
    if not meta.isDefined():
        return seq.version(), sources, None, None
    return seq.version(), sources, meta.get().batchTimestampMs(), meta.get().batchWatermarkMs()


def _spark_start(spark: Any, path: Path) -> str:
    """A Kafka source's ``sources/<id>/0`` as Spark reads it: KafkaSourceOffset's JSON."""
    kafka010 = spark._jvm.org.apache.spark.sql.kafka010
    log = kafka010.KafkaSourceInitialOffsetWriter(spark._jsparkSession, str(path.parent))
    return str(log.get(int(path.name)).get().json())


def _spark_reads(spark: Any, root: Path) -> SparkRead:
    """Spark's OffsetSeqLog, CommitLog, StreamMetadata and Kafka initial-offset log on ``root``
    (a scratch copy: Spark creates the log directories it opens)."""
    jvm, session = spark._jvm, spark._jsparkSession
    logs = jvm.org.apache.spark.sql.execution.streaming.checkpointing
    scala = jvm.scala.jdk.javaapi.CollectionConverters
    offsets_log = logs.OffsetSeqLog(session, str(root / "offsets"), False)
    offsets = {}
    for batch_id in offsets_log.listBatches():  # a range: gaps read as None
        found = offsets_log.get(batch_id)
        if found.isDefined():
            offsets[int(batch_id)] = _spark_batch(found.get(), scala)
    commit_log = logs.CommitLog(session, str(root / "commits"), False)
    commits = tuple(int(i) for i in commit_log.listBatches() if commit_log.get(i).isDefined())
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    runtime = jvm.org.apache.spark.sql.execution.streaming.runtime
    stream_metadata = getattr(getattr(runtime, "StreamMetadata$"), "MODULE$")
    metadata = stream_metadata.read(jvm.org.apache.hadoop.fs.Path(str(root / "metadata")), hadoop)
    starts = {start.parent.name: _spark_start(spark, start) for start in root.glob("sources/*/0")}
    query_id = str(metadata.get().id()) if metadata.isDefined() else None
    return SparkRead(offsets, commits, query_id, starts)


@pytest.fixture(scope="module")
def spark_reads(spark: Any, corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Relative path -> SparkRead, for every checkpoint; one pass in the one SparkSession."""
    scratch = tmp_path_factory.mktemp("spark-reads")
    reads = {}
    for relative in CHECKPOINTS:
        copy = scratch / relative
        shutil.copytree(corpus / relative, copy, ignore=shutil.ignore_patterns("state"))
        reads[relative] = _spark_reads(spark, copy)
    return reads


@pytest.fixture(scope="module")
def spark_starts(spark: Any, corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The two loose initial-offset files, each as ``sources/0/0`` (where Spark's tests put
    them), as Spark reads them: KafkaSourceOffset's JSON, or Spark's error message."""
    from py4j.protocol import Py4JJavaError

    read: dict[str, str] = {}
    for name in (INITIAL_2_1_0, INITIAL_FUTURE):
        start = tmp_path_factory.mktemp("spark-start") / "sources" / "0" / "0"
        start.parent.mkdir(parents=True)
        shutil.copyfile(corpus / name, start)
        try:
            read[name] = _spark_start(spark, start)
        except Py4JJavaError as error:
            read[name] = str(error.java_exception.getMessage())
    return read


# -- what we read ------------------------------------------------------------------------------


def _ours(batch: BatchOffsets) -> Batch:
    sources = {s.source_id: None if s.kind == "none" else s.raw.strip() for s in batch.sources}
    return batch.version, sources, batch.batch_timestamp_ms, batch.watermark_ms


def _kafka(source: SourceOffset) -> dict[str, dict[int, int]]:
    assert source.kind == "kafka" and source.kafka is not None, source
    return {topic: dict(partitions) for topic, partitions in source.kafka.items()}


def _spark_kafka(offset_json: str) -> dict[str, dict[int, int]]:
    """KafkaSourceOffset's JSON, as Spark's JsonUtils reads it."""
    document = json.loads(offset_json)
    return {t: {int(p): o for p, o in parts.items()} for t, parts in document.items()}


@pytest.mark.parametrize("relative", sorted(CHECKPOINTS))
def test_every_checkpoint_reads_as_spark_reads(
    relative: str, corpus: Path, spark_reads: dict[str, SparkRead]
) -> None:
    spark = spark_reads[relative]
    location = str(corpus / relative)
    state = CheckpointReader(open_storage(location), location).read(history=1000)
    assert state.offsets_ids == tuple(sorted(spark.offsets))
    assert state.commit_ids == spark.commits
    assert state.query_id == spark.query_id
    committed = max(spark.commits, default=None)
    assert state.committed_batch_id == committed
    newest = max(spark.offsets)
    in_flight = newest if committed is None or newest > committed else None
    assert (None if state.in_flight is None else state.in_flight.batch_id) == in_flight
    # every offsets file, not only those a read keeps: the same offsets, times and sources
    for batch_id, read_by_spark in spark.offsets.items():
        path = corpus / relative / "offsets" / str(batch_id)
        batch = parse_offsets(path.read_bytes(), str(path))
        assert _ours(batch) == read_by_spark, path
        for source in batch.sources:
            if source.kind == "kafka":
                assert _kafka(source) == _spark_kafka(source.raw), path
    assert [b.batch_id for b in state.history] == [
        i for i in state.commit_ids if i in spark.offsets
    ]
    for batch_id in spark.commits:
        path = corpus / relative / "commits" / str(batch_id)
        assert parse_commit(path.read_bytes(), str(path)) in (1, 2)
    for source_id, start_json in spark.source_starts.items():
        path = corpus / relative / "sources" / source_id / "0"
        start = parse_source_start(path.read_bytes(), str(path), source_id)
        assert _kafka(start) == _spark_kafka(start_json)


def test_only_one_checkpoint_has_a_kafka_source(spark_reads: dict[str, SparkRead]) -> None:
    """The Kafka one is checked against Kafka below; the others say UNKNOWN, no Kafka source."""
    with_starts = [relative for relative, read in spark_reads.items() if read.source_starts]
    assert with_starts == [KAFKA_CHECKPOINT]


def test_status_and_history_agree_without_a_kafka_source(corpus: Path, kafka: Any) -> None:
    """Every checkpoint without a Kafka source: status's verdict is UNKNOWN, no Kafka source,
    and history's is the same with no point (it said "lag 0" at each batch)."""
    with Session(kafka_config={"bootstrap.servers": kafka.bootstrap}) as session:
        for relative in sorted(set(CHECKPOINTS) - {KAFKA_CHECKPOINT}):
            location = str(corpus / relative)
            result = check(session, location)
            past = history(session, location)
            assert result.verdict == NO_KAFKA_SOURCE, relative
            assert (past.verdict, past.unknown, past.points, past.approximations) == (
                NO_KAFKA_SOURCE,
                NO_KAFKA_SOURCE.reason,
                (),
                (),
            ), relative


def _sparklag(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI of this checkout (its entry point imports the package from PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [str(SPARKLAG), *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_history_without_a_kafka_source_says_unknown_and_exits_3(corpus: Path, kafka: Any) -> None:
    location = str(corpus / "structured-streaming/checkpoint-version-3.5.1-streaming-join")
    status = _sparklag("status", "-b", kafka.bootstrap, location)
    shown = _sparklag("history", "-b", kafka.bootstrap, location)
    as_json = _sparklag("history", "--json", "-b", kafka.bootstrap, location)
    assert (status.returncode, shown.returncode, as_json.returncode) == (3, 3, 3), shown.stderr
    said = "health      UNKNOWN: the query has no Kafka source"
    assert said in status.stdout and said in shown.stdout
    assert "lag" not in shown.stdout
    (document,) = json.loads(as_json.stdout)["results"]
    assert document["verdict"] == NO_KAFKA_SOURCE.to_dict()
    assert (document["points"], document["unknown"]) == ([], NO_KAFKA_SOURCE.reason)
    assert document["approximations"] == []


# -- loose files, with the values Spark's own suites assert --------------------------------------


def _file(corpus: Path, name: str) -> tuple[bytes, str]:
    path = corpus / name
    return path.read_bytes(), str(path)


def _offset_line(corpus: Path, name: str) -> SourceOffset:
    """A bare offset as Spark's suites read it (SerializedOffset): the source line of an
    offsets file, which is where such a line lives."""
    data, path = _file(corpus, name)
    (source,) = parse_offsets(b"v1\n{}\n" + data.strip(), path, batch_id=0).sources
    return source


def test_offsets_log_of_spark_2_1_0(corpus: Path) -> None:
    # OffsetSeqLogSuite "read Spark 2.1.0 log format"
    data, path = _file(corpus, "structured-streaming/offset-log-version-2.1.0/0")
    batch = parse_offsets(data, path)
    assert (batch.batch_id, batch.batch_timestamp_ms, batch.watermark_ms) == (0, 1480981499528, 0)
    files, kafka = batch.sources
    assert (files.kind, files.raw) == ("other", '{"logOffset":345}')
    assert _kafka(kafka) == {"topic-0": {0: 1}}


def test_offset_map_v2(corpus: Path) -> None:
    # OffsetSeqLogSuite "OffsetMap golden file compatibility test - VERSION_2 format"
    log = corpus / "structured-streaming/offset-map"
    batches = [parse_offsets(p.read_bytes(), str(p)) for p in sorted(log.iterdir())]
    newest = batches[-1]
    assert (newest.batch_id, newest.version) == (3, 2)
    assert [(s.source_id, s.raw) for s in newest.sources] == [("0", "3")]
    assert (newest.batch_timestamp_ms, newest.watermark_ms) == (1758651405232, 0)
    assert [b.batch_id for b in batches] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("log", "version"),
    [("testCommitLogV1", 1), ("testCommitLogV2", 2), ("testCommitLogV2-empty-unique-id", 2)],
)
def test_commit_logs(corpus: Path, log: str, version: int) -> None:
    # CommitLogSuite: v1 with nextBatchWatermarkMs 1, v2 with and without stateUniqueIds
    data, path = _file(corpus, f"structured-streaming/{log}/testCommitLog")
    assert parse_commit(data, path) == version


def test_query_metadata_of_spark_2_1_0(corpus: Path) -> None:
    # StreamMetadataSuite "read Spark 2.1.0 format" (pretty-printed JSON)
    data, path = _file(corpus, "structured-streaming/query-metadata-logs-version-2.1.0.txt")
    assert parse_metadata(data, path) == "d366a8bf-db79-42ca-b5a4-d9ca0a11d63e"


def test_kafka_offset_of_spark_2_1_0(corpus: Path) -> None:
    # KafkaSourceOffsetSuite "read Spark 2.1.0 offset format"
    source = _offset_line(corpus, "kafka-source-offset-version-2.1.0.txt")
    assert _kafka(source) == {"topic1": {0: 456, 1: 789}, "topic2": {0: 0}}


@pytest.mark.parametrize("form", ["json", "long"])
def test_file_source_offsets_of_spark_2_1_0(corpus: Path, form: str) -> None:
    # FileStreamSourceSuite: both forms read as FileStreamSourceOffset(345); not Kafka
    source = _offset_line(
        corpus, f"structured-streaming/file-source-offset-version-2.1.0-{form}.txt"
    )
    assert source.kind == "other" and "345" in source.raw


def test_file_source_log_files(corpus: Path) -> None:
    """A file source's ``sources/0/N`` (FileStreamSourceSuite reads these as Spark 2.1.0's log):
    one JSON line per file read, never read by the reader (it reads ``sources/<id>/0`` of Kafka
    sources only). Through the start-offsets parser: another kind of source, or, with several
    lines, a typed error naming the file, as a Kafka start file with several lines is."""
    log = corpus / "structured-streaming/file-source-log-version-2.1.0"
    files = {path.name: path for path in log.iterdir()}
    assert sorted(files) == ["2.compact", "3", "4"]
    for name in ("3", "4"):
        assert parse_source_start(files[name].read_bytes(), str(files[name]), "0").kind == "other"
    with pytest.raises(CheckpointCorrupt, match=r"not valid JSON \(Extra data\)") as raised:
        parse_source_start(files["2.compact"].read_bytes(), str(files["2.compact"]), "0")
    assert str(raised.value).startswith(f"{files['2.compact']}: ")


def test_kafka_initial_offsets_of_spark_2_1_0(corpus: Path, spark_starts: dict[str, str]) -> None:
    """A length byte, then the JSON: Spark drops the first byte (KafkaMicroBatchSourceSuite
    "deserialization of initial offset written by Spark 2.1.0 (SPARK-19517)" starts from these
    offsets). Was refused as CheckpointCorrupt."""
    data, path = _file(corpus, INITIAL_2_1_0)
    start = parse_source_start(data, path, "0")
    assert _kafka(start) == {"kafka-initial-offset-2-1-0": {0: 0, 1: 1, 2: 2}}
    assert _kafka(start) == _spark_kafka(spark_starts[INITIAL_2_1_0])


def test_kafka_initial_offsets_of_a_future_version(
    corpus: Path, spark_starts: dict[str, str]
) -> None:
    """A byte, then ``v99999``: a newer Spark's, named as the offsets log's future version is
    (Spark: "maximum supported log version is v1, but encountered v99999"). Was called corrupt."""
    data, path = _file(corpus, INITIAL_FUTURE)
    with pytest.raises(UnsupportedCheckpointVersion) as raised:
        parse_source_start(data, path, "0")
    with pytest.raises(UnsupportedCheckpointVersion) as offsets_log:
        parse_offsets(data[1:], "/ck/offsets/0")
    assert (
        "maximum supported log version is v1, but encountered v99999"
        in spark_starts[INITIAL_FUTURE]
    )
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and "v99999" in message
    assert "written by a newer Spark" in message and "written by a newer Spark" in str(
        offsets_log.value
    )


def test_every_file_reads_or_names_itself(corpus: Path) -> None:
    """Every offsets, commits, ``sources/<id>/0`` and ``metadata`` file of the resources through
    its parser: a result, or a typed error naming the file."""
    parsers = {
        "offsets": lambda data, path: parse_offsets(data, path),
        "commits": lambda data, path: parse_commit(data, path),
        "sources": lambda data, path: parse_source_start(data, path, "0"),
        "metadata": lambda data, path: parse_metadata(data, path),
    }
    read = 0
    for path in sorted(p for p in corpus.rglob("*") if p.is_file()):
        if path.name == "metadata":
            role = "metadata"
        elif parse_batch_id(path.name) is not None:
            role = path.parent.name if path.parent.name in parsers else path.parent.parent.name
        else:
            continue  # .crc files, state/, loose files (read above)
        if role not in parsers:
            continue
        try:
            parsers[role](path.read_bytes(), str(path))
        except SparkLagError as exc:
            assert str(path) in str(exc)
        read += 1
    assert read >= 240  # 208 log files and 41 metadata files in 4.2.0's and 3.5.7's jars


# -- with Kafka: status and history against what Spark's tests read ------------------------------


def _fresh_topic(kafka: Any, name: str, partitions: int) -> None:
    """``name`` new and empty (the checkpoint names it; an earlier run on a shared broker may
    have left it), keeping records of any time (they are stamped as Spark's run was)."""
    admin = kafka.admin()
    if name in admin.list_topics(timeout=10).topics:
        admin.delete_topics([name], operation_timeout=20)[name].result(timeout=30)
    deadline = time.monotonic() + 30
    while True:
        try:
            kafka.create_topic(name, partitions, config={"retention.ms": "-1"})
            return
        except Exception:  # TOPIC_ALREADY_EXISTS while the deletion completes
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _produce(kafka: Any, topic: str, values: dict[int, list[str]], stamp_ms: int | None) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for partition, records in values.items():
        for value in records:
            stamp = {"timestamp": stamp_ms} if stamp_ms is not None else {}
            producer.produce(topic, value=value.encode(), partition=partition, **stamp)
    assert producer.flush(30) == 0


def _partition_lags(point: dict[str, Any]) -> dict[int, int]:
    return {p["partition"]: p["lag"] for p in point["partitions"]}


def test_kafka_checkpoint_of_spark_2_4_3(corpus: Path, kafka: Any) -> None:
    """KafkaMicroBatchSourceSuite's restart from this checkpoint: its topic held 3 records per
    partition when Spark 2.4.3 ran batch 0 (offsets 0 -> 3), then gets one more per partition,
    the 5 records the restarted query reads. Status counts those 5; history's batch 0 the 3 per
    partition that batch read (stamped before its batchTimestampMs, as in Spark's run)."""
    location = corpus / KAFKA_CHECKPOINT
    (source,) = parse_offsets(*_file(corpus, f"{KAFKA_CHECKPOINT}/offsets/0")).sources
    (topic,) = _kafka(source)
    batch_time = 1568508285207
    _fresh_topic(kafka, topic, 5)
    first = {0: ["-20", "-21", "-22"], 1: ["-10", "-11", "-12"], 2: ["0", "1", "2"]}
    _produce(
        kafka, topic, {**first, 3: ["10", "11", "12"], 4: ["20", "21", "22"]}, batch_time - 60_000
    )
    _produce(kafka, topic, {p: [str(31 + p)] for p in range(5)}, None)

    status = _sparklag("status", "--json", "-b", kafka.bootstrap, str(location))
    report = json.loads(status.stdout)["results"][0]["report"]
    (kafka_source,) = report["sources"]
    (topic_lag,) = kafka_source["topics"]
    assert {p["partition"]: (p["committed_offset"], p["log_end_offset"], p["lag"])
            for p in topic_lag["partitions"]} == {p: (3, 4, 1) for p in range(5)}  # fmt: skip
    assert report["total_lag"] == 5

    shown = _sparklag("history", "--json", "-b", kafka.bootstrap, str(location))
    assert shown.returncode == 0, shown.stderr
    batch0, now = json.loads(shown.stdout)["results"][0]["points"]
    assert (batch0["batch_id"], batch0["time_ms"], batch0["total_lag"]) == (0, batch_time, 15)
    assert _partition_lags(batch0) == {p: 3 for p in range(5)}
    assert (now["kind"], now["total_lag"]) == ("now", 5)


def test_query_started_from_spark_2_1_0_initial_offsets(
    corpus: Path, kafka: Any, spark: Any, tmp_path: Path
) -> None:
    """Spark's SPARK-19517 test, run: the 2.1.0 file as ``sources/0/0`` of a new checkpoint,
    the query reads from its offsets (0, 1, 2), not the earliest. History's batch 0 counts
    exactly the records it read (it failed on that file: CheckpointCorrupt); status the one
    record written after."""
    topic = "kafka-initial-offset-2-1-0"
    _fresh_topic(kafka, topic, 3)
    _produce(kafka, topic, {0: ["0", "1", "2"], 1: ["0", "10", "20"], 2: ["0", "100", "200"]}, None)
    checkpoint = tmp_path / "ck"
    (checkpoint / "sources" / "0").mkdir(parents=True)
    shutil.copyfile(corpus / INITIAL_2_1_0, checkpoint / "sources" / "0" / "0")
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("memory")
        .queryName("spark_19517")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the query did not finish in 120 s"
    finally:
        query.stop()
    read = sorted(int(row.value) for row in spark.table("spark_19517").collect())
    assert read == [0, 1, 2, 10, 20, 200]
    _produce(kafka, topic, {0: ["1000"]}, None)

    shown = _sparklag("history", "--json", "-b", kafka.bootstrap, str(checkpoint))
    assert shown.returncode == 0, shown.stderr
    batch0, now = json.loads(shown.stdout)["results"][0]["points"]
    assert batch0["batch_id"] == 0 and batch0["total_lag"] == len(read)
    assert {p["partition"]: p["processed_offset"] for p in batch0["partitions"]} == {
        0: 0,
        1: 1,
        2: 2,
    }
    assert now["total_lag"] == 1
    status = _sparklag("status", "--json", "-b", kafka.bootstrap, str(checkpoint))
    assert json.loads(status.stdout)["results"][0]["report"]["total_lag"] == 1
