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

Configuration, so that a scheduled run needs no edit of this file: the Variable
``sparklag_fleet_scan`` (a JSON object with any of the params below), then a manual run's conf
on top. With neither, the hourly run is skipped with a log line saying how to configure it
(unpausing the DAG before configuring it gives skipped runs, not failed ones)::

    airflow variables set sparklag_fleet_scan '{"prefix": "s3a://lake/checkpoints",
        "bootstrap_servers": "broker:9092", "output": "s3a://lake/sparklag/fleet-scan",
        "master": "yarn"}'

Spark's INFO lines (hundreds per run) go to the task log at DEBUG; ``spark_info_logs: true``
logs them like the rest.
"""

from __future__ import annotations

import datetime
import logging
import re
from typing import Any

from airflow.providers.common.compat.sdk import DAG, Param, task

log = logging.getLogger("sparklag.fleet_scan")  # a DAG module's __name__ is mangled
SETTINGS_VARIABLE = "sparklag_fleet_scan"
# log4j's default pattern in spark-submit's output: "26/11/25 14:05:51 INFO SparkContext: ..."
SPARK_INFO = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ")
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


def scan_settings(params: dict[str, Any], conf: dict[str, Any] | None) -> dict[str, Any] | None:
    """The params' defaults, the Variable's settings on top, a manual run's conf on top of
    those; None when neither the Variable nor a conf says anything (nothing configured)."""
    import json

    from airflow.providers.common.compat.sdk import AirflowFailException, Variable

    try:
        raw = Variable.get(SETTINGS_VARIABLE, default=None)
    except Exception:  # no Variable store to ask (a bare test run): not configured
        raw = None
    configured: dict[str, Any] = {}
    if raw:
        try:
            configured = json.loads(raw) if isinstance(raw, str) else dict(raw)
        except ValueError as exc:
            raise AirflowFailException(
                f"Variable {SETTINGS_VARIABLE} is not a JSON object: {exc}"
            ) from None
        if not isinstance(configured, dict):
            raise AirflowFailException(f"Variable {SETTINGS_VARIABLE} must be a JSON object")
    if not configured and not conf:
        return None
    return {**params, **configured, **(conf or {})}


def run_streaming_output(
    command: list[str], env: dict[str, str], spark_info: bool = True
) -> tuple[int, list[str]]:
    """Run ``command``, logging each output line as it comes; returns (exit code, last lines).
    Without ``spark_info`` Spark's INFO lines go to DEBUG (and are counted at the end).

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
        quiet = 0
        for line in process.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            if not spark_info and SPARK_INFO.match(line):
                quiet += 1
                log.debug("spark-submit: %s", line)
            else:
                log.info("spark-submit: %s", line)
        if quiet:
            log.info(
                "%d Spark INFO lines logged at DEBUG (spark_info_logs: true shows them)", quiet
            )
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
        "spark_info_logs": Param(False, type="boolean", description="Spark's INFO lines too"),
    },
) as dag:

    @task(execution_timeout=SCAN_TIMEOUT, retries=0)
    def fleet_scan(
        params: dict | None = None, run_id: str | None = None, dag_run: Any = None, ti: Any = None
    ) -> dict:
        import sys

        from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException

        from airflow_sparklag import spark_scan  # cheap: pyspark is imported inside only

        assert params is not None
        settings = scan_settings(dict(params), getattr(dag_run, "conf", None))
        if settings is None:
            reason = (
                f"not configured: set the Variable {SETTINGS_VARIABLE} to a JSON object "
                '(e.g. {"prefix": "s3a://lake/checkpoints", "bootstrap_servers": "broker:9092",'
                ' "output": "s3a://lake/sparklag/fleet-scan"}) or trigger the DAG with that conf'
            )
            log.warning("%s", reason)  # Airflow 3 logs only "Skipping task.", not the reason
            raise AirflowSkipException(reason)
        params = settings
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
            returncode, tail = run_streaming_output(
                command, env, spark_info=bool(params.get("spark_info_logs"))
            )
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
        # Each job's verdict, where the "Streaming lag" page reads a scan (not in the summary)
        ti.xcom_push(key="sparklag_results", value=summary.pop("results", []))
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
