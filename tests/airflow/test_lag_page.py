"""The "Streaming lag" page (airflow_sparklag/airflow/lag_page.py) in a real Airflow.

A real ``airflow dags test`` run checks three configured jobs, two of which fail (a missing
checkpoint, a mistyped threshold): the failed tasks record CHECK_FAILED in XCom. A longer
history (a job's checks over an hour, with the thresholds Airflow keeps as rendered fields), a
STOPPED job and a fleet scan's results are recorded in the same metadata database the way runs
leave them. A real ``airflow api-server`` loads the plugin from its entry point; the test reads
the served HTML, and headless Chromium renders both views (``SPARKLAG_SCREENSHOTS=1`` copies
them to docs/images/). The tests of the page's SQL run twice (``metadata_db``): on SQLite and on
a real PostgreSQL metadata database (testbed/postgres.py), where most deployments keep it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone
from html import escape
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.lag import MAY_KEEP_PACE, ONE_BATCH
from airflow_sparklag.render import seconds_text
from testbed.process import free_port, log_tail
from tests.airflow.conftest import MetadataDb, airflow_env
from tests.airflow.test_dags import dags_test, run_state
from tests.airflow.test_lag_page_parts import judged

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "docs" / "images"
BUNDLE = "sparklag-page-test"


def record_checks(
    checks: list[dict[str, Any]], bundle: str = BUNDLE, team: str | None = None
) -> None:
    """One DAG run per check: DagModel, DagRun, TaskInstance (operator class name) and XCom;
    the DAGs in ``bundle``, owned by ``team`` (multi-team mode) when given."""
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.dagrun import DagRun
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.team import Team
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import insert

    with create_session() as session:
        if session.get(DagBundleModel, bundle) is None:
            model = DagBundleModel(name=bundle)
            model.teams = [Team(name=team)] if team else []
            session.add(model)
            session.flush()
        for dag_id in sorted({c["dag_id"] for c in checks}):
            session.add(DagModel(dag_id=dag_id, fileloc="/dags/x.py", bundle_name=bundle))
        session.flush()
        for c in checks:
            at = c["at"]
            run = session.execute(
                insert(DagRun.__table__)
                .values(
                    dag_id=c["dag_id"],
                    run_id=c["run_id"],
                    state="success",
                    run_type="manual",
                    logical_date=at,
                    run_after=at,
                    start_date=at,
                    end_date=at,
                    clear_number=0,
                    conf={},
                )
                .returning(DagRun.__table__.c.id)
            ).scalar_one()
            session.execute(
                insert(TaskInstance.__table__).values(
                    id=uuid.uuid4(),
                    dag_id=c["dag_id"],
                    run_id=c["run_id"],
                    task_id=c["task_id"],
                    map_index=-1,
                    operator=c["operator"],
                    state="success",
                    try_number=1,
                    pool="default_pool",
                    pool_slots=1,
                    queue="default",
                    priority_weight=1,
                    max_tries=0,
                    hostname="",
                    unixname="",
                    executor_config={},
                    start_date=at,
                    end_date=at,
                )
            )
            session.execute(
                insert(XComModel.__table__).values(
                    dag_run_id=run,
                    task_id=c["task_id"],
                    map_index=-1,
                    key=c.get("key", "return_value"),
                    dag_id=c["dag_id"],
                    run_id=c["run_id"],
                    timestamp=at,
                    # as the Task Execution API stores it (JSON); XComModel.set's default
                    # stores JSON text, which the page reads too
                    value=XComModel.serialize_value(c["value"]) if c.get("text") else c["value"],
                )
            )
            if "thresholds" in c:  # what Airflow keeps of the rendered template fields
                session.execute(
                    insert(RenderedTaskInstanceFields.__table__).values(
                        dag_id=c["dag_id"],
                        run_id=c["run_id"],
                        task_id=c["task_id"],
                        map_index=-1,
                        rendered_fields={"thresholds": c["thresholds"]},
                    )
                )


def check_result(location: str, lag: int, limit: int, health: str | None = None) -> dict:
    """A ``CheckResult.to_dict()`` as SparkLagCheckOperator returns it (the fields shown)."""
    breach = lag > limit
    split = (lag // 2, lag // 3, lag - lag // 2 - lag // 3)  # three partitions, 0 lags most
    partitions = [
        {"topic": "orders", "partition": p, "lag": part, "lag_seconds": part / 10}
        for p, part in enumerate(split)
    ]
    return {
        "location": location,
        "error": None,
        "verdict": {
            "health": health or ("LAGGING" if breach else "OK"),
            "reason": f"total lag {lag} > {limit}" if breach else f"lag {lag} record(s)",
            "rule": "max_lag_records_total",
        },
        "report": {
            "total_lag": lag,
            "max_lag_seconds": lag / 10,
            "commit_age_seconds": 30.0,
            "catch_up_seconds": None,
            "sources": [{"topics": [{"partitions": partitions}]}],
        },
    }


JOBS_DAG = """
from datetime import datetime
from airflow.sdk import DAG
from airflow_sparklag.operators.sparklag import SparkLagCheckOperator

