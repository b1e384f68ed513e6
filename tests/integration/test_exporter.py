"""`sparklag serve` scraped by a REAL Prometheus (Debian package) on 127.0.0.1, every second.

A real query reads 30 records from each of 3 partitions (availableNow) and stops; then 25, 10
and 0 more records are produced, stamped two minutes in the past. Truth, from what was
produced: lag 25 / 10 / 0, total 35; the first unread record is 120 s old plus the time since.
Every panel query of docs/grafana/sparklag-dashboard.json is run through Prometheus' HTTP API
and checked against those numbers.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.exporter import LagExporter
from airflow_sparklag.fleet import FleetChecker
from airflow_sparklag.model.verdict import Health, Thresholds
from airflow_sparklag.monitor import CheckOptions, check
from airflow_sparklag.session import Session
from testbed import jobs
from testbed.process import free_port
from testbed.prometheus import PrometheusServer

pytestmark = pytest.mark.testbed

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "sparklag-dashboard.json"
READ, WAITING = 30, (25, 10, 0)  # records per partition read by the query, then left waiting
STAMP_AGE = 120.0  # the waiting records are stamped this many seconds in the past


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """Prometheus scraping 127.0.0.1:<exporter_port> (the exporter under test starts later)."""
    exporter_port = free_port()
    server = PrometheusServer(
        tmp_path_factory.mktemp("prometheus"), [f"127.0.0.1:{exporter_port}"]
    ).start()
    server.exporter_port = exporter_port  # type: ignore[attr-defined]
    yield server
    server.stop()


@pytest.fixture(scope="module")
def lagging(spark, kafka, tmp_path_factory) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    from confluent_kafka import Producer

    topic = kafka.create_topic(f"exporter-{uuid.uuid4().hex[:8]}", partitions=3)
    for partition in range(3):
        kafka.produce(topic, READ, partition=partition, prefix=f"read{partition}")
    checkpoint = str(tmp_path_factory.mktemp("exporter") / "ck")
    stream = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic])
    assert jobs.run_available_now_rows(stream, checkpoint) == 3 * READ
    stamp = int((time.time() - STAMP_AGE) * 1000)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for partition, count in enumerate(WAITING):
        for i in range(count):
            producer.produce(topic, value=f"w{i}".encode(), partition=partition, timestamp=stamp)
    assert producer.flush(30) == 0
    return {"topic": topic, "checkpoint": checkpoint, "stamp_ms": stamp}


@pytest.fixture(scope="module")
def served(prometheus, kafka, lagging, tmp_path_factory) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    missing = str(tmp_path_factory.mktemp("gone") / "ck")
    # A day's commit age decides STOPPED: the verdict taken here stays the exporter's later
    # (the one-batch job is UNKNOWN once idle past STOPPED_MIN_IDLE_SECONDS otherwise).
    options = CheckOptions(Thresholds(max_commit_age_seconds=86400), exact_time_lag=True)
    with Session(kafka_config={"bootstrap.servers": kafka.bootstrap}) as session:
        fleet = FleetChecker([lagging["checkpoint"], missing], session=session, options=options)
        exporter = LagExporter(fleet, interval=1.0)
        server = exporter.serve("127.0.0.1", prometheus.exporter_port)
        verdict = check(session, lagging["checkpoint"], options).verdict.health
        try:
            prometheus.wait_for("sparklag_jobs", lambda r: bool(r) and _value(r[0]) == 2, 60)
            # rate() and increase() need two samples at least.
            samples = "count_over_time(sparklag_jobs[1m])"
            prometheus.wait_for(samples, lambda r: bool(r) and _value(r[0]) >= 3, 30)
            yield {**lagging, "missing": missing, "verdict": verdict, "exporter": exporter}
        finally:
            exporter.stop(timeout=30)
            server.shutdown()
            server.server_close()


def _value(sample: dict[str, Any]) -> float:
    return float(sample["value"][1])


def by(result: list[dict[str, Any]], *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(s["metric"].get(label, "") for label in labels): _value(s) for s in result}


def panel_queries() -> dict[str, list[str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return {
        panel["title"]: [target["expr"] for target in panel["targets"]]
        for panel in dashboard["panels"]
    }


def run(prometheus: PrometheusServer, expr: str) -> list[dict[str, Any]]:
    # Grafana substitutes the dashboard's $checkpoint variable; "All" is ".*".
    return prometheus.query(expr.replace("$checkpoint", ".*"))


def test_prometheus_scrapes_the_lag_a_real_query_has(prometheus, served):
    job = served["checkpoint"]
    query = 'sparklag_partition_lag_records{checkpoint=~"$checkpoint"}'
    lag = by(run(prometheus, query), "checkpoint", "partition")
    assert {p: lag[(job, str(p))] for p in range(3)} == dict(enumerate(WAITING))
    committed = by(
        prometheus.query("sparklag_partition_committed_offset"), "checkpoint", "partition"
    )
    ends = by(prometheus.query("sparklag_partition_log_end_offset"), "checkpoint", "partition")
    for partition, waiting in enumerate(WAITING):
        assert committed[(job, str(partition))] == READ
        assert ends[(job, str(partition))] == READ + waiting
    up = by(prometheus.query("sparklag_job_up"), "checkpoint")
    assert up == {(job,): 1.0, (served["missing"],): 0.0}
    states = prometheus.query("sum by (checkpoint) (sparklag_job_health_state)")
    assert {key: count for key, count in by(states, "checkpoint").items()} == {
        (job,): 1.0,
        (served["missing"],): 1.0,
    }
    assert prometheus.targets_health() == ["up"]
    url = f"http://127.0.0.1:{prometheus.exporter_port}"
    with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
        assert json.load(response)["status"] == "ok"


def test_labels_never_collide_with_the_ones_prometheus_adds(prometheus, served, kafka):
    # Scraped without honor_labels: Prometheus keeps its own job (the scrape job) and
    # instance, and the exporter's labels arrive as they are, none renamed to exported_*.
    # Before: the exporter's `job` became `exported_job` and the location was lost from `job`.
    lag = prometheus.query("sparklag_partition_lag_records")
    assert {s["metric"]["job"] for s in lag} == {"sparklag"}
    assert {s["metric"]["instance"] for s in lag} == {f"127.0.0.1:{prometheus.exporter_port}"}
    assert not any(name.startswith("exported_") for s in lag for name in s["metric"])
    name = Path(served["checkpoint"]).parent.name  # the directory is ck: its parent names it
    assert {(s["metric"]["spark_job"], s["metric"]["checkpoint"]) for s in lag} == {
        (name, served["checkpoint"])
    }
    with Session(kafka_config={"bootstrap.servers": kafka.bootstrap}) as session:
        cluster = check(session, served["checkpoint"]).report.kafka_cluster_id
    assert cluster and {s["metric"]["kafka_cluster"] for s in lag} == {cluster}


def test_history_of_a_served_job_over_http(prometheus, served):
    url = f"http://127.0.0.1:{prometheus.exporter_port}/history"
    query = urllib.parse.urlencode({"checkpoint": served["checkpoint"], "batches": 5})
    with urllib.request.urlopen(f"{url}?{query}", timeout=30) as response:
        document = json.load(response)
    assert document["schema"] == "sparklag/1"
    (past,) = document["results"]
    now = past["points"][-1]
    assert now["kind"] == "now" and now["total_lag"] == sum(WAITING)
    assert [p["lag"] for p in now["partitions"]] == list(WAITING)
    assert past["approximations"] and past["kafka_calls"] >= 1
    # A served job whose checkpoint is gone: the error, 502. A location not served: 404 (the
    # endpoint reads only what the exporter was configured to read).
    for job, code in ((served["missing"], 502), ("/not/served", 404)):
        with pytest.raises(urllib.error.HTTPError) as refused:
            query = urllib.parse.urlencode({"checkpoint": job})
            urllib.request.urlopen(f"{url}?{query}", timeout=30)
        assert refused.value.code == code


def test_every_dashboard_panel_query_returns_the_truth(prometheus, served):
    job, missing, verdict = served["checkpoint"], served["missing"], served["verdict"]
    panels = panel_queries()
    age_now = time.time() - served["stamp_ms"] / 1000.0

    def one(title: str, index: int = 0, *labels: str) -> dict[tuple[str, ...], float]:
        return by(run(prometheus, panels[title][index]), *(labels or ("checkpoint",)))

    health = one("Health (0 OK .. 5 DATA_LOSS, -1 UNKNOWN)")
    assert health == {(job,): verdict.metric_value, (missing,): Health.UNKNOWN.metric_value}
    states = one("Verdict", 0, "checkpoint", "state")
    assert states == {(job, verdict.value): 1.0, (missing, "UNKNOWN"): 1.0}
    assert one("Lag per job (records)") == {(job,): sum(WAITING)}
    per_partition = one("Lag per partition (records)", 0, "checkpoint", "topic", "partition")
    assert per_partition == {
        (job, served["topic"], str(p)): float(w) for p, w in enumerate(WAITING)
    }
    seconds = one("Time lag, worst partition")[(job,)]
    assert STAMP_AGE - 1 <= seconds <= age_now + 1  # exact: the waiting records' own stamp
    assert 0 < one("Last commit age")[(job,)] < 600
    assert one("In-flight batch age") == {(job,): 0.0}
    assert one("Consumption rate (records/s)") == {(job,): 0.0}  # the query is stopped
    assert one("Production rate (records/s)") == {(job,): 0.0}  # nothing produced meanwhile
    errors = one("Check errors (15 min)", 0, "checkpoint", "reason")
    assert (
        set(errors) == {(missing, "CheckpointNotFound")}
        and errors[(missing, "CheckpointNotFound")] > 0
    )
    duration = run(prometheus, panels["Exporter refresh"][0])
    assert len(duration) == 1 and 0 < _value(duration[0]) < 30
    assert [_value(s) for s in run(prometheus, panels["Exporter refresh"][1])] == [0.0]
    assert run(prometheus, panels["Exporter refresh"][2]) == []  # no refresh failed
    assert sum(len(exprs) for exprs in panels.values()) == 13  # every query above was run


def test_healthz_and_a_dead_kafka_never_crash_the_server(served):
    port = free_port()
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    with Session(kafka_config={"bootstrap.servers": dead}, kafka_timeout=1.0) as session:
        exporter = LagExporter(FleetChecker([served["checkpoint"]], session=session), interval=1)
        server = exporter.serve("127.0.0.1", port)
        try:
            jobs.wait_until(lambda: exporter.health()[1]["refreshes"] >= 2, 30, "two refreshes")
            url = f"http://127.0.0.1:{port}"
            with pytest.raises(urllib.error.HTTPError) as failing:
                urllib.request.urlopen(f"{url}/healthz", timeout=5)
            assert failing.value.code == 503
            assert json.load(failing.value)["status"] == "failing"
            with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
                text = response.read().decode()
            assert 'sparklag_refresh_errors_total{reason="KafkaUnavailable"}' in text
            assert "sparklag_stale 1.0" in text
        finally:
            exporter.stop(timeout=30)
            server.shutdown()
            server.server_close()


def test_the_serve_command_serves_until_sigterm(served, kafka, capsys):
    from airflow_sparklag.cli import main

    job = served["checkpoint"]
    assert main(["serve", job, "-b", kafka.bootstrap, "--once"]) == 0
    text = capsys.readouterr().out
    labels = f'checkpoint="{job}",spark_job="{Path(job).parent.name}"'
    assert f"sparklag_job_lag_records{{{labels}}} {float(sum(WAITING))}" in text

    port = free_port()
    sparklag = Path(sys.executable).parent / "sparklag"
    argv = [str(sparklag), "serve", job, "-b", kafka.bootstrap, "--address", "127.0.0.1",
            "--port", str(port), "--interval", "1s"]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    return bool(json.load(r)["status"] == "ok")
            except OSError:
                return False

        jobs.wait_until(healthy, 60, "sparklag serve healthy")
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        assert b"serving http://127.0.0.1:" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
