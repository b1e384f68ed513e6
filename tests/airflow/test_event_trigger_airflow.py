"""The event trigger in a real deployment (api-server, scheduler, dag-processor, triggerer):
the example DAG ``sparklag_remediation`` configured through its Variable, as a user would.

One job (a real Spark checkpoint of a real topic), watched every 2 s by the DAG's asset
watcher in the triggerer:

- it falls behind: exactly one asset event and one DAG run;
- it stays behind for several polls, and through a restart of the triggerer process: still
  one event and one run (the trigger's recorded state survives the restart);
- the run restarts the PySpark job and waits until it caught up; the job is healthy again:
  one "recovered" event, a second run that skips the restart.

While the job must stay behind, the default pool has no slot, so the first run exists but
does not start (DAG runs are created by the scheduler whatever the pool). Airflow runs a
watcher only while its DAG is unpaused.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
import urllib.parse
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.triggers.events import airflow_version

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "sparklag_remediation"
ASSET = "sparklag_job_health"
POLL = re.compile(r"poll (\d+): 1 job\(s\)")

pytestmark = pytest.mark.skipif(airflow_version() < (3, 0), reason="event triggers: Airflow 3")


def polls(cluster: Any) -> int:
    """How many polls of the watcher the triggerer logs show (over its restarts)."""
    return sum(
        len(POLL.findall(path.read_text(errors="replace")))
        for path in cluster.logs.glob("triggerer*.log")
    )


def lagging_polls(cluster: Any) -> int:
    """How many of those polls saw the job LAGGING."""
    return sum(
        len(re.findall(r"poll \d+: 1 job\(s\): \S+ LAGGING", path.read_text(errors="replace")))
        for path in cluster.logs.glob("triggerer*.log")
    )


def asset(cluster: Any) -> dict[str, Any]:
    found = cluster.api("GET", f"/assets?name_pattern={ASSET}")["assets"]
    return dict(found[0]) if found else {}


def asset_events(cluster: Any, since: str | None = None) -> list[dict[str, Any]]:
    """The asset's events, oldest first; ``since``: those at or after that ISO time only (the
    deployment is shared by this module's tests)."""
    asset_id = asset(cluster)["id"]
    path = f"/assets/events?asset_id={asset_id}&order_by=timestamp"
    path += f"&timestamp_gte={urllib.parse.quote(since)}" if since else ""
    # Airflow 3.3.2 answers HTTP 500 while a DAG run an event created has no start_date yet
    # (AssetEventResponse requires one): ask again until it has.
    response = cluster.wait_for(lambda: cluster.api("GET", path), 60, "the asset events")
    return list(response["asset_events"])


def set_variable(cluster: Any, key: str, value: str) -> None:
    with contextlib.suppress(ValueError):  # not set yet
        cluster.api("DELETE", f"/variables/{key}")
    cluster.api("POST", "/variables", {"key": key, "value": value})


def reparse(cluster: Any) -> None:
    """Ask the dag-processor to parse the DAG file now (the Variable is read at parse time)."""
    token = cluster.api("GET", f"/dags/{DAG_ID}/details")["file_token"]
    cluster.api("PUT", f"/parseDagFile/{token}")


def wait_polls(cluster: Any, more: int, timeout: float = 120) -> int:
    target = polls(cluster) + more
    return int(cluster.wait_for(lambda: polls(cluster) >= target, timeout, f"{more} more polls"))


def set_pool(cluster: Any, slots: int) -> None:
    cluster.api("PATCH", "/pools/default_pool?update_mask=slots", {"slots": slots})


