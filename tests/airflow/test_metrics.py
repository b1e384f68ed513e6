"""Metrics from every class, captured for real: a StatsD UDP listener and an OTLP/HTTP receiver
get what Airflow's own Stats backends send while our operators, sensors and triggers run.

Each backend runs in a subprocess configured through ``AIRFLOW__METRICS__*`` as a deployment
would set it (Stats picks its backend once per process)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import airflow_env

pytestmark = pytest.mark.testbed
REPO = Path(__file__).resolve().parents[2]

# Runs in the subprocess: the classes under test, on a lagging job (45 records waiting).
SCRIPT = r"""
import asyncio, json, sys, time
from airflow.sdk import DAG
from airflow.sdk._shared.observability.metrics import stats
from airflow.sdk.observability.metrics import stats_utils

stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)

from airflow_sparklag.operators.fleet import SparkLagFleetCheckOperator
from airflow_sparklag.operators.sparklag import SparkLagBranchOperator, SparkLagCheckOperator
from airflow_sparklag.sensors.sparklag import SparkLagSensor

kafka, location, missing = sys.argv[1:4]

class TI:
    def xcom_push(self, key, value):
        pass

def run(task):
    try:
        task.execute({"ti": TI()})
    except Exception as exc:
        print("task failed:", type(exc).__name__, file=sys.stderr)

common = {"kafka_config_id": kafka, "thresholds": {"max_lag_records_total": 10}}
for dag_id in ("dag_a", "dag_b"):  # the same task id in two DAGs: two jobs
    with DAG(dag_id, schedule=None):
        run(SparkLagCheckOperator(task_id="check", location=location, **common))
with DAG("dag_c", schedule=None):
    run(SparkLagCheckOperator(task_id="missing", location=missing, kafka_config_id=kafka))
    run(SparkLagBranchOperator(task_id="branch", location=location, default_task_id="x",
                               **common))
    run(SparkLagFleetCheckOperator(task_id="fleet", locations=[location], **common))
    sensor = SparkLagSensor(task_id="sensor", location=location, deferrable=True,
                            metric_name="orders_wait", poke_interval=1, **common)
    trigger = sensor._trigger(deadline=time.time() + 2.5)  # two polls, then "timeout"

async def first_event():
    async for event in trigger.run():
        return event

event = asyncio.run(asyncio.wait_for(first_event(), 60)).payload
print(event.get("message"), file=sys.stderr)
print(json.dumps(event["status"]))
from opentelemetry import metrics as otel
provider = otel.get_meter_provider()
if hasattr(provider, "shutdown"):
    provider.shutdown()  # export what the OTel backend holds
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_script(env: dict[str, str], kafka_conn: str, job: Any, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, kafka_conn, job.location, str(tmp_path / "none")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # the sensor's trigger polled the lagging job until its deadline: it stays lagging
    assert '"timeout"' in proc.stdout.splitlines(), proc.stdout[-2000:] + proc.stderr[-3000:]


def test_statsd_gets_every_class_under_names_that_do_not_collide(kafka_conn, lagging_job, tmp_path):
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(0.5)
    packets: list[str] = []

    def listen() -> None:
        while not stop.is_set():
            try:
                packets.extend(server.recv(65535).decode().splitlines())
            except TimeoutError:
                continue

    stop = threading.Event()
    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    env = airflow_env(tmp_path)
    env.update(
        {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(server.getsockname()[1]),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        }
    )
    try:
        run_script(env, kafka_conn, lagging_job, tmp_path)
    finally:
        stop.set()
        listener.join(timeout=5)
        server.close()
    values: dict[str, tuple[float, str]] = {}
    for packet in packets:
        name, _, rest = packet.partition(":")
        number, _, kind = rest.partition("|")
        values[name] = (float(number), kind)
    for job in ("dag_a__check", "dag_b__check", "dag_c__branch", "orders_wait"):
        # named as the exporter's sparklag_job_lag_records; the old name too, for one release
        for name in ("lag_records", "total_lag"):
            assert values.get(f"airflow.sparklag.{job}.{name}") == (45, "g"), (job, packets)
        assert values.get(f"airflow.sparklag.{job}.max_partition_lag_records") == (15, "g")
        assert values.get(f"airflow.sparklag.{job}.health") == (1, "g"), (job, packets)
    fleet_job = [n for n in values if n.endswith(".lag_records") and "lagging" in n]
    assert fleet_job and values[fleet_job[0]] == (45, "g"), packets  # named by its location
    for name in ("check_errors", "check_failed"):
        assert values.get(f"airflow.sparklag.dag_c__missing.{name}") == (1, "c"), packets
        assert values.get(f"airflow.sparklag.{name}") == (1, "c"), packets
    assert not any("health=" in p or "LAGGING" in p for p in packets), "health is never a tag"
    # plain StatsD drops tags: the per-partition gauge (one name, tags) is not sent there
    assert not any(p.startswith("airflow.sparklag.partition_lag") for p in packets)


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        type(self).bodies.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_opentelemetry_gets_per_partition_lag_under_one_name_with_tags(
    kafka_conn, lagging_job, tmp_path
):
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    _Receiver.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = airflow_env(tmp_path)
    env.update(
        {
            "AIRFLOW__METRICS__OTEL_ON": "True",
            "AIRFLOW__METRICS__OTEL_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__OTEL_PORT": str(server.server_address[1]),
            "AIRFLOW__METRICS__OTEL_INTERVAL_MILLISECONDS": "1000",
        }
    )
    try:
        run_script(env, kafka_conn, lagging_job, tmp_path)
    finally:
        server.shutdown()
    points: dict[str, list[tuple[dict[str, str], float]]] = {}
    for body in _Receiver.bodies:
        request = ExportMetricsServiceRequest.FromString(body)
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.gauge.data_points:
                        attributes = {a.key: a.value.string_value for a in point.attributes}
                        value = point.as_double or float(point.as_int)
                        points.setdefault(metric.name, []).append((attributes, value))
    names = sorted(points)
    partition = [
        p for name in names if name.endswith("sparklag.partition_lag_records") for p in points[name]
    ]
    by_partition = {
        (a["job"], a["topic"], a["partition"]): v
        for a, v in partition
        if a.get("job") == "dag_a__check"
    }
    assert by_partition, json.dumps(names)
    assert sorted(by_partition.values()) == [15.0, 15.0, 15.0]  # 15 records wait on each
    assert {topic for _, topic, _ in by_partition} == {lagging_job.topic}
    health = [v for n in names if n.endswith("sparklag.dag_a__check.health") for _, v in points[n]]
    assert health and health[-1] == 1.0
