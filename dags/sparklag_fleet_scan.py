"""Scan a whole fleet of Spark streaming jobs on Spark, every hour.

    fleet_scan -> summarize

``fleet_scan`` runs ``python -m airflow_sparklag.spark_scan`` with ``spark-submit``: executors read
every checkpoint under ``params.prefix``, the driver takes one Kafka snapshot for all topics, and
two tables land under ``params.output``/<run id>: ``partitions`` (lag per job, topic, partition)
and ``jobs`` (health per job). ``summarize`` reads the scan's one-line JSON summary from XCom.

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
    )

See docs/fleet.md for YARN, Kubernetes, EMR and Databricks.
"""

from __future__ import annotations

import datetime

from airflow.sdk import DAG, Param, task

with DAG(
    dag_id="sparklag_fleet_scan",
    description="Lag and health of every Spark streaming job under a prefix, computed on Spark",
    schedule="@hourly",
    start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    tags=["sparklag", "example"],
    params={
        "prefix": Param("/tmp/sparklag/checkpoints", type="string"),
        "bootstrap_servers": Param("127.0.0.1:9092", type="string"),
        "output": Param("/tmp/sparklag/fleet-scan", type="string"),
        "master": Param("local[2]", type="string"),
        "spark_submit": Param("spark-submit", type="string"),
        "extra_args": Param([], type="array"),
    },
) as dag:

    @task
    def fleet_scan(params: dict | None = None, run_id: str | None = None) -> dict:
        import json
        import subprocess
        import sys

        from airflow_sparklag import spark_scan  # cheap: pyspark is imported inside only

        assert params is not None
        command = [
            params["spark_submit"],
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
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"spark-submit failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    @task
    def summarize(summary: dict) -> dict:
        unhealthy = {k: v for k, v in summary["health"].items() if k != "OK"}
        print(f"{summary['jobs']} jobs scanned, not OK: {unhealthy or 'none'}")
        return unhealthy

    summarize(fleet_scan())
