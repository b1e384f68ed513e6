"""A PySpark Structured Streaming job that reads Kafka topics, for the example pipelines.

    python kafka_stream_job.py --bootstrap broker:9092 --topics orders \
        --checkpoint s3a://lake/checkpoints/orders --version v2

The same script runs under spark-submit (give the Kafka connector with --packages there).
It prints ``QUERY_STARTED <id>`` once the query runs, and stops the query cleanly on SIGTERM
(the batch in flight is finished or abandoned, never half-committed), so a deploy can stop an
old version and start a new one on the same checkpoint.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--topics", required=True, help="comma-separated topics")
    parser.add_argument("--checkpoint", required=True, help="checkpoint location")
    parser.add_argument("--version", default="v1", help="job version (query name suffix)")
    parser.add_argument("--sink", default="noop", choices=["noop", "parquet"])
    parser.add_argument("--output", help="output path for the parquet sink")
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--max-offsets-per-trigger", type=int)
    parser.add_argument(
        "--batch-sleep",
        type=float,
        default=0.0,
        help="tests: every task of a batch pauses SECONDS before its first row, so a batch stays "
        "in flight (offsets/N written, commits/N not yet) at least that long; 0 (default): off",
    )
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        help="Spark startingOffsets for a NEW checkpoint: earliest, latest or a JSON "
        '{"topic":{"0":42}} (e.g. a migration\'s result); ignored when the checkpoint has batches',
    )
    parser.add_argument(
        "--classpath", default="", help="extra driver classpath (connector jars), local runs"
    )
    parser.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[1]"))
    return parser.parse_args(argv)


def _pause_once_per_task(seconds: float):  # type: ignore[no-untyped-def]
    """A filter that keeps every row; its first call in each task sleeps ``seconds``."""
    from pyspark.sql.functions import udf

    def pause(_value: object) -> bool:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None  # always set inside a task
        task = (context.stageId(), context.partitionId(), context.attemptNumber())
        seen = pause.__dict__.setdefault("tasks", set())  # per Python worker (reused)
        if task not in seen:
            seen.add(task)
            time.sleep(seconds)
        return True

    return udf(pause, "boolean", useArrow=False).asNondeterministic()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(f"kafka-stream-{args.version}")
        .master(args.master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
    )
    if args.classpath:
        builder = builder.config("spark.driver.extraClassPath", args.classpath).config(
            "spark.executor.extraClassPath", args.classpath
        )
    for key, value in os.environ.items():  # s3a and other Hadoop settings, e.g. from a deploy
        if key.startswith("SPARK_HADOOP_"):
            name = key[len("SPARK_HADOOP_") :].lower().replace("__", "-").replace("_", ".")
            builder = builder.config(f"spark.hadoop.{name}", value)
    if args.batch_sleep > 0:  # the pause is a Python UDF: its workers need this interpreter
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topics)
        .option("startingOffsets", args.starting_offsets)
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    rows = reader.load().selectExpr(
        "topic", "partition", "offset", "CAST(value AS STRING) AS value", "timestamp"
    )
    if args.batch_sleep > 0:
        rows = rows.filter(_pause_once_per_task(args.batch_sleep)("partition"))
    writer = (
        rows.writeStream.option("checkpointLocation", args.checkpoint)
        .queryName(f"kafka_stream_{args.version}")
        .trigger(processingTime=f"{args.trigger_seconds} seconds")
    )
    if args.sink == "parquet":
        writer = writer.format("parquet").option("path", args.output)
    else:
        writer = writer.format("noop")
    query = writer.start()
    print(f"QUERY_STARTED {query.id} version={args.version}", flush=True)

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    # Short waits so the SIGTERM handler runs promptly (it runs between Python bytecodes).
    while not stopping and query.isActive:
        query.awaitTermination(0.5)
    if query.exception() is not None:
        print(f"QUERY_FAILED {query.exception()}", file=sys.stderr, flush=True)
        return 1
    query.stop()
    spark.stop()
    print(f"QUERY_STOPPED {time.time():.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