with DAG("{dag_id}", start_date=datetime(2026, 1, 1), schedule=None):
    SparkLagCheckOperator.partial(
        task_id="check_sla", map_index_template="{{{{ task.metric_name }}}}",
        kafka_config_id={conn!r}, retries=0,
    ).expand_kwargs({jobs!r})
"""


def run_configured_jobs(
    dag_id: str, jobs: list[dict], conn: str, tmp_path: Path, database: MetadataDb
) -> str:
    """``airflow dags test`` of one mapped check per job (the SLA DAG's shape)."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "jobs_dag.py").write_text(JOBS_DAG.format(dag_id=dag_id, conn=conn, jobs=jobs))
    env = {**airflow_env(tmp_path), **database.env}
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    return dags_test(dag_id, {}, env, timeout=300)


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def rows(html: str) -> list[tuple[str, str]]:
    """(health, job name) of each table row, in order."""
    return re.findall(
        r'<tr class="job" data-health="([A-Z_]+)"><td><a class="name" href="[^"]*">([^<]*)</a>',
        html,
    )


def background(health: str) -> str:
    from airflow_sparklag.airflow.lag_html import STYLE

    match = re.search(r"\.health-" + health + r"\{background:(#[0-9a-f]+)", STYLE)
    assert match, health
    return match.group(1)


def start_api_server(
    database: MetadataDb, log: Path, **config: str
) -> tuple[subprocess.Popen[bytes], str]:
    """``airflow api-server`` on ``database`` (every user an admin unless ``config``,
    AIRFLOW__ names, says otherwise)."""
    port = free_port()
    env = {
        **os.environ,
        **database.env,
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        **config,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "PYTHONUNBUFFERED": "1",
        # the plugin of this checkout, not of wherever the package is installed from
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [airflow, "api-server", "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.5)
    stop(proc)
    pytest.fail(f"airflow api-server did not start; log {log}:\n{log_tail(log)}")


def get_as(url: str, token: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def login(url: str, user: str, password: str) -> str:
    """A JWT from the simple auth manager's login endpoint, as the UI gets one."""
    body = json.dumps({"username": user, "password": password}).encode()
    request = urllib.request.Request(
        f"{url}/auth/token", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.load(response)["access_token"])


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


def chromium(*args: str, timeout: float = 60) -> str:
    binary = shutil.which("chromium")
    assert binary, "chromium is not installed: run scripts/setup.sh (Debian package chromium)"
    done = subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_page_refuses_requests_without_airflow_login():
    """The plugin's route depends on the API server's get_user: no JWT, no page."""
    from fastapi.testclient import TestClient

    from airflow_sparklag.airflow.lag_page import create_app

    response = TestClient(create_app()).get("/")
    assert response.status_code == 401
    assert "Streaming lag" not in response.text


@pytest.mark.testbed
def test_fleet_page_shows_every_configured_job(metadata_db, kafka_conn, healthy_job, tmp_path):
    """On SQLite and on PostgreSQL (the page's queries read JSON in the database)."""
    tag = uuid.uuid4().hex[:6]
    jobs_dag, missing = f"sparklag_jobs_{tag}", str(tmp_path / "never-written")
    configured = [
        {"location": healthy_job.location, "metric_name": f"orders-{tag}", "thresholds": {}},
        {"location": missing, "metric_name": f"payments-{tag}", "thresholds": {}},
        {
            "location": healthy_job.location + "-typo",
            "metric_name": f"clicks-{tag}",
            "thresholds": {"max_lag_record": 5},  # mistyped: the task fails before reading
        },
    ]
    output = run_configured_jobs(jobs_dag, configured, kafka_conn, tmp_path, metadata_db)
    assert "CheckpointNotFound" in output, output[-4000:]

    # 15 checks of one job (with its thresholds), a STOPPED job, a fleet scan's results.
    history, sla, scan = f"s3a://lake/ck/history-{tag}", f"sla_{tag}", f"sparklag_fleet_scan_{tag}"
    stopped = judged(f"/ck/stopped-{tag}", 700, 3600.0, {"max_commit_age_seconds": 600})
    t0 = datetime.now(timezone.utc) - timedelta(hours=1)
    lags = [0, 0, 300, 600, 800, 1200, 1500, 2400, 3000] + [5400, 9100] * 3
    checks: list[dict[str, Any]] = [
        {
            "dag_id": sla,
            "run_id": f"scheduled__{i}",
            "task_id": f"history_{tag}",
            "operator": "SparkLagCheckOperator",
            "at": t0 + timedelta(minutes=2 * i),
            "value": check_result(history, lag, 5000),
            "thresholds": {
                "max_lag_records_total": 5000,
                "max_lag_seconds": 600,
                "max_lag_records_per_partition": 4000,
            },
        }
        for i, lag in enumerate(lags)
    ]
    checks.append(
        {
            "dag_id": sla,
            "run_id": "scheduled__stopped",
            "task_id": f"stopped_{tag}",
            "operator": "SparkLagCheckOperator",
            "at": t0 + timedelta(minutes=31),
            # a real verdict and report (health.evaluate): its own reason, its unknowns
            "value": stopped,
            "text": True,  # stored as JSON text
        }
    )
    checks.append(
        {
            "dag_id": scan,
            "run_id": "scheduled__scan",
            "task_id": "fleet_scan",
            "operator": "@task",
            "key": "sparklag_results",
            "at": t0 + timedelta(minutes=35),
            "value": [
                {
                    "location": f"s3a://lake/ck/<idle>-{tag}",
                    "health": "UNKNOWN",
                    "reason": "no batch",
                },
                {
                    "location": f"s3a://lake/ck/gone-{tag}",
                    "health": "UNKNOWN",
                    "reason": "unreadable",
                    "error": "CheckpointNotFound: s3a://lake/ck/gone",
                },
            ],
        }
    )
    with metadata_db.current():
        record_checks(checks)

    proc, url = start_api_server(metadata_db, tmp_path / "api-server.log")
    try:
        started = time.monotonic()
        fleet = get(f"{url}/sparklag/")
        first_page = time.monotonic() - started
        stopped_only = get(f"{url}/sparklag/?health=STOPPED")
        searched = get(f"{url}/sparklag/?q=orders-{tag}")
        trends = json.loads(get(f"{url}/sparklag/trends"))
        job_view = get(f"{url}/sparklag/job?location={history}")
        shots = {}
        views = (("fleet", "/sparklag/", 900), ("job", f"/sparklag/job?location={history}", 1400))
        for name, path, height in views:
            shots[name] = tmp_path / f"{name}.png"
            chromium(
                f"--window-size=1200,{height}",
                "--virtual-time-budget=10000",  # the sparklines' fetch ends before the shot
                f"--screenshot={shots[name]}",
                f"{url}{path}",
            )
    finally:
        stop(proc)

    mine = [(health, name) for health, name in rows(fleet) if tag in name]
    assert mine == [  # failed checks first (then by name), then worst to best
        ("CHECK_FAILED", f"clicks-{tag}"),
        ("CHECK_FAILED", f"gone-{tag}"),
        ("CHECK_FAILED", f"payments-{tag}"),
        ("STOPPED", f"stopped_{tag}"),
        ("LAGGING", f"history_{tag}"),
        ("UNKNOWN", f"&lt;idle&gt;-{tag}"),  # escaped, not markup
        ("OK", f"orders-{tag}"),
    ], fleet[:3000]
    assert "max_lag_record" in fleet and "CheckpointNotFound" in fleet  # the errors, shown
    assert re.search(r"CHECK_FAILED \d+</a>", fleet) and re.search(r"STOPPED \d+</a>", fleet)
    assert {h for h, _ in rows(stopped_only)} == {"STOPPED"}
    # the STOPPED job's reason is its verdict's; its unknown catch-up says why
    assert f'<td class="reason">{escape(stopped["verdict"]["reason"])}</td>' in stopped_only
    assert f'unknown<span class="why">{ONE_BATCH}</span>' in stopped_only
    assert "within thresholds" not in fleet
    assert [name for _, name in rows(searched)] == [f"orders-{tag}"]
    assert background("STOPPED") != background("UNKNOWN") != background("CHECK_FAILED")

    # the job view: a time axis, both thresholds, y labels left of the plot, links to the TIs;
    # four charts: total lag, time lag, lag per partition in records and in time (a line each)
    assert len(re.findall(r'class="axis x-label"[^>]*>\d\d:\d\d<', job_view)) == 20
    partitions = ["orders-0", "orders-1", "orders-2"]
    assert re.findall(r'data-line="([^"]*)"', job_view) == ["", "", *partitions, *partitions]
    assert "max_lag_records_per_partition 4,000</text>" in job_view
    assert "max_lag_records_total 5,000</text>" in job_view
    assert "max_lag_seconds 10.0m</text>" in job_view
    plot_left = min(float(x) for x in re.findall(r'<circle class="point" cx="([\d.]+)"', job_view))
    y_labels = re.findall(r'class="axis y-label" x="([\d.]+)"[^>]*text-anchor="end"', job_view)
    assert y_labels and all(float(x) < plot_left for x in y_labels)
    # the sparklines come after the table: a task's newest 12 checks; the job view all 15
    assert [lag for _, lag in trends[history]] == lags[-12:]
    assert job_view.count('href="/dags/' + sla + "/runs/scheduled__") == 15
    assert all(shot.stat().st_size > 10_000 for shot in shots.values())
    assert first_page < 5, first_page
    if os.environ.get("SPARKLAG_SCREENSHOTS") == "1":
        shutil.copyfile(shots["fleet"], SCREENSHOTS / "streaming-lag-fleet.png")
        shutil.copyfile(shots["job"], SCREENSHOTS / "streaming-lag-job.png")
    print(f"fleet page served in {first_page:.2f}s")


@pytest.mark.testbed
def test_page_queries_read_every_kind_of_xcom(metadata_db):
    """The page's queries, in this process, on each database: the fields read out of the JSON
    by the database (numbers past a double's precision, tiny floats, "infinite", None, quotes
    and non-ASCII text), values stored as JSON text, a failed check, a fleet check's and a
    scan's values read whole, another operator's XCom left out, a user who may read nothing."""
    from airflow_sparklag.airflow.lag_page import job_history, load_table, load_thresholds

    tag = uuid.uuid4().hex[:6]
    at = datetime.now(timezone.utc) - timedelta(minutes=10)
    big = 2**53 + 1  # not a double: read as text, it must stay exact
    ok = check_result(f"/ck/ok-{tag}", big, 5000)
    ok["verdict"]["reason"] = "läuft \"gut\" 'so' \\ ✓"
    ok["report"].update(max_lag_seconds=1e-7, min_time_to_loss_seconds="infinite")
    ok["report"]["pace"] = {"batch_seconds": 9.2, "ratio": 0.92, "interval_seconds": 10.0}
    ok["report"]["unknown"] = {"catch_up_seconds": MAY_KEEP_PACE}  # read out of the JSON
    unmeasured = check_result(f"/ck/unmeasured-{tag}", 0, 5000, health="UNKNOWN")
    unmeasured["report"].update(total_lag=None, max_lag_seconds=None, commit_age_seconds=None)
    failed = {
        "location": f"/ck/failed-{tag}",
        "error": "CheckpointNotFound: gone",
        "verdict": {"health": "CHECK_FAILED", "reason": "gone"},
        "report": None,
    }
    fleet = {
        "schema": "sparklag/1",
        "command": "fleet",
        "summary": {"jobs": 2, "failed_checks": 0},
        "results": [check_result(f"/ck/fleet-a-{tag}", 7, 5000)],
        "failing": [{"location": f"/ck/fleet-b-{tag}", "health": "STALLED", "total_lag": 3}],
    }

    def document(result: dict) -> dict:  # what a check task leaves (docs/json.md)
        summary = {"jobs": 1, "failed_checks": int(result["error"] is not None)}
        return {"schema": "sparklag/1", "command": "check", "summary": summary,
                "results": [result]}  # fmt: skip

    scan = [{"location": f"/ck/scan-{tag}", "health": "OK", "total_lag": 0}]
    values = [
        ("ok", "SparkLagCheckOperator", "return_value", document(ok), False),
        # an XCom of a version before the document: a bare result, still read
        ("text", "SparkLagSensor", "return_value", unmeasured, True),
        ("failed", "SparkLagBranchOperator", "report", document(failed), False),
        ("fleet", "SparkLagFleetCheckOperator", "return_value", fleet, False),
        ("scan", "@task", "sparklag_results", scan, True),
        ("other", "PythonOperator", "return_value", check_result(f"/ck/x-{tag}", 1, 9), False),
    ]
    checks = [
        {"dag_id": f"kinds_{name}_{tag}", "run_id": "manual__1", "task_id": f"{name}_{tag}",
         "operator": operator, "key": key, "at": at, "value": value, "text": text,
         "thresholds": {"max_lag_records_total": 5000}}
        for name, operator, key, value, text in values
    ]  # fmt: skip
    with metadata_db.current():
        record_checks(checks)
        jobs = {j.location: j.last for j in load_table(None) if tag in j.location}
        history = job_history(None, f"/ck/ok-{tag}")
        thresholds = load_thresholds(history.last) if history else None
        nothing = load_table(set())
    seen = {
        location.split("/")[-1].rsplit("-", 1)[0]: (c.health, c.total_lag, c.max_lag_seconds)
        for location, c in jobs.items()
    }
    assert seen == {
        "ok": ("LAGGING", big, 1e-7),
        "unmeasured": ("UNKNOWN", None, None),
        "failed": ("CHECK_FAILED", None, None),
        "fleet-a": ("OK", 7, 0.7),
        "fleet-b": ("STALLED", 3, None),
        "scan": ("OK", 0, None),
    }
    first = jobs[f"/ck/ok-{tag}"]
    assert first.reason == ok["verdict"]["reason"] and first.name == f"ok_{tag}"
    assert first.min_time_to_loss_seconds == float("inf")
    assert (first.batch_seconds, first.batch_time_ratio) == (9.2, 0.92)  # report.pace's
    assert first.unknown == {"catch_up_seconds": MAY_KEEP_PACE}
    assert jobs[f"/ck/failed-{tag}"].reason == "CheckpointNotFound: gone"
    assert history is not None and history.last.report == ok["report"]  # read whole
    assert thresholds == {"max_lag_records_total": 5000}
    assert nothing == []


@pytest.mark.testbed
def test_a_check_of_many_partitions_stores_a_bounded_xcom_the_page_reads(
    kafka, kafka_conn, consume, tmp_path
):
    """A real check of a real 30-partition checkpoint (partition p lags p + 1 records): its
    XCom lists the 20 that lag most in full and every partition's offsets and lag in columns
    (airflow_sparklag/compact.py); the job view reads all 30 from it."""
    from airflow_sparklag.airflow.lag_html import job_page
    from airflow_sparklag.airflow.lag_page import collect
    from airflow_sparklag.operators.sparklag import SparkLagCheckOperator
    from tests.airflow.test_sensors_operators import context

    topic = kafka.create_topic(f"af-many-{uuid.uuid4().hex[:6]}", partitions=30)
    kafka.produce(topic, 90)
    job = consume(topic, str(tmp_path / "many"))
    for partition in range(30):
        kafka.produce(topic, partition + 1, partition=partition, start=1000)
    check = SparkLagCheckOperator(task_id="many", location=job.location, kafka_config_id=kafka_conn)
    payload = check.execute(context())
    json.dumps(payload, allow_nan=False)  # what XCom stores
    report = payload["results"][0]["report"]
    (orders,) = report["sources"][0]["topics"]
    assert [p["partition"] for p in orders["partitions"]] == list(range(10, 30))
    assert orders["partition_columns"]["lag"] == [p + 1 for p in range(30)]
    assert orders["partition_columns"]["committed_offset"] == [job.committed[p] for p in range(30)]
    assert report["partitions_listed"]["total"] == 30 and report["total_lag"] == 465
    at = datetime.now(timezone.utc)
    html = job_page(collect([("d", "r", "many", -1, None, at, payload)])[0], {}, "")
    assert "8 of 30 partitions" in html
    assert html.count(f"<tr><td>{topic}</td>") == 30  # the newest check's partitions table


@pytest.mark.testbed
def test_job_view_charts_each_batch_time_against_the_trigger(spark, kafka, kafka_conn, tmp_path):
    """Issue 34 item 3's chart, from a real query: a 3 s processing-time trigger whose
    foreachBatch takes ~0.8 s, fed at 10 records/s, checked by the real operator. The job
    view draws each batch of the window the check read at the time it was planned, with the
    trigger interval the check measured and ``max_batch_time_ratio`` of it as dashed lines;
    headless Chromium renders it."""
    from airflow_sparklag.airflow.lag_html import job_page
    from airflow_sparklag.airflow.lag_page import collect
    from airflow_sparklag.operators.sparklag import SparkLagCheckOperator
    from testbed import jobs
    from tests.airflow.test_sensors_operators import context

    topic = kafka.create_topic(f"af-pace-{uuid.uuid4().hex[:6]}", partitions=1)
    with jobs.trickle(kafka, topic, 10):
        df = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic], starting="latest")
        query = jobs.start_query(
            df,
            str(tmp_path / "ck"),
            sink="foreachBatch",
            foreach_batch=lambda _df, _id: time.sleep(0.8),
            trigger={"processingTime": "3 seconds"},
        )
        try:
            commits = tmp_path / "ck" / "commits"  # the sleep reads no rows: count files
            jobs.wait_until(lambda: len(list(commits.glob("[0-9]*"))) >= 6, 180, "6 batches")
            check = SparkLagCheckOperator(
                task_id="paced",
                location=str(tmp_path / "ck"),
                kafka_config_id=kafka_conn,
                thresholds={"max_batch_time_ratio": 0.9},
            )
            payload = check.execute(context())
        finally:
            jobs.stop_quietly(query)
    json.dumps(payload, allow_nan=False)  # what XCom stores
    pace = payload["results"][0]["report"]["pace"]
    assert len(pace["batch_times"]) == len(pace["batch_starts_ms"]) >= 5, pace
    assert pace["interval_seconds"] is not None and abs(pace["interval_seconds"] - 3) < 0.5, pace
    at = datetime.now(timezone.utc)
    job = collect([("d", "r", "paced", -1, None, at, payload)])[0]
    html = job_page(job, {"max_batch_time_ratio": 0.9}, "")
    chart = html.split("<h2>Batch time against the trigger</h2>", 1)[1].split("<h2>", 1)[0]
    circles = re.findall(r'<circle class="point" cx="([\d.]+)" cy="([\d.]+)"', chart)
    assert len(circles) == len(pace["batch_times"]), chart[:2000]
    xs = [float(x) for x, _ in circles]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)  # one per batch, by its planning time
    interval = pace["interval_seconds"]
    assert f"trigger interval {seconds_text(interval)}</text>" in chart
    assert f"max_batch_time_ratio 90% {seconds_text(0.9 * interval)}</text>" in chart
    page_file = tmp_path / "job.html"
    page_file.write_text(html)
    shot = tmp_path / "job.png"
    chromium("--window-size=1200,1800", f"--screenshot={shot}", page_file.as_uri())
    assert shot.stat().st_size > 10_000
    rendered = chromium("--dump-dom", page_file.as_uri())
    assert rendered.count('<circle class="point"') >= len(circles)


@pytest.mark.testbed
def test_fleet_scan_dag_results_are_on_the_page(airflow_db, kafka, healthy_job, tmp_path):
    """The sparklag_fleet_scan DAG (spark-submit over a prefix) pushes each checkpoint's
    result under ``sparklag_results``: a real one is OK, a damaged one a failed check with its
    error. (SQLite only: the scan's XCom is a list of jobs, which the PostgreSQL run of the
    test above records too; the Spark run is what costs here.)"""
    from airflow_sparklag.airflow.lag_page import load_table

    tag = uuid.uuid4().hex[:6]
    prefix = tmp_path / "fleet"
    shutil.copytree(healthy_job.location, prefix / f"scanned-{tag}")
    (prefix / f"broken-{tag}" / "offsets").mkdir(parents=True)
    (prefix / f"broken-{tag}" / "offsets" / "0").write_text("not an offsets file")
    conf = {
        "prefix": str(prefix),
        "bootstrap_servers": kafka.bootstrap,
        "output": str(tmp_path / "scan"),
        "master": "local[1]",
    }
    scanned = dags_test("sparklag_fleet_scan", conf, airflow_env(tmp_path), timeout=300)
    assert run_state(scanned) == "success", scanned[-4000:]
    found = {job.name: job.last for job in load_table(None) if tag in job.name}
    assert {name: check.health for name, check in found.items()} == {
        f"broken-{tag}": "CHECK_FAILED",
        f"scanned-{tag}": "OK",
    }
    assert found[f"broken-{tag}"].reason.startswith("CheckpointCorrupt")


@pytest.mark.testbed
def test_only_users_who_may_read_a_dag_see_its_jobs(metadata_db, tmp_path):
    """Multi-team mode of the simple auth manager: each team's viewer reads its own team's
    DAGs (and those of no team), so sees only those jobs; a job of another team's DAG is a 404
    in the job view and absent from the sparklines' data."""
    tag = uuid.uuid4().hex[:6]
    at = datetime.now(timezone.utc) - timedelta(minutes=5)
    for team in ("a", "b"):
        location = f"/ck/team-{team}-{tag}"
        check = {
            "dag_id": f"sla_{team}_{tag}", "run_id": "manual__1", "task_id": f"job_{team}_{tag}",
            "operator": "SparkLagCheckOperator", "at": at,
            "value": check_result(location, 10, 5000),
        }  # fmt: skip
        with metadata_db.current():
            record_checks([check], bundle=f"bundle-{team}-{tag}", team=f"team_{team}_{tag}")
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({"alice": "alice-pw", "bob": "bob-pw"}))
    config = {
        "AIRFLOW__CORE__MULTI_TEAM": "True",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": (
            f"alice:viewer:team_a_{tag},bob:viewer:team_b_{tag}"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
    }
    proc, url = start_api_server(metadata_db, tmp_path / "api-server.log", **config)
    try:
        alice, bob = login(url, "alice", "alice-pw"), login(url, "bob", "bob-pw")
        fleet = {
            user: get_as(f"{url}/sparklag/", token)
            for user, token in (("alice", alice), ("bob", bob))
        }
        job_a = f"{url}/sparklag/job?location=/ck/team-a-{tag}"
        views = {user: get_as(job_a, token)[0] for user, token in (("alice", alice), ("bob", bob))}
        trends = json.loads(get_as(f"{url}/sparklag/trends", bob)[1])
    finally:
        stop(proc)
    assert fleet["alice"][0] == fleet["bob"][0] == 200
    assert [n for _, n in rows(fleet["alice"][1]) if tag in n] == [f"job_a_{tag}"]
    assert [n for _, n in rows(fleet["bob"][1]) if tag in n] == [f"job_b_{tag}"]
    assert f"team-a-{tag}" not in fleet["bob"][1]
    assert views == {"alice": 200, "bob": 404}
    assert f"/ck/team-b-{tag}" in trends and f"/ck/team-a-{tag}" not in trends


