"""The "Streaming lag" page (airflow_sparklag/airflow/lag_page.py) in a real browser.

Checks are recorded in the suite's metadata database the way runs leave them (a DAG, a DAG run,
a task instance of the operator's class, its XCom return value), then a real ``airflow
api-server`` loads the provider's plugin from its entry point and headless Chromium renders the
page. ``SPARKLAG_SCREENSHOTS=1`` also writes docs/images/streaming-lag-page.png.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from testbed.process import free_port, log_tail

REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO / "docs" / "images" / "streaming-lag-page.png"
BUNDLE = "sparklag-page-test"


def record_checks(checks: list[dict[str, Any]]) -> None:
    """One DAG run per check: DagModel, DagRun, TaskInstance (operator class name) and XCom."""
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import insert

    with create_session() as session:
        if session.get(DagBundleModel, BUNDLE) is None:
            session.add(DagBundleModel(name=BUNDLE))
            session.flush()
        for dag_id in sorted({c["dag_id"] for c in checks}):
            session.add(DagModel(dag_id=dag_id, fileloc="/dags/x.py", bundle_name=BUNDLE))
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
                    key="return_value",
                    dag_id=c["dag_id"],
                    run_id=c["run_id"],
                    timestamp=at,
                    value=XComModel.serialize_value(c["value"]),
                )
            )


def check_result(location: str, lag: int, limit: int) -> dict[str, Any]:
    """A ``CheckResult.to_dict()`` as SparkLagCheckOperator returns it (the fields shown)."""
    health = "LAGGING" if lag > limit else "OK"
    reason = f"total lag {lag} > {limit}" if lag > limit else "within thresholds"
    return {
        "location": location,
        "error": None,
        "verdict": {"health": health, "reason": reason, "rule": "max_lag_records_total"},
        "report": {"total_lag": lag, "max_lag_seconds": None},
    }


def start_api_server(home: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "PYTHONUNBUFFERED": "1",
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


def section(dom: str, location: str) -> str:
    """The HTML of the page's section for ``location`` (as escaped in the page)."""
    from html import escape

    match = re.search(
        r'<section class="job"><h2 class="location">'
        + re.escape(escape(location))
        + r"</h2>(.*?)</section>",
        dom,
        re.S,
    )
    assert match, f"{location} is not on the page:\n{dom[:3000]}"
    return match.group(1)


def test_streaming_lag_page_in_chromium(airflow_db, tmp_path):
    tag = uuid.uuid4().hex[:6]
    orders, clicks = f"s3a://lake/ck/orders-{tag}", f"s3a://lake/ck/<clicks>-{tag}"
    sla, fleet = f"sparklag_sla_check_{tag}", f"sparklag_fleet_scan_{tag}"
    t0 = datetime.now(timezone.utc) - timedelta(hours=1)
    checks: list[dict[str, Any]] = [
        {
            "dag_id": sla,
            "run_id": f"scheduled__{i}",
            "task_id": "check_orders",
            "operator": "SparkLagCheckOperator",
            "at": t0 + timedelta(minutes=10 * i),
            "value": check_result(orders, lag, 5000),
        }
        for i, lag in enumerate([0, 1200, 5400, 9100])
    ]
    checks.append(
        {
            "dag_id": fleet,
            "run_id": "scheduled__fleet",
            "task_id": "fleet",
            "operator": "SparkLagFleetCheckOperator",
            "at": t0 + timedelta(minutes=35),
            "value": {
                "jobs": 3,
                "health": {"OK": 2, "DATA_LOSS": 1},
                "storage_requests": 9,
                "failing": [
                    {
                        "location": clicks,
                        "health": "DATA_LOSS",
                        "reason": "offsets deleted by retention",
                        "total_lag": 42,
                        "max_lag_seconds": None,
                        "error": None,
                    }
                ],
            },
        }
    )
    started = time.monotonic()
    record_checks(checks)
    proc, url = start_api_server(Path(airflow_db), tmp_path / "api-server.log")
    try:
        server_up = time.monotonic() - started
        dom = chromium("--dump-dom", f"{url}/sparklag/")
        shot = tmp_path / "page.png"
        chromium("--window-size=1000,900", f"--screenshot={shot}", f"{url}/sparklag/")
    finally:
        stop(proc)
    assert "<h1>Streaming lag</h1>" in dom
    mine = section(dom, orders)
    assert '<span class="badge health-LAGGING">LAGGING</span>' in mine
    assert "total lag 9100 &gt; 5000" in mine
    assert len(re.findall(r'<circle class="point"', mine)) == 4
    assert mine.count('class="run"') == 4
    assert f'href="/dags/{sla}/runs/scheduled__3"' in mine
    theirs = section(dom, clicks)  # the fleet's failing job; its "<" escaped, not markup
    assert '<span class="badge health-DATA_LOSS">DATA_LOSS</span>' in theirs
    assert len(re.findall(r'<circle class="point"', theirs)) == 1
    assert f'href="/dags/{fleet}/runs/scheduled__fleet"' in theirs
    assert shot.stat().st_size > 10_000
    if os.environ.get("SPARKLAG_SCREENSHOTS") == "1":
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)
    print(f"api-server up {server_up:.1f}s, page checks {time.monotonic() - started:.1f}s")


def test_page_refuses_requests_without_airflow_login():
    """The plugin's route depends on the API server's get_user: no JWT, no page."""
    from fastapi.testclient import TestClient

    from airflow_sparklag.airflow.lag_page import create_app

    response = TestClient(create_app()).get("/")
    assert response.status_code == 401
    assert "Streaming lag" not in response.text
