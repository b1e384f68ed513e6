"""A small library of real Spark Structured Streaming jobs that read Kafka.

Each returns a started StreamingQuery (or, for `run_available_now`, waits until the query has
consumed everything available and stopped). The checkpoint location can be a local path,
`s3a://bucket/prefix` or `hdfs://host:port/path`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


def kafka_stream(
    spark: SparkSession,
    bootstrap: str,
    *,
    topics: list[str] | None = None,
    pattern: str | None = None,
    starting: str = "earliest",
    options: dict[str, str] | None = None,
    name: str | None = None,
) -> DataFrame:
    reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    if pattern:
        reader = reader.option("subscribePattern", pattern)
    else:
        reader = reader.option("subscribe", ",".join(topics or []))
    reader = reader.option("startingOffsets", starting)
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    if name:  # Spark >= 4.2: named sources (sources/<name>/0, offsets v2 lines "<name>:...")
        reader = reader.name(name)
    return reader.load()


def start_query(
    df: DataFrame,
    checkpoint: str,
    *,
    sink: str = "noop",
    path: str | None = None,
    trigger: dict[str, Any] | None = None,
    foreach_batch: Callable[[DataFrame, int], None] | None = None,
    query_name: str | None = None,
    options: dict[str, str] | None = None,
) -> StreamingQuery:
    """Starts `df` into `sink` ("noop", "parquet" (needs path), "foreachBatch")."""
    writer = df.writeStream.option("checkpointLocation", checkpoint)
    if sink == "foreachBatch":
        assert foreach_batch is not None, "foreachBatch sink needs a function"
        writer = writer.foreachBatch(foreach_batch)
    else:
        writer = writer.format(sink)
        if path:
            writer = writer.option("path", path)
    for key, value in (options or {}).items():
        writer = writer.option(key, value)
    if query_name:
        writer = writer.queryName(query_name)
    writer = writer.trigger(**(trigger or {"processingTime": "1 second"}))
    return writer.start()


def run_available_now(
    df: DataFrame,
    checkpoint: str,
    *,
    sink: str = "noop",
    path: str | None = None,
    timeout: float = 180.0,
    **kwargs: Any,
) -> None:
    """Consumes everything available now, then stops: the checkpoint then holds the end offsets."""
    query = start_query(
        df, checkpoint, sink=sink, path=path, trigger={"availableNow": True}, **kwargs
    )
    finished = query.awaitTermination(timeout)
    if not finished:
        query.stop()
        raise TimeoutError(f"availableNow query on {checkpoint} did not finish in {timeout}s")
    if query.exception() is not None:
        raise RuntimeError(f"query on {checkpoint} failed: {query.exception()}")


def wait_for_batches(query: StreamingQuery, count: int, timeout: float = 120.0) -> None:
    """Waits until `query` has completed at least `count` batches with data."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        done = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]
        if len(done) >= count:
            return
        time.sleep(0.5)
    raise TimeoutError(f"query did not complete {count} batches with data in {timeout}s")


def select_value(df: DataFrame) -> DataFrame:
    """The columns the parquet jobs keep: topic, partition, offset and the value as text."""
    return df.selectExpr(
        "topic", "partition", "offset", "CAST(value AS STRING) AS value", "timestamp"
    )


# --- helpers for the lag scenario tests (appended) -----------------------------------------------


def count_from(
    bootstrap: str,
    positions: dict[str, dict[int, int]],
    *,
    read_committed: bool = False,
    timeout: float = 30.0,
) -> dict[tuple[str, int], int]:
    """Records a plain consumer reads from `positions` (topic -> partition -> offset) to the end.

    Independent ground truth for lag: assign() at each offset (an offset below the log start
    resets to the earliest record, like a consumer after retention), read until end of
    partition, count data records. Under `read_committed` transaction markers and aborted or
    open transactions are not delivered, exactly as Spark's read_committed source sees them.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"sparklag-truth-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
    )
    counts = {(t, p): 0 for t, parts in positions.items() for p in parts}
    pending = set(counts)
    try:
        consumer.assign(
            [TopicPartition(t, p, o) for t, parts in positions.items() for p, o in parts.items()]
        )
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                key = (message.topic(), message.partition())
                err = message.error()
                if err is not None:
                    if err.name() == "_PARTITION_EOF":
                        pending.discard(key)
                        continue
                    raise RuntimeError(f"consumer error on {key}: {err}")
                counts[key] += 1
    finally:
        consumer.close()
    if pending:
        raise TimeoutError(f"no end of partition within {timeout}s for {sorted(pending)}")
    return counts


def transactional_producer(bootstrap: str, transactional_id: str):  # type: ignore[no-untyped-def]
    """A confluent_kafka Producer with transactions initialised (begin/commit/abort are yours)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            "transaction.timeout.ms": 120000,
        }
    )
    producer.init_transactions(30)
    return producer


