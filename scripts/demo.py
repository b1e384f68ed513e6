"""The main job, end to end on this machine (README command 1).

Starts a real Kafka broker (KRaft), produces orders, runs a real PySpark Structured Streaming job
that reads them with a rate limit (so it lags), measures the job's lag from its checkpoint with
`sparklag status`, then runs the example DAG `sparklag_sla_check` with Airflow against the same
job. Stops everything it started.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testbed import jobs  # noqa: E402
from testbed.kafka_broker import KafkaBroker  # noqa: E402
from testbed.spark import spark_session  # noqa: E402

BIN = Path(sys.executable).parent


def quiet_spark_session(workdir: Path):  # type: ignore[no-untyped-def]
    """The Spark session, its JVM's start-up lines (Java's incubator notice, log4j's profile,
    native-hadoop warnings) in ``spark-jvm.log`` instead of the demo's output: the JVM keeps
    the file as its stderr; Python's own stderr comes back once the JVM is up."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark(\.|$)")
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "spark-jvm.log"
    sys.stderr.flush()
    saved = os.dup(2)
    with open(log, "ab") as target:
        os.dup2(target.fileno(), 2)
    try:
        session = spark_session(workdir)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    print(f"Spark's own log: {log}")
    return session


def step(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="sparklag-demo-"))
    checkpoint = work / "checkpoints" / "orders-enricher"
    broker = KafkaBroker(work / "kafka")
    spark = None
    try:
        step("starting a local Kafka broker (KRaft)")
        broker.start()
        print(f"broker at {broker.bootstrap}")
        broker.create_topic("orders", partitions=4)
        broker.produce("orders", 6000, prefix="order")
        print("produced 6000 records to orders (4 partitions)")

        step("starting a PySpark Structured Streaming job on orders (100 records per batch)")
        spark = quiet_spark_session(work / "spark")
        stream = jobs.kafka_stream(
            spark, broker.bootstrap, topics=["orders"], options={"maxOffsetsPerTrigger": "100"}
        )
        query = jobs.start_query(
            jobs.select_value(stream),
            str(checkpoint),
            sink="parquet",
            path=str(work / "output" / "orders"),
            trigger={"processingTime": "1 second"},
            query_name="orders_enricher",
        )
        jobs.wait_for_batches(query, 5, timeout=180)
        broker.produce("orders", 1000, prefix="order", start=6000)
        print(f"job running, {len(query.recentProgress)} batches so far; checkpoint {checkpoint}")

        step("sparklag status (lag read from the checkpoint vs Kafka's end offsets)")
        status = subprocess.run(
            [
                str(BIN / "sparklag"),
                "status",
                str(checkpoint),
                "--bootstrap-servers",
                broker.bootstrap,
                "--max-lag-records-per-partition",
                "100",
                "--exact-time-lag",
            ],
            timeout=120,
        )
        print(f"(exit code {status.returncode}: 0 healthy, 1 lagging, 2 stalled/stopped/lost)")

        step("Airflow: `airflow dags test sparklag_sla_check` against the running job")
        home = work / "airflow"
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW_CONN_SPARKLAG_DEMO_KAFKA": json.dumps(
                {"conn_type": "kafka", "extra": {"bootstrap.servers": broker.bootstrap}}
            ),
        }
        jobs_file = work / "sla_jobs.json"
        jobs_file.write_text(
            json.dumps(
                {
                    "kafka_config_id": "sparklag_demo_kafka",
                    # A generous SLA: the demo job is behind, but within it.
                    "jobs": [
                        {
                            "name": "orders_enricher",
                            "location": str(checkpoint),
                            "thresholds": {"max_lag_records_total": 100000},
                        }
                    ],
                }
            )
        )
        subprocess.run(
            [str(BIN / "airflow"), "db", "migrate"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=600,
        )
        dag = subprocess.run(
            [
                str(BIN / "airflow"),
                "dags",
                "test",
                "sparklag_sla_check",
                "--conf",
                json.dumps({"jobs_file": str(jobs_file)}),
            ],
            env=env,
            timeout=600,
            capture_output=True,
            text=True,
        )
        output = dag.stdout + dag.stderr
        shown = [
            line
            for line in output.splitlines()
            if "'job': 'orders_enricher'" in line
            or "DagRun Finished" in line
            or "Marking task as" in line
        ]
        print("\n".join(shown[-12:]) or output[-3000:])
        (work / "airflow-dags-test.log").write_text(output)
        finished = re.search(r"DagRun Finished: dag_id=.*? state=(\w+),", output)
        state = finished.group(1) if finished else "unknown"
        print(f"DAG run state: {state} (airflow exit code {dag.returncode})")
        return 0 if state == "success" else 1
    finally:
        step("stopping what the demo started")
        if spark is not None:
            # Stopping mid-batch interrupts a task; Spark logs that as an error we do not need.
            spark.sparkContext.setLogLevel("OFF")
            for active in spark.streams.active:
                active.stop()
            spark.stop()
        broker.stop()
        print(f"done; files kept in {work}")


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    print(f"demo finished in {time.monotonic() - start:.0f}s")
    sys.exit(code)
