"""A real Airflow deployment runs the example DAGs: api-server, scheduler, dag-processor and
triggerer (LocalExecutor, SQLite), driven only through the REST API, as a user would.

- the gated deploy against a lagging job: its sensor is seen ``deferred`` (the triggerer holds
  it), the job catches up, the trigger fires, the deploy starts the new version and the run
  succeeds;
- every example DAG unpaused before any configuration: the SLA check's and the fleet scan's
  scheduled runs succeed with their work skipped, the others start nothing;
- the connection form: the ``sparklag`` connection type is offered with its fields, and its
  Test button (``POST /api/v2/connections/test``, enabled with ``[core] test_connection``)
  runs SparkLagHook.test_connection() in the API server, which reads the checkpoint.

If the deployment cannot start, the tests fail with the components' log tails.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
GATED = "sparklag_gated_deploy"
SLA = "sparklag_sla_check"
MIGRATION = "sparklag_checkpoint_migration"
FLEET = "sparklag_fleet_scan"
REMEDIATION = "sparklag_remediation"


@pytest.mark.testbed
@pytest.mark.timeout(480)
def test_gated_deploy_defers_in_the_triggerer_then_succeeds(
    deployment, kafka, kafka_conn, consume, tmp_path
):
    from testbed.paths import jars

    sys.path.insert(0, str(DAGS))
    try:
        from jobs.process_control import stop_job
    finally:
        sys.path.remove(str(DAGS))

    topic = kafka.create_topic(f"smoke-{uuid.uuid4().hex[:6]}", partitions=3)
    kafka.produce(topic, 30)
    checkpoint = str(tmp_path / "ck")
    consume(topic, checkpoint)  # a real query committed all 30
    kafka.produce(topic, 300)  # lag 300 > 100: the deploy must wait until it catches up
    run_dir = str(tmp_path / "run")
    cluster = deployment.running()
    cluster.wait_dag(GATED)
    cluster.unpause(GATED)
    run_id = cluster.trigger(
        GATED,
        {
            "checkpoint": checkpoint,
            "topics": topic,
            "job_name": "orders",
            "new_version": "v2",
            "run_dir": run_dir,
            "spark_classpath": ":".join(jars("spark-kafka")),
            "kafka_config_id": kafka_conn,
            "thresholds": {"max_lag_records_total": 100},
        },
    )
    try:
        started = time.monotonic()
        cluster.wait_task_state(GATED, run_id, "wait_until_healthy", ("deferred",), timeout=150)
        deferred_after = time.monotonic() - started
        consume(topic, checkpoint)  # the job catches up: the trigger's next poll sees OK
        state = cluster.wait_run(GATED, run_id, timeout=300)
        states = cluster.task_states(GATED, run_id)
        assert state == "success", f"{states}\n{cluster.task_logs(GATED, run_id)}"
        assert states == {
            "check_health": "success",
            "wait_until_healthy": "success",
            "abort": "skipped",
            "stop_old_job": "success",
            "record_offsets": "success",
            "start_new_job": "success",
            "wait_for_catch_up": "success",
            "wait_new_version_healthy": "success",
        }, states
        # The triggerer ran the sensor's trigger and fired its event (its own log file).
        assert "Trigger fired event" in cluster.task_logs(GATED, run_id, lines=200)
        assert "QUERY_STARTED" in (Path(run_dir) / "orders-v2.log").read_text()
        print(
            f"gated deploy in a real deployment: deferred after {deferred_after:.1f}s, "
            f"run succeeded after {time.monotonic() - started:.1f}s"
        )
    finally:
        stop_job(run_dir, "orders", timeout=60)
        cluster.pause(GATED)


@pytest.mark.testbed
@pytest.mark.timeout(300)
def test_every_example_dag_unpaused_before_any_configuration_fails_nothing(deployment):
    """A user unpauses every example DAG before configuring anything: the SLA check's and the
    fleet scan's scheduled runs succeed with their work skipped (a log line says how to
    configure them), and the DAGs without a schedule (gated deploy, migration) or whose
    asset has no watcher yet (remediation) start nothing; a manual run of the remediation DAG
    restarts nothing and says why."""
    cluster = deployment.running()
    scheduled = {  # DAG: (the task skipped, what its log says)
        SLA: ("load_jobs", "shipped sample configuration"),
        FLEET: ("fleet_scan", "not configured: set the Variable sparklag_fleet_scan"),
    }
    quiet = (GATED, MIGRATION, REMEDIATION)
    dags = [*scheduled, *quiet]
    for dag_id in dags:
        cluster.wait_dag(dag_id)
    before = {dag_id: len(cluster.runs(dag_id)) for dag_id in quiet}  # other tests' runs
    for dag_id in dags:
        cluster.unpause(dag_id)
    try:
        for dag_id, (skipped, said) in scheduled.items():
            runs = cluster.wait_for(
                lambda dag_id=dag_id: cluster.runs(dag_id), 90, f"a scheduled run of {dag_id}"
            )
            run_id = runs[0]["dag_run_id"]
            state = cluster.wait_run(dag_id, run_id, timeout=150)
            states = cluster.task_states(dag_id, run_id)
            logs = cluster.task_logs(dag_id, run_id, lines=200)
            assert state == "success", f"{dag_id}: {states}\n{logs}"
            assert "failed" not in states.values(), states
            assert states.get(skipped) == "skipped", f"{dag_id}: {states}"
            assert said in logs, f"{dag_id}: {logs}"
        for dag_id in quiet:
            assert len(cluster.runs(dag_id)) == before[dag_id], dag_id
        # Triggered by hand, the remediation DAG has no asset event to act on: it says so and
        # restarts nothing (it failed with an IndexError).
        run_id = cluster.trigger(REMEDIATION)
        try:
            state = cluster.wait_run(REMEDIATION, run_id, timeout=120)
            states = cluster.task_states(REMEDIATION, run_id)
            logs = cluster.task_logs(REMEDIATION, run_id, lines=200)
            assert state == "success", f"{states}\n{logs}"
            assert states == {
                "read_event": "success",
                "restart_job": "skipped",
                "wait_caught_up": "skipped",
            }, states
            assert "no asset event (a manual run): nothing to restart" in logs, logs
        finally:  # test_event_trigger_airflow counts this DAG's runs in the same deployment
            cluster.api("DELETE", f"/dags/{REMEDIATION}/dagRuns/{quote(run_id, safe='')}")
    finally:
        for dag_id in dags:
            cluster.pause(dag_id)


@pytest.mark.testbed
@pytest.mark.timeout(240)
def test_connection_form_offers_sparklag_and_its_test_button_reads_the_checkpoint(
    deployment, kafka, kafka_conn, healthy_job
):
    """What the UI's connection form asks the API server: the connection types with their
    fields, then ``POST /api/v2/connections/test`` for the Test button."""
    from airflow_sparklag.hooks.bundle import FIELDS

    cluster = deployment.running()
    types = {meta["connection_type"]: meta for meta in cluster.ui("GET", "/connections/hook_meta")}
    sparklag = types["sparklag"]
    assert sparklag["hook_name"] == "Spark Kafka lag"
    assert sparklag["hook_class_name"] == "airflow_sparklag.hooks.sparklag.SparkLagHook"
    assert list(sparklag["extra_fields"]) == list(FIELDS)
    kafka_field = sparklag["extra_fields"]["kafka_config_id"]
    assert kafka_field["value"] == "kafka_default"
    assert kafka_field["schema"]["title"] == "Kafka connection id"
    hidden = {
        name for name, field in sparklag["standard_fields"].items() if field and field["hidden"]
    }
    assert hidden == {"host", "url_schema", "login", "password", "port"}

    def test_button(extra: dict[str, object]) -> dict[str, object]:
        # The body the UI posts: hidden standard fields empty, port 0, every form field in
        # the extra (unused ones null).
        fields = dict.fromkeys(FIELDS, None)
        body = {
            "connection_id": "lag_smoke",
            "conn_type": "sparklag",
            "description": "",
            "host": "",
            "login": "",
            "password": "",
            "port": 0,
            "schema": "",
            "extra": json.dumps({**fields, **extra}),
        }
        return dict(cluster.api("POST", "/connections/test", body))

    result = test_button({"kafka_config_id": kafka_conn, "location": healthy_job.location})
    assert result["status"] is True, result
    message = str(result["message"])
    assert f"Kafka {kafka.bootstrap} answered" in message, message
    assert f"checkpoint {healthy_job.location} read: committed batch" in message, message
    assert f"{healthy_job.topic} (3 partitions)" in message, message

    result = test_button({"kafka_config_id": kafka_conn, "aws_con_id": "aws_default"})
    assert result["status"] is False, result
    assert "extra.aws_con_id: unknown key" in str(result["message"]), result
    print(f"Test button in a real deployment: {message}")