def produce_in_transaction(
    producer: Any, topic: str, n: int, *, partition: int, commit: bool | None = True
) -> None:
    """n records to one partition in one transaction; commit=None leaves it OPEN."""
    producer.begin_transaction()
    for i in range(n):
        producer.produce(topic, value=f"tx-{i}".encode(), partition=partition)
    producer.flush(30)
    if commit is True:
        producer.commit_transaction(30)
    elif commit is False:
        producer.abort_transaction(30)


def delete_records(admin: Any, topic: str, before: dict[int, int]) -> None:
    """AdminClient.delete_records: move each partition's log start up to `before[partition]`."""
    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.monotonic() + 20
    while True:
        admin.list_topics(topic, timeout=10)  # refreshes the client's leader cache
        futures = admin.delete_records(
            [TopicPartition(topic, p, off) for p, off in before.items()], request_timeout=20
        )
        try:
            for future in futures.values():
                future.result(timeout=30)
            return
        except KafkaException:
            # Right after create_partitions the admin client's metadata may not know the new
            # partition's leader yet ("No leaders found"): retry until it does.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def stream_rows(query: StreamingQuery) -> int:
    """Input rows over the query's retained progress reports."""
    return sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)


def run_available_now_rows(df: DataFrame, checkpoint: str, timeout: float = 180.0) -> int:
    """Like `run_available_now` (noop sink), but returns how many rows the run read."""
    query = start_query(df, checkpoint, trigger={"availableNow": True})
    try:
        if not query.awaitTermination(timeout):
            raise TimeoutError(f"availableNow query on {checkpoint} did not finish in {timeout}s")
        if query.exception() is not None:
            raise RuntimeError(f"query on {checkpoint} failed: {query.exception()}")
        return stream_rows(query)
    finally:
        query.stop()


def wait_until(predicate: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise TimeoutError(f"not reached within {timeout}s: {what}")


def stopped_after_one_batch(
    spark: SparkSession, kafka: Any, checkpoint: str, retention_s: float, segment_s: float = 2
) -> str:
    """A new topic kept ``retention_s`` (segments of ``segment_s``) and a query on it that
    read ONE batch (20 records) into ``checkpoint`` and stopped; returns the topic."""
    import uuid

    topic = kafka.create_topic(
        f"one-batch-{uuid.uuid4().hex[:8]}",
        partitions=1,
        config={
            "retention.ms": str(int(retention_s * 1000)),
            "segment.ms": str(int(segment_s * 1000)),
        },
    )
    kafka.produce(topic, 20)
    run_available_now(kafka_stream(spark, kafka.bootstrap, topics=[topic]), checkpoint)
    return topic


@contextlib.contextmanager
def trickle(kafka: Any, topic: str, rate: float) -> Iterator[None]:
    """Produces one record to ``topic`` every ``1 / rate`` s (a few a second: each send is
    acknowledged before the next) until the block ends: production that goes on."""
    stop = threading.Event()

    def keep_producing() -> None:
        i = 1000
        while not stop.wait(1.0 / rate):
            kafka.produce(topic, 1, start=i)
            i += 1

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    try:
        yield
    finally:
        stop.set()
        producer.join(10)


def stop_quietly(query: StreamingQuery | None) -> None:
    if query is not None and query.isActive:
        query.stop()


def timestamps_at(
    bootstrap: str, positions: dict[str, dict[int, int]], timeout: float = 30.0
) -> dict[tuple[str, int], int]:
    """Timestamp (ms) of the record at each exact (topic, partition, offset) given."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"sparklag-truth-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    wanted = {(t, p): o for t, parts in positions.items() for p, o in parts.items()}
    found: dict[tuple[str, int], int] = {}
    try:
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in wanted.items()])
        deadline = time.monotonic() + timeout
        while len(found) < len(wanted) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=100, timeout=0.5):
                if message.error() is not None:
                    raise RuntimeError(f"consumer error: {message.error()}")
                key = (message.topic(), message.partition())
                if key not in found and message.offset() == wanted[key]:
                    found[key] = message.timestamp()[1]
    finally:
        consumer.close()
    if len(found) < len(wanted):
        raise TimeoutError(f"records not read: {sorted(set(wanted) - set(found))}")
    return found
