"""A Spark 3.5 driver the test bed runs in the pyspark 3.5 venv (scripts/setup_spark35.sh).

Not imported by the suite: ``testbed/spark35.py`` starts it with that venv's python and sends it
one JSON command per line on stdin (or on a FIFO named by the third argument); each answer is
one line on stdout starting with ``REPLY`` (anything else there is Spark's or py4j's chatter).
Standard library and pyspark only (the ``scan`` command excepted).

Commands (``{"cmd": ..., ...}``):

- ``stateful``: start a windowed count with a watermark (RocksDB state store, append mode,
  noop sink) on ``topic`` into ``checkpoint``; answers at once.
- ``available_now``: run a ``Trigger.AvailableNow`` query on ``topic`` into ``checkpoint`` until
  it ends; answers with its progress.
- ``relay``: start a Kafka-to-Kafka query ``name`` from ``topic`` to ``sink`` into
  ``checkpoint`` (``starting``: its startingOffsets, default earliest; ``max_offsets`` per
  batch): each record becomes key ``"<partition>:<offset>"``, value ``"<tag>:<value>"``, after
  ``nap_ms`` in its task from offset ``nap_from`` on (a JVM sleep: no Python worker); answers
  at once.
- ``stop``: stop the query named ``name``; answers with its progress.
- ``files``: the text of every file under ``path`` (relative path -> text), read with Spark's
  own Hadoop client (as the driver logged in: an independent reading of a checkpoint).
- ``scan``: ``airflow_sparklag.spark_scan.main(argv)`` in this driver (a driver of the main
  venv, where the package is installed); answers with its exit code and summary.
- ``quit``: stop everything and exit.

The first answer names the Spark version and the Hadoop user (``user``; ``keytab``: whether it
logged in from a keytab, as spark-submit does with ``--principal``/``--keytab``). Under
spark-submit (testbed/spark_kerberos.py) the session takes spark-submit's configuration.

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

    def relay(self, command: dict[str, Any]) -> dict[str, Any]:
        value = f"concat('{command['tag']}:', CAST(value AS STRING))"
        if command.get("nap_ms"):
            nap = f"reflect('java.lang.Thread', 'sleep', CAST({int(command['nap_ms'])} AS BIGINT))"
            nap = f"IF(offset >= {int(command.get('nap_from', 0))}, substr({nap}, 0, 0), '')"
            value = f"concat({value}, coalesce({nap}, ''))"
        reader = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", command["bootstrap"])
            .option("subscribe", command["topic"])
            .option("startingOffsets", command.get("starting", "earliest"))
        )
        if command.get("max_offsets"):
            reader = reader.option("maxOffsetsPerTrigger", str(command["max_offsets"]))
        query = (
            reader.load()
            .selectExpr(
                "concat(CAST(partition AS STRING), ':', CAST(offset AS STRING)) AS key",
                f"{value} AS value",
            )
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", command["bootstrap"])
            .option("topic", command["sink"])
            .option("checkpointLocation", command["checkpoint"])
            .queryName(command["name"])
            .start()
        )
        self.queries[command["name"]] = query
        return {"id": query.id}

    def files(self, command: dict[str, Any]) -> dict[str, Any]:
        jvm = self.spark.sparkContext._jvm
        root = jvm.org.apache.hadoop.fs.Path(command["path"])
        fs = root.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
        found, prefix = {}, len(fs.makeQualified(root).toString()) + 1
        listing = fs.listFiles(root, True)
        while listing.hasNext():
            path = listing.next().getPath()
            stream = fs.open(path)
            try:
                text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
            finally:
                stream.close()
            found[path.toString()[prefix:]] = text
        return {"files": found}

    def scan(self, command: dict[str, Any]) -> dict[str, Any]:
        import contextlib
        import io

        from airflow_sparklag import spark_scan

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = spark_scan.main(command["argv"])
        return {"code": code, "summary": json.loads(out.getvalue().strip().splitlines()[-1])}

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
    # Commands from stdin, or from a FIFO (argv[3]) opened read-write: it never blocks here
    # and never ends while the test bed holds its own end.
    commands = os.fdopen(os.open(sys.argv[3], os.O_RDWR), "r") if len(sys.argv) > 3 else sys.stdin
    spark = session(classpath, workdir)
    driver = Driver(spark)
    user = spark.sparkContext._jvm.org.apache.hadoop.security.UserGroupInformation.getLoginUser()
    reply(
        {
            "ok": True,
            "spark": spark.version,
            "user": user.getUserName(),
            "keytab": user.isFromKeytab(),
        }
    )
    for line in commands:
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
