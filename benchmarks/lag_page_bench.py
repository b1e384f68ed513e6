"""First paint of the "Streaming lag" page at 500 jobs x 50 checks, measured in Chromium.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lag_page_bench.py [--jobs 500] [--checks 50]
        [--partitions 8] [--loads 5] [--postgres] [--full]

In one run:

1. a throwaway ``AIRFLOW_HOME`` with a SQLite metadata database (``airflow db migrate``), or
   with ``--postgres`` a PostgreSQL one (``testbed/postgres.py``: Debian's server, started for
   the run in the work directory and stopped after it);
2. the checks as Airflow 3 leaves them: ``--jobs / 50`` DAGs, each ``--checks`` runs of one
   mapped ``SparkLagCheckOperator`` task with 50 map indexes (the SLA DAG's shape, named by
   ``map_index_template``), each task instance's XCom a ``CheckResult.to_dict()`` shaped like
   a real one (``--partitions`` partitions with their offset history, 10 batches of history;
   ~6 KB at 8 partitions) in the bounded form the operators store (``airflow_sparklag.compact``;
   ``--full``: every partition in full, as before it) as the Task Execution API stores it (JSON),
   and the rendered ``thresholds`` Airflow keeps;
3. a real ``airflow api-server`` (simple auth manager, every user admin) loading the plugin
   from its entry point, and headless Chromium driven over the DevTools protocol: one warm-up
   load, then ``--loads`` loads of the fleet table and of one job's view with the cache off.

Prints, per view: the median and worst first contentful paint (navigation start to the first
paint, ``performance.getEntriesByType("paint")``), the server's time to first byte, when the
table's sparklines were drawn (they come from a second request, ``trends``), the api-server's
CPU time per load (a figure other processes on the machine do not change) and the HTML size.
The issue's target: the fleet table's first paint <= 1 s on this machine.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from airflow_sparklag.compact import compact  # noqa: E402

BIN = Path(sys.executable).parent
JOBS_PER_DAG = 50
BUNDLE = "sparklag-bench"


def check_value(location: str, lag: int, partitions: int, at: float) -> dict[str, Any]:
    """A ``CheckResult.to_dict()`` with the fields and sizes of a real one."""
    per = lag // partitions
    parts = [
        {
            "topic": "orders", "partition": p, "committed_offset": 10_000 + p,
            "planned_offset": None, "log_start_offset": 0, "log_end_offset": 10_000 + p + per,
            "last_stable_offset": 10_000 + p + per, "lag": per, "lag_seconds": per / 50,
            "new_partition": False, "removed_partition": False, "data_loss": False,
            "records_lost": 0, "ahead_of_log": False,
            "offset_history": [9_000 + 100 * i + p for i in range(10)], "start_offset": None,
            "lag_seconds_unknown": None, "time_to_loss_seconds": None, "since_checkpoint": None,
        }
        for p in range(partitions)
    ]  # fmt: skip
    health = "LAGGING" if lag > 40_000 else "OK"
    report = {
        "location": location, "query_id": str(uuid.uuid4()), "committed_batch_id": 900,
        "committed_at": at - 5, "commit_age_seconds": 5.0, "in_flight": None,
        "sources": [{"source_id": "0", "kind": "kafka", "is_kafka": True, "topics": [{
            "topic": "orders", "missing": False, "partitions": parts, "lag": lag,
            "max_lag": per, "max_lag_partition": 0, "max_lag_seconds": per / 50,
            "lag_unknown": None, "checkpoint_offsets": {}, "new_topic": False,
        }], "lag": lag, "lag_unknown": None, "cluster": None, "pattern": None}],
        "history": [
            {"batch_id": 890 + i, "timestamp_ms": int((at - 60 + 6 * i) * 1000), "records": 800}
            for i in range(10)
        ],
        "consumption_rate": 133.0, "production_rate": 140.0, "catch_up_seconds": None,
        "time_lag_mode": "estimate", "read_committed": False, "kafka_fetched_at": at,
        "kafka_cluster_id": "bench", "missing_topics": [], "generated_at": at,
        "continuous": False, "total_lag": lag, "max_lag": per, "max_lag_topic": "orders",
        "max_lag_partition": 0, "max_lag_seconds": per / 50, "rate_limited": False,
        "notes": [], "schedule": None, "single_cluster_assumed": False,
        "min_time_to_loss_seconds": None,
    }  # fmt: skip
    verdict = {
        "health": health,
        "reason": f"total lag {lag} > 40000" if health == "LAGGING" else f"lag {lag} record(s)",
        "rule": "max_lag_records_total" if health == "LAGGING" else "ok",
        "partitions": [],
        "findings": [],
    }
    return {"location": location, "error": None, "verdict": verdict, "report": report}


def seed(jobs: int, checks: int, partitions: int, full: bool = False) -> None:
    """``jobs / 50`` DAGs x ``checks`` runs x 50 mapped check tasks, each with its XCom."""
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.dagrun import DagRun
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import insert

    t0 = datetime.now(timezone.utc) - timedelta(hours=checks)
    thresholds = {"max_lag_records_total": 40_000, "max_lag_seconds": 900}
    with create_session() as session:
        session.add(DagBundleModel(name=BUNDLE))
        session.flush()
        dags = [f"sla_team_{d:02d}" for d in range(max(1, jobs // JOBS_PER_DAG))]
        for dag_id in dags:
            session.add(DagModel(dag_id=dag_id, fileloc="/dags/sla.py", bundle_name=BUNDLE))
        session.flush()
        for d, dag_id in enumerate(dags):
            for run in range(checks):
                at = t0 + timedelta(hours=run, minutes=d)
                run_id = f"scheduled__{at.isoformat()}"
                dag_run = session.execute(
                    insert(DagRun.__table__)
                    .values(
                        dag_id=dag_id, run_id=run_id, state="success", run_type="scheduled",
                        logical_date=at, run_after=at, start_date=at, end_date=at,
                        clear_number=0, conf={},
                    )
                    .returning(DagRun.__table__.c.id)
                ).scalar_one()  # fmt: skip
                tis, xcoms, rendered = [], [], []
                for m in range(min(JOBS_PER_DAG, jobs - d * JOBS_PER_DAG)):
                    job = f"team{d:02d}-job{m:02d}"
                    lag = (run * 997 * (m + 1) + 13 * d) % 60_000
                    tis.append(
                        dict(
                            id=uuid.uuid4(), dag_id=dag_id, run_id=run_id, task_id="check_sla",
                            map_index=m, rendered_map_index=job,
                            operator="SparkLagCheckOperator", state="success", try_number=1,
                            pool="default_pool", pool_slots=1, queue="default",
                            priority_weight=1, max_tries=0, hostname="", unixname="",
                            executor_config={}, start_date=at, end_date=at,
                        )
                    )  # fmt: skip
                    value = check_value(f"s3a://lake/ck/{job}", lag, partitions, at.timestamp())
                    value = value if full else compact(value)  # what the operators store
                    xcoms.append(
                        dict(
                            dag_run_id=dag_run, task_id="check_sla", map_index=m,
                            key="return_value", dag_id=dag_id, run_id=run_id, timestamp=at,
                            value=value,  # as the Task Execution API stores it: JSON
                        )
                    )  # fmt: skip
                    rendered.append(
                        dict(
                            dag_id=dag_id, run_id=run_id, task_id="check_sla", map_index=m,
                            rendered_fields={"thresholds": thresholds},
                        )
                    )  # fmt: skip
                session.execute(insert(TaskInstance.__table__), tis)
                session.execute(insert(XComModel.__table__), xcoms)
                session.execute(insert(RTIF.__table__), rendered)


class DevTools:
    """Headless Chromium over the DevTools protocol (websockets, already installed)."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("chromium")
        if not binary:
            sys.exit("chromium is not installed: run scripts/setup.sh")
        profile = workdir / "chromium"
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1400,900",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline:
                sys.exit("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        from websockets.sync.client import connect

        self.exit = contextlib.ExitStack()
        self.ws = self.exit.enter_context(
            connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        )
        self.next_id = 0
        self.call("Network.enable")
        self.call("Network.setCacheDisabled", cacheDisabled=True)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, script: str) -> Any:
        result = self.call("Runtime.evaluate", expression=script, returnByValue=True)
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        """Navigate and wait until the document at ``url`` has loaded."""
        self.call("Page.navigate", url=url)
        ready = f"location.href == {json.dumps(url)} && document.readyState == 'complete'"
        deadline = time.monotonic() + 60
        while not self.evaluate(ready):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load within 60 s")
            time.sleep(0.02)

    def load(self, url: str) -> dict[str, float]:
        """The page's own timings (ms) of one load of ``url``: navigation start to first
        contentful paint, to the first byte of the response, to the load event."""
        self.goto("about:blank")  # from the same URL again Chromium reports no new paint
        self.goto(url)
        painted = "performance.getEntriesByType('paint').length > 1"
        deadline = time.monotonic() + 10  # the paint entry can come after the load event
        while not self.evaluate(painted) and time.monotonic() < deadline:
            time.sleep(0.02)
        drawn = "document.querySelector('svg.spark polyline') ? performance.now() : 0"
        if self.evaluate("document.querySelectorAll('svg.spark').length"):
            while not (sparklines := self.evaluate(drawn)) and time.monotonic() < deadline:
                time.sleep(0.02)
        else:
            sparklines = 0
        script = (
            "JSON.stringify({fcp: (performance.getEntriesByType('paint')"
            ".find(e => e.name == 'first-contentful-paint') || {}).startTime,"
            "ttfb: performance.getEntriesByType('navigation')[0].responseStart,"
            "load: performance.getEntriesByType('navigation')[0].loadEventStart,"
            "bytes: performance.getEntriesByType('navigation')[0].transferSize,"
            "rows: document.querySelectorAll('tr.job').length})"
        )
        return {**json.loads(self.evaluate(script)), "sparklines": sparklines}

    def close(self) -> None:
        self.exit.close()
        os.killpg(self.proc.pid, 15)
        self.proc.wait(timeout=20)


