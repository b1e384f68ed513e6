"""The main job, end to end on this machine (README command 1).

Starts a real Kafka broker (KRaft), produces orders, runs a real PySpark Structured Streaming job
that reads them with a rate limit (so it lags), measures the job's lag from its checkpoint with
`sparklag status`, then runs the example DAG `sparklag_sla_check` with Airflow against the same
job. Stops everything it started.
"""

from __future__ import annotations

import json
import os
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
        broker.produce("orders", 4000, prefix="order")
        print("produced 4000 records to orders (4 partitions)")

        step("running a PySpark Structured Streaming job on orders (200 records per batch)")
        spark = spark_session(work / "spark")
        stream = jobs.kafka_stream(
            spark, broker.bootstrap, topics=["orders"], options={"maxOffsetsPerTrigger": "200"}
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
        broker.produce("orders", 1000, prefix="order", start=4000)
        jobs.wait_for_batches(query, 7, timeout=180)
        query.stop()
        print(f"job stopped after {len(query.recentProgress)} batches; checkpoint {checkpoint}")

        step("sparklag status (lag read from the checkpoint vs Kafka's end offsets)")
        status = subprocess.run(
            [
                str(BIN / "sparklag"),
                "status",
                str(checkpoint),
                "--bootstrap-servers",
                broker.bootstrap,
                "--max-lag",
                "100",
            ],
            timeout=120,
        )
        print(f"(exit code {status.returncode}: 0 healthy, 1 lagging, 2 stalled/stopped/lost)")

        step("Airflow: `airflow dags test sparklag_sla_check` against this job")
        home = work / "airflow"
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
                {"conn_type": "kafka", "extra": {"bootstrap.servers": broker.bootstrap}}
            ),
            "SPARKLAG_JOBS_FILE": str(work / "jobs.json"),
        }
        (work / "jobs.json").write_text(
            json.dumps(
                [
                    {
                        "name": "orders_enricher",
                        "checkpoint": str(checkpoint),
                        "thresholds": {"max_lag_records_per_partition": 100000},
                    },
                ]
            )
        )
        subprocess.run(
            [str(BIN / "airflow"), "db", "migrate"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=600,
        )
        dag = subprocess.run(
            [str(BIN / "airflow"), "dags", "test", "sparklag_sla_check"],
            env=env,
            timeout=600,
            capture_output=True,
            text=True,
        )
        tail = [
            line
            for line in dag.stdout.splitlines() + dag.stderr.splitlines()
            if "sparklag" in line.lower() or "state" in line.lower()
        ]
        print("\n".join(tail[-25:]))
        print(f"airflow dags test exit code {dag.returncode}")
        return 0 if dag.returncode == 0 else 1
    finally:
        step("stopping what the demo started")
        if spark is not None:
            spark.stop()
        broker.stop()
        print(f"done; files kept in {work}")


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    print(f"demo finished in {time.monotonic() - start:.0f}s")
    sys.exit(code)
