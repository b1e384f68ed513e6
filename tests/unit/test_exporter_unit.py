"""LagExporter without a network: results -> families, failed refreshes, /healthz, rendering.

The real scrape by a real Prometheus is tests/integration/test_exporter.py.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from airflow_sparklag.checkpoint_files import BatchOffsets, CheckpointState, SourceOffset
from airflow_sparklag.errors import KafkaUnavailable
from airflow_sparklag.exporter import LagExporter, job_labels
from airflow_sparklag.health import evaluate
from airflow_sparklag.kafka import KafkaSnapshot, PartitionOffsets
from airflow_sparklag.lag import compute_lag
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.monitor import CheckResult, failed_result
from airflow_sparklag.pace import pace_of
from airflow_sparklag.redact import redact_url

NOW = 1_700_000_100.0
A = {"spark_job": "a", "checkpoint": "/ck/a"}  # a job's labels: never `job` (Prometheus's own)
GONE = {"spark_job": "gone", "checkpoint": "/ck/gone"}


def result(location: str, committed: dict[int, int], ends: dict[int, int]) -> CheckResult:
    offsets = {"orders": committed}
    batch = BatchOffsets(
        7, 1, int((NOW - 5) * 1000), 0, {}, (SourceOffset("0", "kafka", offsets, "{}"),), None
    )
    state = CheckpointState(
        location, None, 7, batch, NOW - 4, None, (batch,), (7,), (7,), continuous=False
    )
    parts = {p: PartitionOffsets(0, end, None) for p, end in ends.items()}
    snapshot = KafkaSnapshot({"orders": parts}, frozenset(), NOW, None)
    report = compute_lag(state, snapshot, now=NOW)
    return CheckResult(report, evaluate(report, now=NOW), location)


class FakeFleet:
    """A FleetChecker stand-in: each check() returns (or raises) the next outcome."""

    def __init__(self, *outcomes: list[CheckResult] | Exception) -> None:
        self.outcomes = list(outcomes)

    def check(self) -> list[CheckResult]:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def samples(exporter: LagExporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = exporter.render()[0].decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict, name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def test_results_become_partition_and_job_series():
    good = result("/ck/a", {0: 90, 1: 40}, {0: 100, 1: 40})
    broken = failed_result("/ck/gone", KafkaUnavailable("no broker"))
    exporter = LagExporter(FakeFleet([good, broken]), clock=lambda: NOW)
    assert exporter.refresh()
    found = samples(exporter)
    lag = "sparklag_partition_lag_records"
    assert value(found, lag, **A, kafka_cluster="", topic="orders", partition="0") == 10
    assert value(found, lag, **A, kafka_cluster="", topic="orders", partition="1") == 0
    part0 = {**A, "kafka_cluster": "", "topic": "orders", "partition": "0"}
    assert value(found, "sparklag_partition_committed_offset", **part0) == 90
    assert value(found, "sparklag_partition_log_end_offset", **part0) == 100
    assert value(found, "sparklag_job_lag_records", **A) == 10
    assert value(found, "sparklag_job_commit_age_seconds", **A) == pytest.approx(4.0)
    assert value(found, "sparklag_job_in_flight_age_seconds", **A) == 0
    assert value(found, "sparklag_job_health", **A) == good.verdict.health.metric_value
    # The failed job: down, UNKNOWN, counted by reason, and no partition numbers.
    assert value(found, "sparklag_job_up", **GONE) == 0
    assert value(found, "sparklag_job_health", **GONE) == -1
    states = {h.value: value(found, "sparklag_job_health_state", **GONE, state=h.value)
              for h in Health}  # fmt: skip
    assert states == {h.value: (1 if h is Health.UNKNOWN else 0) for h in Health}
    errors = "sparklag_check_errors_total"
    assert value(found, errors, **GONE, reason="KafkaUnavailable") == 1
    assert not any(name.startswith("sparklag_partition") and ("checkpoint", "/ck/gone") in labels
                   for name, labels in found)  # fmt: skip
    assert value(found, "sparklag_stale") == 0 and value(found, "sparklag_jobs") == 2


def test_a_failed_refresh_keeps_the_values_marks_them_stale_and_counts_it():
    clock = [NOW]
    good = result("/ck/a", {0: 90}, {0: 100})
    fleet = FakeFleet([good], KafkaUnavailable("down"), KafkaUnavailable("down"), [good])
    exporter = LagExporter(fleet, interval=10, clock=lambda: clock[0])
    assert exporter.health()[0] == 503  # nothing refreshed yet
    assert exporter.refresh()
    assert exporter.health()[0] == 200
    clock[0] += 5
    assert not exporter.refresh() and not exporter.refresh()
    found = samples(exporter)
    lag = "sparklag_partition_lag_records"
    assert value(found, lag, **A, kafka_cluster="", topic="orders", partition="0") == 10  # kept
    assert value(found, "sparklag_stale") == 1
    assert value(found, "sparklag_refresh_errors_total", reason="KafkaUnavailable") == 2
    assert value(found, "sparklag_refreshes_total") == 3
    assert value(found, "sparklag_last_refresh_timestamp_seconds") == NOW
    status, body = exporter.health()
    assert status == 200 and body["last_error"].startswith("KafkaUnavailable")  # 5 s < 60 s
    clock[0] += 120  # no success for longer than max(3 x interval, 60 s)
    assert exporter.health()[0] == 503 and exporter.health()[1]["status"] == "stale"
    assert exporter.refresh()
    assert value(samples(exporter), "sparklag_stale") == 0


def test_partitions_beyond_the_limit_keep_the_most_lagging():
    good = result("/ck/a", {0: 90, 1: 50, 2: 99}, {0: 100, 1: 100, 2: 100})
    exporter = LagExporter(FakeFleet([good]), max_partitions_per_job=2, clock=lambda: NOW)
    exporter.refresh()
    found = samples(exporter)
    kept = {dict(labels)["partition"] for name, labels in found
            if name == "sparklag_partition_lag_records"}  # fmt: skip
    assert kept == {"0", "1"}
    assert value(found, "sparklag_job_partitions_omitted", **A) == 1
    assert value(found, "sparklag_job_lag_records", **A) == 61  # totals stay complete


def test_wsgi_routes_formats_and_gzip():
    exporter = LagExporter(FakeFleet([result("/ck/a", {0: 1}, {0: 2})]), clock=lambda: NOW)
    exporter.refresh()
    responses: list[tuple[str, dict[str, str]]] = []

    def call(path: str, **headers: str) -> bytes:
        environ = {"PATH_INFO": path, **headers}
        body = exporter.wsgi_app(environ, lambda s, h: responses.append((s, dict(h))))
        return b"".join(body)

    plain = call("/metrics")
    assert responses[-1][0] == "200 OK" and b"sparklag_job_lag_records" in plain
    openmetrics = call("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert responses[-1][1]["Content-Type"].startswith("application/openmetrics-text")
    assert openmetrics.rstrip().endswith(b"# EOF")
    zipped = call("/metrics", HTTP_ACCEPT_ENCODING="gzip")
    assert gzip.decompress(zipped) == plain
    assert json.loads(call("/healthz"))["status"] == "ok"
    assert call("/nope") and responses[-1][0] == "404 Not Found"
    assert "batches=1..1000" in json.loads(call("/history", QUERY_STRING="batches=x"))["error"]
    assert responses[-1][0] == "400 Bad Request"
    call("/history", QUERY_STRING="job=/not/served")
    assert responses[-1][0] == "404 Not Found"  # only jobs of the fleet are read
    assert exporter.render()[0] is exporter.render()[0]  # rendered once per refresh


@pytest.mark.parametrize("address", ["::1", "::"])
def test_serves_on_ipv6_addresses_too(address: str) -> None:
    # "::" (all addresses, the usual bind in a pod) and "::1" failed: "cannot listen on ::1:0:
    # Address family for hostname not supported" (the server was IPv4 only).
    exporter = LagExporter(FakeFleet(*[[result("/ck/a", {0: 1}, {0: 2})]] * 5), clock=lambda: NOW)
    server = exporter.serve(address, 0)
    try:
        url = f"http://[::1]:{server.server_port}/healthz"
        with urllib.request.urlopen(url, timeout=5) as answer:
            assert answer.status == 200
    finally:
        server.shutdown()
        server.server_close()
        exporter.stop()


@pytest.mark.parametrize(
    ("location", "spark_job"),
    [
        ("s3a://lake/orders/checkpoint", "orders"),
        ("s3a://lake/ck/orders", "orders"),
        ("hdfs://nn/jobs/clicks/_checkpoint/", "_checkpoint"),
        ("/data/payments/CK", "payments"),
        ("s3a://bucket/ck", "bucket"),
        ("s3a://key:secret@bucket/orders", "orders"),
    ],
)
def test_a_jobs_labels_are_its_name_and_its_checkpoint(location: str, spark_job: str) -> None:
    name, checkpoint = job_labels(location)
    assert name == spark_job and checkpoint == redact_url(location)
    assert "secret" not in checkpoint


def test_partitions_carry_the_kafka_cluster_they_are_measured_against():
    good = result("/ck/a", {0: 90}, {0: 100})
    report = dataclasses.replace(good.report, kafka_cluster_id="cluster-main")
    exporter = LagExporter(FakeFleet([dataclasses.replace(good, report=report)]))
    exporter.refresh()
    found = samples(exporter)
    assert value(found, "sparklag_partition_lag_records", **A, kafka_cluster="cluster-main",
                 topic="orders", partition="0") == 10  # fmt: skip
    assert not any(dict(labels).get("job") for _, labels in found)


def test_batch_time_gauges():
    """Issue 34: the batches' time and its share of the interval, from the listing's times;
    absent when unknown."""
    paced = result("/ck/a", {0: 90}, {0: 100})
    listed = tuple((i, NOW - 30 + 10 * i, NOW - 27 + 10 * i) for i in range(3))
    assert paced.report is not None
    report = dataclasses.replace(paced.report, pace=pace_of(listed))
    exporter = LagExporter(
        FakeFleet([dataclasses.replace(paced, report=report), result("/ck/b", {0: 1}, {0: 1})]),
        clock=lambda: NOW,
    )
    assert exporter.refresh()
    found = samples(exporter)
    assert value(found, "sparklag_job_batch_seconds", **A) == 3.0
    assert value(found, "sparklag_job_batch_time_ratio", **A) == pytest.approx(0.3)
    b = tuple(sorted({"spark_job": "b", "checkpoint": "/ck/b"}.items()))
    assert ("sparklag_job_batch_seconds", b) not in found
