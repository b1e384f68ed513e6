"""Scan a whole fleet of Spark streaming jobs on Spark, every hour.

    fleet_scan -> summarize

``fleet_scan`` runs ``spark_scan.py`` (the module's file) with ``spark-submit``: executors read
every checkpoint under ``params.prefix``, the driver takes one Kafka snapshot for all topics, and
two tables land under ``params.output``/<run id>: ``partitions`` (lag per job, topic, partition)
and ``jobs`` (health per job). spark-submit's output goes to the task log line by line while it
runs. The task fails when spark-submit fails, when it runs longer than ``execution_timeout``
(spark-submit is then stopped), and when the scan found no checkpoint at all: a wrong prefix or
missing read access must not look like a healthy, empty fleet. ``summarize`` logs the health
counts from the scan's one-line JSON summary.

The apache-spark provider is not a dependency of this package, so the scan runs from a plain
``@task`` through ``subprocess``. With the provider installed, the same step is::

    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    fleet_scan = SparkSubmitOperator(
        task_id="fleet_scan",
        conn_id="spark_default",            # master: yarn / k8s://... / spark://...
        application=f"{airflow_sparklag.__path__[0]}/spark_scan.py",
        py_files="/opt/airflow/sparklag.zip",  # the package, for the executors
        application_args=["--prefix", "s3a://bucket/checkpoints",
                          "--bootstrap-servers", "broker:9092",
                          "--output", "s3a://bucket/sparklag/{{ run_id }}"],
        execution_timeout=datetime.timedelta(minutes=45),
    )

(then check the number of jobs in the ``jobs`` table yourself). See docs/fleet.md for YARN,
Kubernetes, EMR and Databricks.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from airflow.providers.common.compat.sdk import DAG, Param, task

log = logging.getLogger("sparklag.fleet_scan")  # a DAG module's __name__ is mangled
# An hourly scan that has not finished in 45 minutes is stuck: stop it before the next run.
SCAN_TIMEOUT = datetime.timedelta(minutes=45)


def spark_submit_command(configured: str) -> tuple[str, dict[str, str]]:
    """The spark-submit to run and the environment it needs: the one configured when it is a
    path or on PATH, else (default ``spark-submit``) the one shipped inside pyspark."""
    import importlib.util
    import os
    import shutil
    from pathlib import Path

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the driver's lines arrive as printed
    found = shutil.which(configured)
    if found or configured != "spark-submit":
        return found or configured, env
    spec = importlib.util.find_spec("pyspark")  # finds it without importing it
    if spec is None or spec.origin is None:
        return configured, env  # fails with "not found" below, naming it
    spark_home = str(Path(spec.origin).parent)
    env.setdefault("SPARK_HOME", spark_home)
    return str(Path(spark_home) / "bin" / "spark-submit"), env


def run_streaming_output(command: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """Run ``command``, logging each output line as it comes; returns (exit code, last lines).

    The process gets its own session and is killed with its children when this task stops
    early (execution_timeout, a kill from the UI)."""
    import collections
    import os
    import signal
    import subprocess

    tail: collections.deque[str] = collections.deque(maxlen=200)
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        text=True,
        bufsize=1,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            log.info("spark-submit: %s", line)
        return process.wait(), list(tail)
    finally:
        if process.poll() is None:
            log.warning("stopping spark-submit (pid %d) and its children", process.pid)
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


def scan_summary(lines: list[str]) -> dict[str, Any] | None:
    """The scan's one-line JSON summary (the last line that is one), or None."""
    import json

    for line in reversed(lines):
        if line.startswith("{") and '"jobs"' in line:
            try:
                summary = json.loads(line)
            except ValueError:
                continue
            if isinstance(summary, dict):
                return summary
    return None


with DAG(
    dag_id="sparklag_fleet_scan",
    description="Lag and health of every Spark streaming job under a prefix, computed on Spark",
    schedule="@hourly",
    start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    tags=["sparklag", "example"],
    params={
        "prefix": Param("/tmp/sparklag/checkpoints", type="string"),
        "bootstrap_servers": Param("127.0.0.1:9092", type="string"),
        "output": Param("/tmp/sparklag/fleet-scan", type="string"),
        "master": Param("local[2]", type="string"),
        "spark_submit": Param(
            "spark-submit", type="string", description="default: on PATH, else pyspark's own"
        ),
        "extra_args": Param([], type="array", description="more spark_scan arguments"),
    },
) as dag:

    @task(execution_timeout=SCAN_TIMEOUT, retries=0)
    def fleet_scan(params: dict | None = None, run_id: str | None = None) -> dict:
        import sys

        from airflow.providers.common.compat.sdk import AirflowFailException

        from airflow_sparklag import spark_scan  # cheap: pyspark is imported inside only

        assert params is not None
        spark_submit, env = spark_submit_command(params["spark_submit"])
        command = [
            spark_submit,
            "--master",
            params["master"],
            "--name",
            "sparklag-fleet-scan",
            "--conf",
            f"spark.pyspark.python={sys.executable}",
            "--conf",
            f"spark.pyspark.driver.python={sys.executable}",
            spark_scan.__file__,  # spark-submit runs a file: the module's own
            "--prefix",
            params["prefix"],
            "--bootstrap-servers",
            params["bootstrap_servers"],
            "--output",
            f"{params['output'].rstrip('/')}/{run_id}",
            *params["extra_args"],
        ]
        log.info("running %s", " ".join(command))
        try:
            returncode, tail = run_streaming_output(command, env)
        except FileNotFoundError:
            raise AirflowFailException(
                f"{spark_submit} not found: install pyspark in the worker's environment or "
                "give the spark_submit param the path of your Spark's bin/spark-submit"
            ) from None
        if returncode != 0:
            last = "\n".join(tail[-30:])
            raise AirflowFailException(f"spark-submit failed (exit {returncode}):\n{last}")
        summary = scan_summary(tail)
        if summary is None:
            raise AirflowFailException("spark-submit ended without the scan's JSON summary line")
        if not summary.get("jobs"):
            raise AirflowFailException(
                f"no checkpoint found under {params['prefix']} (a directory with a metadata "
                "file, offsets/ or commits/, at most 4 levels down; --max-depth in "
                "extra_args goes deeper): check the prefix and that Spark can read it"
            )
        return summary

    @task
    def summarize(summary: dict) -> dict:
        unhealthy = {k: v for k, v in summary["health"].items() if k != "OK"}
        log.info(
            "%s jobs scanned in %s, not OK: %s",
            summary["jobs"],
            f"{round(summary.get('seconds') or 0)} s",
            unhealthy or "none",
        )
        return unhealthy

    summarize(fleet_scan())
