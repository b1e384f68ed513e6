"""A small library of real Spark Structured Streaming jobs that read Kafka.

Each returns a started StreamingQuery (or, for `run_available_now`, waits until the query has
consumed everything available and stopped). The checkpoint location can be a local path,
`s3a://bucket/prefix` or `hdfs://host:port/path`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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
