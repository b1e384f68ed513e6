"""A Spark 3.5 driver the test bed runs in the pyspark 3.5 venv (scripts/setup_spark35.sh).

Not imported by the suite: ``testbed/spark35.py`` starts it with that venv's python and sends it
one JSON command per line on stdin; each answer is one line on stdout starting with ``REPLY``
(anything else there is Spark's or py4j's chatter). Standard library and pyspark only: the main
venv's packages are not here.

Commands (``{"cmd": ..., ...}``):

- ``stateful``: start a windowed count with a watermark (RocksDB state store, append mode,
  noop sink) on ``topic`` into ``checkpoint``; answers at once.
- ``available_now``: run a ``Trigger.AvailableNow`` query on ``topic`` into ``checkpoint`` until
  it ends; answers with its progress.
- ``stop``: stop the query named ``name``; answers with its progress.
- ``quit``: stop everything and exit.

Progress is ``[[batch id, input rows], ...]`` of the batches the query reported.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def session(classpath: str, workdir: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("sparklag-testbed-spark35")
        .config("spark.driver.extraClassPath", classpath)
        .config("spark.driver.memory", "768m")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        .config("spark.local.dir", os.path.join(workdir, "local"))
        .config("spark.sql.warehouse.dir", os.path.join(workdir, "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={workdir} -XX:+UseSerialGC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def kafka_df(spark: Any, command: dict[str, Any]) -> Any:
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", command["bootstrap"])
        .option("subscribe", command["topic"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(command["max_offsets"]))
        .load()
    )


def progress(query: Any) -> list[list[int]]:
    return [[int(p["batchId"]), int(p["numInputRows"])] for p in query.recentProgress]


class Driver:
    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.queries: dict[str, Any] = {}

    def stateful(self, command: dict[str, Any]) -> dict[str, Any]:
        from pyspark.sql.functions import window

        counts = (
            kafka_df(self.spark, command)
            .withWatermark("timestamp", "5 seconds")
            .groupBy(window("timestamp", "10 seconds"), "partition")
            .count()
        )
        query = (
            counts.writeStream.format("noop")
            .outputMode("append")
            .queryName(command["name"])
            .option("checkpointLocation", command["checkpoint"])
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        self.queries[command["name"]] = query
        return {"id": query.id}

    def available_now(self, command: dict[str, Any]) -> dict[str, Any]:
        query = (
            kafka_df(self.spark, command)
            .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
            .writeStream.format("noop")
            .option("checkpointLocation", command["checkpoint"])
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(command.get("timeout", 180)):
            query.stop()
            raise TimeoutError(f"availableNow on {command['checkpoint']} did not end in time")
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        return {"progress": progress(query)}

    def stop(self, command: dict[str, Any]) -> dict[str, Any]:
        query = self.queries.pop(command["name"])
        query.stop()
        return {"progress": progress(query), "exception": str(query.exception() or "")}

    def status(self, command: dict[str, Any]) -> dict[str, Any]:
        query = self.queries[command["name"]]
        failure = query.exception()
        if failure is not None:
            raise RuntimeError(str(failure))
        return {"progress": progress(query), "active": query.isActive}


def reply(payload: dict[str, Any]) -> None:
    sys.stdout.write("REPLY " + json.dumps(payload) + "\n")
    sys.stdout.flush()


def main() -> None:
    classpath, workdir = sys.argv[1], sys.argv[2]
    spark = session(classpath, workdir)
    driver = Driver(spark)
    reply({"ok": True, "spark": spark.version})
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "quit":
            break
        try:
            reply({"ok": True, **getattr(driver, command["cmd"])(command)})
        except Exception as exc:
            reply({"ok": False, "error": repr(exc), "trace": traceback.format_exc()})
    for query in spark.streams.active:
        query.stop()
    spark.stop()
    reply({"ok": True, "bye": True})


if __name__ == "__main__":
    main()
