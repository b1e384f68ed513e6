"""A local SparkSession with the Kafka connector, s3a and HDFS, for tests and the demo."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.paths import JARS, jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_session(
    workdir: Path,
    *,
    s3_conf: dict[str, str] | None = None,
    master: str = "local[2]",
    memory: str = "1g",
) -> SparkSession:
    """One SparkSession per process (Spark allows one active context): small, quiet, no UI."""
    from pyspark.sql import SparkSession

    workdir.mkdir(parents=True, exist_ok=True)
    # Driver classpath rather than spark.jars: Hadoop looks file systems up with the JVM's
    # own class loader, which does not see jars added to Spark's session class loader.
    # s3a only where it was fetched: the demo's set-up (setup.sh --demo) leaves its 658 MB out.
    s3a = jars("s3a") if (JARS / "s3a" / ".complete").exists() else []
    if s3_conf is not None and not s3a:
        jars("s3a")  # says which set-up fetches them
    classpath = ":".join(jars("spark-kafka") + s3a)
    # Bind the driver to loopback: the test bed never talks to any other address.
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName("sparklag-testbed")
        .config("spark.driver.extraClassPath", classpath)
        .config("spark.executor.extraClassPath", classpath)
        .config("spark.driver.memory", memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.local.dir", str(workdir / "local"))
        .config("spark.sql.warehouse.dir", str(workdir / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={workdir} -XX:+UseSerialGC")
    )
    for key, value in (s3_conf or {}).items():
        builder = builder.config(f"spark.hadoop.{key}", value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