def start_api_server(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    from testbed.process import free_port, log_tail

    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(BIN / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.5)
    os.killpg(proc.pid, 9)
    sys.exit(f"airflow api-server did not start:\n{log_tail(log)}")


def cpu_seconds(group: int) -> float:
    """User + system CPU time of every process in a process group (the api-server's)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # pgrp
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def measure(browser: DevTools, url: str, loads: int, server: int) -> dict[str, Any]:
    browser.load(url)  # warm-up: the first request pays the api-server's lazy imports
    cpu = cpu_seconds(server)
    runs = [browser.load(url) for _ in range(loads)]
    cpu = (cpu_seconds(server) - cpu) / loads
    fcp = sorted(r["fcp"] for r in runs)
    return {
        "fcp_median_ms": round(statistics.median(fcp)),
        "fcp_worst_ms": round(fcp[-1]),
        "ttfb_median_ms": round(statistics.median(r["ttfb"] for r in runs)),
        "load_median_ms": round(statistics.median(r["load"] for r in runs)),
        # the table's sparklines drawn (polled every 20 ms), after the table
        "sparklines_median_ms": round(statistics.median(r["sparklines"] for r in runs)),
        "server_cpu_ms": round(cpu * 1000),  # per load: independent of other processes
        "html_kb": round(runs[-1]["bytes"] / 1024),
        "rows": runs[-1]["rows"],
    }


def seed_database(env: dict[str, str], args: argparse.Namespace) -> None:
    subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True
    )
    started = time.monotonic()
    seed(args.jobs, args.checks, args.partitions, args.full)
    if args.postgres:  # planner statistics, as autovacuum takes them within a minute of the
        # insert: measured before it, the table took 0.45-0.8 s instead of 0.06-0.08 s
        from airflow.utils.session import create_session
        from sqlalchemy import text

        with create_session() as session:
            session.execute(text("ANALYZE"))
    db = Path(env["AIRFLOW_HOME"]) / "airflow.db"
    size = f"; database {db.stat().st_size / 2**20:.0f} MB" if db.exists() else ""
    print(
        f"seeded {args.jobs} jobs x {args.checks} checks ({args.jobs * args.checks} XComs, "
        f"{args.partitions} partitions each) in {time.monotonic() - started:.0f}s{size}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--checks", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the Airflow home")
    parser.add_argument("--reuse", type=Path, help="a kept work directory: measure, no seeding")
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL, not SQLite")
    parser.add_argument(
        "--full", action="store_true", help="XComs with every partition in full (before compact)"
    )
    args = parser.parse_args()
    work = args.reuse or Path(tempfile.mkdtemp(prefix="sparklag-lagpage-bench-"))
    postgres = None
    if args.postgres:
        if args.reuse:
            sys.exit("--postgres seeds a new database each run: leave out --reuse")
        from testbed.postgres import PostgresServer

        postgres = PostgresServer(work / "postgres").start()
        os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = postgres.create_database("airflow")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(work / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__DAGS_FOLDER": str(work / "dags"),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    os.environ.update(env)
    if not args.reuse:
        seed_database(env, args)
    server, url = start_api_server(env, work / "api-server.log")
    browser = None
    try:
        browser = DevTools(work)
        fleet = measure(browser, f"{url}/sparklag/", args.loads, server.pid)
        dag = min(3, max(1, args.jobs // JOBS_PER_DAG) - 1)  # team03-job07 at 500 jobs
        job_url = f"{url}/sparklag/job?location=s3a://lake/ck/team{dag:02d}-job07"
        job = measure(browser, job_url, args.loads, server.pid)
    finally:
        if browser is not None:
            browser.close()
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        if postgres is not None:
            postgres.stop()
        if not (args.keep or args.reuse):
            shutil.rmtree(work, ignore_errors=True)
    print(f"fleet table: {json.dumps(fleet)}")
    print(f"job view:    {json.dumps(job)}")
    print(
        f"first paint of the fleet table: {fleet['fcp_median_ms']} ms median (target <= 1000); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