@pytest.mark.testbed
@pytest.mark.timeout(900)
def test_one_run_per_transition_through_a_triggerer_restart(
    deployment, kafka, kafka_conn, consume, tmp_path
):
    from testbed.paths import jars

    sys.path.insert(0, str(REPO / "dags"))
    try:
        from jobs.process_control import stop_job
    finally:
        sys.path.remove(str(REPO / "dags"))

    topic = kafka.create_topic(f"remediate-{uuid.uuid4().hex[:6]}", partitions=3)
    kafka.produce(topic, 30)
    checkpoint = str(tmp_path / "ck")
    consume(topic, checkpoint)  # a real query committed all 30: OK
    run_dir = str(tmp_path / "run")
    config = {
        "job_name": "orders",
        "checkpoint": checkpoint,
        "topics": topic,
        "kafka_config_id": kafka_conn,
        "thresholds": {"max_lag_records_total": 100},
        "fire_on_recovery": True,
        "poll_interval": 2,
        "run_dir": run_dir,
        "spark_classpath": ":".join(jars("spark-kafka")),
    }
    cluster = deployment.running()
    cluster.wait_dag(DAG_ID)
    since = datetime.now(timezone.utc).isoformat()
    try:
        set_variable(cluster, "sparklag_remediation", json.dumps(config))
        set_pool(cluster, 0)
        cluster.unpause(DAG_ID)  # Airflow runs the watchers of unpaused DAGs only
        reparse(cluster)
        cluster.wait_for(lambda: asset(cluster).get("watchers"), 120, "the asset's watcher")
        cluster.wait_for(lambda: polls(cluster) >= 1, 120, "the watcher's first poll")
        assert asset_events(cluster, since) == []  # OK from the start: nothing fired

        kafka.produce(topic, 300)  # lag 300 > 100: LAGGING
        started = time.monotonic()
        (run,) = cluster.wait_for(lambda: cluster.runs(DAG_ID), 120, "the remediation run")
        fired_after = time.monotonic() - started
        (event,) = asset_events(cluster, since)
        payload = event["extra"]["payload"]
        assert (payload["status"], payload["job"], payload["health"]) == (
            "unhealthy",
            checkpoint,
            "LAGGING",
        ), payload
        assert payload["result"]["report"]["total_lag"] == 300, payload

        wait_polls(cluster, 5)  # still 300 behind at every poll
        assert len(cluster.runs(DAG_ID)) == 1 and len(asset_events(cluster, since)) == 1

        restart_began = time.monotonic()
        cluster.restart("triggerer")
        wait_polls(cluster, 3)  # the watcher runs again, in the new triggerer process
        restarted_in = time.monotonic() - restart_began
        assert len(cluster.runs(DAG_ID)) == 1 and len(asset_events(cluster, since)) == 1

        set_pool(cluster, 128)  # the run restarts the job and waits until it caught up
        state = cluster.wait_run(DAG_ID, run["dag_run_id"], timeout=420)
        states = cluster.task_states(DAG_ID, run["dag_run_id"])
        assert state == "success", f"{states}\n{cluster.task_logs(DAG_ID, run['dag_run_id'])}"
        assert set(states.values()) == {"success"}, states

        cluster.wait_for(lambda: len(cluster.runs(DAG_ID)) == 2, 120, "the recovery run")
        recovery = cluster.runs(DAG_ID)[0]["dag_run_id"]  # newest first
        assert cluster.wait_run(DAG_ID, recovery, timeout=120) == "success"
        assert cluster.task_states(DAG_ID, recovery) == {
            "read_event": "success",
            "restart_job": "skipped",
            "wait_caught_up": "skipped",
        }
        events = asset_events(cluster, since)
        assert [e["extra"]["payload"]["status"] for e in events] == ["unhealthy", "recovered"]
        wait_polls(cluster, 3)
        assert len(cluster.runs(DAG_ID)) == 2 and len(asset_events(cluster, since)) == 2
        unhealthy = lagging_polls(cluster)
        assert unhealthy >= 8, unhealthy  # 5 before the restart, 3 after, more while it ran
        print(
            f"event trigger in a real deployment: first run {fired_after:.1f}s after the lag; "
            f"{unhealthy} polls saw it LAGGING, over a triggerer restart ({restarted_in:.1f}s "
            "to 3 polls in the new process): 1 event, 1 run; recovered: 1 event, 1 run"
        )
    finally:
        set_pool(cluster, 128)
        cluster.pause(DAG_ID)
        stop_job(run_dir, "orders", timeout=60)
        cluster.api("DELETE", "/variables/sparklag_remediation")
        reparse(cluster)  # no watcher any more


@pytest.mark.testbed
@pytest.mark.timeout(600)
def test_imminent_data_loss_starts_a_remediation_run(
    deployment, spark, kafka, kafka_conn, tmp_path
):
    """Issue 34 item 4 in a real deployment: the example DAG configured with no threshold at
    all watches a real query that stopped after ONE batch on a topic kept 60 s. Production
    goes on; before retention deletes the unread records, the watcher's time_to_data_loss
    verdict starts one run of the DAG, and that run's triggering asset event carries the
    verdict, when the records go and what to do. (The default pool has no slot: the run is
    created, then failed by the test, so it restarts nothing.)"""
    from testbed import jobs

    checkpoint = str(tmp_path / "ck")
    topic = jobs.stopped_after_one_batch(spark, kafka, checkpoint, retention_s=60)
    config = {
        "job_name": "one-batch",
        "checkpoint": checkpoint,
        "topics": topic,
        "kafka_config_id": kafka_conn,
        "fire_on_recovery": False,
        "poll_interval": 2,
        "run_dir": str(tmp_path / "run"),
    }
    cluster = deployment.running()
    cluster.wait_dag(DAG_ID)
    since = datetime.now(timezone.utc).isoformat()
    before = {r["dag_run_id"] for r in cluster.runs(DAG_ID)}
    run_id = None
    try:
        set_variable(cluster, "sparklag_remediation", json.dumps(config))
        set_pool(cluster, 0)
        cluster.unpause(DAG_ID)
        reparse(cluster)
        cluster.wait_for(lambda: asset(cluster).get("watchers"), 120, "the asset's watcher")
        wait_polls(cluster, 1)
        assert asset_events(cluster, since) == []  # caught up: nothing fired
        with jobs.trickle(kafka, topic, 10):
            started = time.monotonic()
            new = cluster.wait_for(
                lambda: [r for r in cluster.runs(DAG_ID) if r["dag_run_id"] not in before],
                150,
                "the remediation run",
            )
            fired_after = time.monotonic() - started
        (run,) = new
        run_id = run["dag_run_id"]
        path = f"/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run_id)}/upstreamAssetEvents"
        (event,) = cluster.api("GET", path)["asset_events"]
        payload = event["extra"]["payload"]
        verdict, report = payload["result"]["verdict"], payload["result"]["report"]
        assert (payload["status"], payload["health"], verdict["rule"]) == (
            "unhealthy",
            "LAGGING",
            "time_to_data_loss",
        ), payload["message"]
        assert 0 < report["min_time_to_loss_seconds"] <= 60, report["min_time_to_loss_seconds"]
        assert "sparklag snapshot" in payload["message"], payload["message"]
        print(
            f"imminent loss started a remediation run {fired_after:.1f} s after production "
            f"resumed, {report['min_time_to_loss_seconds']:.1f} s before retention deletes "
            "(the check's own count, a lower bound): "
            f"{verdict['reason']}"
        )
    finally:
        if run_id is not None:  # a run of its own: the other test counts the DAG's runs
            run_path = f"/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run_id)}"
            cluster.api("PATCH", run_path, {"state": "failed"})  # a running one stays
            cluster.api("DELETE", run_path)
        set_pool(cluster, 128)
        cluster.pause(DAG_ID)
        cluster.api("DELETE", "/variables/sparklag_remediation")
        reparse(cluster)