@pytest.mark.testbed
def test_a_failed_check_records_check_failed_in_xcom(kafka_conn, tmp_path):
    """Each check class pushes CHECK_FAILED with its error where a result would go, then fails."""
    from airflow.providers.common.compat.sdk import AirflowException

    from airflow_sparklag.operators.sparklag import SparkLagBranchOperator, SparkLagCheckOperator
    from airflow_sparklag.sensors.sparklag import SparkLagSensor
    from tests.airflow.test_sensors_operators import context, only

    missing = str(tmp_path / "none")
    tasks = [
        (
            SparkLagCheckOperator(task_id="c", location=missing, kafka_config_id=kafka_conn),
            "return_value",
        ),
        (
            SparkLagBranchOperator(
                task_id="b", location=missing, kafka_config_id=kafka_conn, default_task_id="x"
            ),
            "report",
        ),
        (
            SparkLagSensor(
                task_id="s", location=missing, kafka_config_id=kafka_conn, deferrable=False
            ),
            "return_value",
        ),
    ]
    for task, key in tasks:
        ctx = context()
        with pytest.raises(AirflowException, match="CheckpointNotFound"):
            task.execute(ctx)
        pushed = only(ctx["ti"].pushed[key])  # the document a check leaves (docs/json.md)
        assert pushed["location"] == missing and pushed["report"] is None
        assert pushed["verdict"]["health"] == "CHECK_FAILED"
        assert "CheckpointNotFound" in pushed["error"] and missing in pushed["error"]
