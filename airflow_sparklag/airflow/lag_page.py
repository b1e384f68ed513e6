"""The "Streaming lag" page: an Airflow 3 plugin (FastAPI app + a view in the UI nav) that reads
our tasks' check XComs from the metadata database, only of DAGs the user may read (docs/ui.md)."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse

from airflow_sparklag.airflow import lag_html
from airflow_sparklag.model.result import CHECK_FAILED

URL_PREFIX = "/sparklag"
CHECK_OPERATORS = ("SparkLagCheckOperator", "SparkLagBranchOperator", "SparkLagSensor")
FLEET_OPERATORS = ("SparkLagFleetCheckOperator",)
XCOM_KEYS = ("return_value", "report")
RESULTS_KEY = "sparklag_results"  # any task's per-job results (the fleet scan DAG's)
TABLE_CHECKS = 12  # newest XComs per task read for the table (the sparkline's points)
MAX_POINTS = 200  # newest checks of a job in its view
# ... of which so many per task with their whole report (the per-partition lines): a job of
# 1,000 partitions records ~50 KB per check (airflow_sparklag.compact), ~0.6 MB before it
REPORT_CHECKS = 50
MAX_ROWS = 20000  # XComs read per view at most


@dataclass(frozen=True)
class Check:
    """One recorded check of one job."""

    location: str
    health: str
    reason: str
    total_lag: int | None
    max_lag_seconds: float | None
    commit_age_seconds: float | None
    catch_up_seconds: float | None
    at: datetime
    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    name: str = ""
    report: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    # retention deletes an unread record in this many seconds (math.inf: never; None: unknown)
    min_time_to_loss_seconds: float | None = None
    # the batches' time and its share of their trigger interval (report.pace; None: unknown)
    batch_seconds: float | None = None
    batch_time_ratio: float | None = None
    # why a measure is unknown: the report's own words (LagReport.unknown), by measure name
    unknown: Mapping[str, str] = field(default_factory=dict, compare=False)


@dataclass
class JobView:
    location: str
    checks: list[Check] = field(default_factory=list)  # oldest first

    @property
    def last(self) -> Check:
        return self.checks[-1]

    @property
    def name(self) -> str:
        """The newest name a task gave it, else its location's last part."""
        named = next((c.name for c in reversed(self.checks) if c.name), "")
        return named or self.location.rstrip("/").rsplit("/", 1)[-1] or self.location


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


Parsed = dict[str, Any]  # the Check fields one XCom entry gives
MEASURES = ("total_lag", "max_lag_seconds", "commit_age_seconds", "catch_up_seconds")
PACE_FIELDS = {"batch_seconds": "batch_seconds", "batch_time_ratio": "ratio"}  # of report.pace
UNKNOWN = ("catch_up_seconds", "max_lag_seconds", "min_time_to_loss_seconds")  # with a reason


def _parsed(
    value: Mapping[str, Any], health: Any, reason: Any, measured: Mapping[str, Any]
) -> Parsed:
    error = value.get("error")
    name = str(health or "UNKNOWN")
    parsed: Parsed = {
        "location": str(value["location"]),
        # a check that failed: CHECK_FAILED (its verdict says so; older XComs said UNKNOWN)
        "health": CHECK_FAILED if error else name,
        "reason": str(error or reason or ""),
        "report": None,
    }
    parsed.update((name, _number(measured.get(name))) for name in MEASURES)
    loss = measured.get("min_time_to_loss_seconds")
    parsed["min_time_to_loss_seconds"] = math.inf if loss == "infinite" else _number(loss)
    pace = measured.get("pace")  # a whole report's; the database extracts its fields flat
    flat = (
        {n: pace.get(k) for n, k in PACE_FIELDS.items()} if isinstance(pace, Mapping) else measured
    )
    parsed.update((name, _number(flat.get(name))) for name in PACE_FIELDS)
    why = measured.get("unknown")
    why = why if isinstance(why, Mapping) else {}
    parsed["unknown"] = {name: str(why[name]) for name in UNKNOWN if why.get(name)}
    if parsed["total_lag"] is not None:
        parsed["total_lag"] = int(parsed["total_lag"])
    return parsed


def _entry(value: Any) -> Parsed | None:
    """The fields of a ``CheckResult.to_dict()`` (a failed check's has no report) or of a
    fleet entry (``failing`` of a fleet check, ``results`` of a scan: flat fields)."""
    if not isinstance(value, Mapping) or not value.get("location"):
        return None
    verdict = value.get("verdict", value)  # a fleet entry is flat
    if not isinstance(verdict, Mapping):
        return None
    report = value.get("report") if isinstance(value.get("report"), Mapping) else None
    measured = value if verdict is value else report or {}
    parsed = _parsed(value, verdict.get("health"), verdict.get("reason"), measured)
    parsed["report"] = report if verdict is not value else None
    return parsed


def _loaded(value: Any) -> Any:
    """An XCom value as stored (JSON text) or already deserialized."""
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def parse_xcom(value: Any) -> list[Parsed]:
    """Every job an XCom value of our tasks records: one check result, or a fleet's
    ``results`` and ``failing`` entries (each location once, its full result first)."""
    value = _loaded(value)
    if isinstance(value, list):
        value = {"results": value}
    if not isinstance(value, Mapping):
        return []
    if "verdict" in value:
        one = _entry(value)
        return [one] if one else []
    found: dict[str, Parsed] = {}
    for entry in [*(value.get("results") or ()), *(value.get("failing") or ())]:
        parsed = _entry(entry)
        if parsed and parsed["location"] not in found:
            found[parsed["location"]] = parsed
    return list(found.values())


Row = tuple[str, str, str, int, str | None, datetime, Any]


def collect(rows: Iterable[Row], checks: Iterable[Check] = ()) -> list[JobView]:
    """Jobs from XCom rows ``(dag_id, run_id, task_id, map_index, task name, time, value)``
    and checks read already (``load_table``), worst health first, then by name."""
    jobs: dict[str, JobView] = {}
    for check in checks:
        jobs.setdefault(check.location, JobView(check.location)).checks.append(check)
    for dag_id, run_id, task_id, map_index, name, at, stored in rows:
        value = _loaded(stored)
        entries = parse_xcom(value)
        # one task, one job: the task names it (a fleet's jobs are named by their location)
        own = (name or task_id) if len(entries) == 1 and not _is_fleet(value) else ""
        for parsed in entries:
            check = Check(
                at=at, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index,
                name=own, **parsed,
            )  # fmt: skip
            jobs.setdefault(check.location, JobView(check.location)).checks.append(check)
    for job in jobs.values():
        job.checks.sort(key=lambda c: c.at)
        del job.checks[:-MAX_POINTS]
    return sorted(jobs.values(), key=lambda j: (severity(j.last.health), j.name.lower()))


def _is_fleet(value: Any) -> bool:
    """Many jobs' results (a fleet check's, a scan's list): none is named by the task."""
    if isinstance(value, Mapping) and value.get("command") in ("check", "wait"):
        return False  # one check's document
    return isinstance(value, list) or (
        isinstance(value, Mapping) and ("results" in value or "failing" in value)
    )


def severity(health: str) -> int:
    """Position in ``HEALTH_ORDER`` (worst 0); an unknown name sorts with UNKNOWN."""
    return lag_html.HEALTH_ORDER.index(health if health in lag_html.HEALTH_ORDER else "UNKNOWN")


def counts(jobs: Iterable[JobView]) -> dict[str, int]:
    """Jobs per health of their newest check, worst first."""
    found = Counter(job.last.health for job in jobs)
    return {h: found[h] for h in sorted(found, key=severity)}


def lag_points(job: JobView) -> list[tuple[float, int]]:
    """``(epoch seconds, total lag)`` of the job's checks that measured it, oldest first."""
    return [
        (round(c.at.timestamp(), 3), c.total_lag) for c in job.checks if c.total_lag is not None
    ]


def matching(jobs: list[JobView], health: str | None, text: str | None) -> list[JobView]:
    """The jobs of one health (None: all) whose name or location contains ``text``."""
    wanted = (text or "").strip().lower()
    return [
        job
        for job in jobs
        if (not health or job.last.health == health)
        and (not wanted or wanted in job.name.lower() or wanted in job.location.lower())
    ]


# -- the database ------------------------------------------------------------------------------

# What the table shows of a check: paths in the one result of a check task's XCom document
# (docs/json.md). The database reads them out of the value: an XCom holds the whole report
# (~6 KB at 8 partitions) and decoding the table's 6,000 values in Python took seconds
# (docs/benchmarks.md).
EXTRACTED = (
    ("location",),
    ("error",),
    ("verdict", "health"),
    ("verdict", "reason"),
    *(("report", name) for name in (*MEASURES, "min_time_to_loss_seconds")),
    *(("report", "pace", key) for key in PACE_FIELDS.values()),
    *(("report", "unknown", name) for name in UNKNOWN),
)
Tasks = Iterable[tuple[str, str, int]]  # (dag_id, task_id, map_index)


def _ranked(dag_ids: set[str] | None, tasks: Tasks | None, per_task: int, *columns: Any) -> Any:
    """The query of ``(dag_id, run_id, task_id, map_index, rendered map index, time,
    *columns)`` of the newest ``per_task`` XComs of each of our tasks, newest first. A task's
    XComs are ranked by DAG run (its id grows with each run), not by the XCom's timestamp:
    the table stores that column after the value, so ranking by it reads every value."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.models.xcom import XComModel as X
    from sqlalchemy import and_, func, or_, select, tuple_

    ours = or_(
        and_(X.key.in_(XCOM_KEYS), TI.operator.in_(CHECK_OPERATORS + FLEET_OPERATORS)),
        X.key == RESULTS_KEY,
    )
    newest = func.row_number().over(
        partition_by=(X.dag_id, X.task_id, X.map_index, X.key), order_by=X.dag_run_id.desc()
    )
    name = TI.__table__.c.rendered_map_index.label("name")  # the column: None if unmapped
    ranked = (
        select(X.dag_run_id, X.task_id, X.map_index, X.key, TI.operator, name,
               newest.label("newest"))
        .join(TI, and_(TI.dag_id == X.dag_id, TI.run_id == X.run_id, TI.task_id == X.task_id,
                       TI.map_index == X.map_index))
        .where(ours)
    )  # fmt: skip
    if dag_ids is not None:
        ranked = ranked.where(X.dag_id.in_(sorted(dag_ids)))
    if tasks is not None:
        ranked = ranked.where(tuple_(X.dag_id, X.task_id, X.map_index).in_(sorted(tasks)))
    found = ranked.subquery()
    return (
        select(X.dag_id, X.run_id, X.task_id, X.map_index, found.c.name, X.timestamp, *columns)
        .join(found, and_(X.dag_run_id == found.c.dag_run_id, X.task_id == found.c.task_id,
                          X.map_index == found.c.map_index, X.key == found.c.key))
        .where(found.c.newest <= per_task)
        .order_by(X.timestamp.desc())
        .limit(MAX_ROWS)
    ), found  # fmt: skip


def _execute(query: Any) -> list[tuple[Any, ...]]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return [tuple(row) for row in session.execute(query)]


def load_table(
    dag_ids: set[str] | None, per_task: int = 1, tasks: Tasks | None = None
) -> list[JobView]:
    """Every job with the newest ``per_task`` checks of each task (1: the table; the
    sparklines' ``TABLE_CHECKS`` come after, from ``/trends``; ``tasks``: only those): a
    single check's fields read by the database (``EXTRACTED``, no report), a fleet's or
    scan's value (many jobs) whole, as is a value stored as JSON text."""
    from airflow.models.xcom import XComModel as X
    from sqlalchemy import case, or_

    query, found = _ranked(dag_ids, tasks, per_task)
    paths = [X.value[("results", 0, *path)].as_string() for path in EXTRACTED]
    single = found.c.operator.in_(CHECK_OPERATORS) & X.key.in_(XCOM_KEYS)
    query = query.add_columns(*paths, case((or_(~single, paths[0].is_(None)), X.value)))
    checks, whole = [], []
    for dag_id, run_id, task_id, map_index, name, at, *values, value in _execute(query):
        if value is not None:
            whole.append((dag_id, run_id, task_id, map_index, name, at, value))
            continue
        parsed = _entry(_extracted(values))
        if parsed:
            parsed["report"] = None  # the table's fields only
            at_task = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}
            named = {"map_index": map_index, "name": name or task_id, "at": at}
            checks.append(Check(**at_task, **named, **parsed))
    return collect(whole, checks)


def _extracted(values: Iterable[Any]) -> dict[str, Any]:
    """The result the database read (as text) at the ``EXTRACTED`` paths, report numbers as
    the numbers they spell."""
    result: dict[str, Any] = {}
    for path, text in zip(EXTRACTED, values, strict=True):
        node = result
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = _scalar(text) if path[0] == "report" else text
    return result


def _scalar(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        return text


def job_history(dag_ids: set[str] | None, location: str) -> JobView | None:
    """One job's newest ``MAX_POINTS`` checks, the newest ``REPORT_CHECKS`` of each task
    with their reports (its partitions); None when no check the user may read saw it."""
    found = [j for j in load_table(dag_ids) if j.location == location]
    if not found:
        return None
    tasks = {(c.dag_id, c.task_id, c.map_index) for c in found[0].checks}
    job = next(j for j in load_table(dag_ids, MAX_POINTS, tasks) if j.location == location)
    from airflow.models.xcom import XComModel as X

    rows = _execute(_ranked(dag_ids, tasks, REPORT_CHECKS, X.value)[0])  # whole values
    reported = {_key(c): c for j in collect(rows) if j.location == location for c in j.checks}
    job.checks = [reported.get(_key(c), c) for c in job.checks]
    return job


def _key(check: Check) -> tuple[str, str, str, int]:
    return check.dag_id, check.run_id, check.task_id, check.map_index


def load_thresholds(check: Check) -> dict[str, Any]:
    """The thresholds the task of ``check`` was rendered with (Airflow keeps the rendered
    fields of recent task instances); ``{}`` when it kept none or the task had none."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from sqlalchemy import select

    query = select(RTIF.rendered_fields).where(
        RTIF.dag_id == check.dag_id,
        RTIF.run_id == check.run_id,
        RTIF.task_id == check.task_id,
        RTIF.map_index == check.map_index,
    )
    fields = next(iter(_execute(query)), (None,))[0]
    thresholds = _loaded((fields or {}).get("thresholds")) if isinstance(fields, dict) else None
    return dict(thresholds) if isinstance(thresholds, Mapping) else {}


def _readable_dags(user: Any) -> set[str]:
    """The DAGs whose XComs the user may read, as Airflow's auth manager says: the DAGs it
    lets the user read (per team in multi-team mode), then those whose XComs it lets them
    read (a separate permission in, e.g., the FAB auth manager)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )

    manager = get_auth_manager()
    return {
        dag_id
        for dag_id in manager.get_authorized_dag_ids(user=user, method="GET")
        if manager.is_authorized_dag(
            method="GET",
            access_entity=DagAccessEntity.XCOM,
            details=DagDetails(id=dag_id),
            user=user,
        )
    }


def _base_path() -> str:
    from urllib.parse import urlparse

    from airflow.configuration import conf

    return urlparse(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


def create_app() -> FastAPI:
    from airflow.api_fastapi.core_api.security import get_user

    app = FastAPI(title="Streaming lag", docs_url=None, redoc_url=None, openapi_url=None)
    user_dependency = Depends(get_user)

    @app.get("/", response_class=HTMLResponse)
    def fleet(
        user: Any = user_dependency,
        health: str | None = None,
        q: str | None = None,
    ) -> HTMLResponse:
        jobs = load_table(_readable_dags(user))
        wanted = health if health in lag_html.HEALTH_ORDER else None
        shown = matching(jobs, wanted, q)
        html = lag_html.fleet_page(jobs, counts(jobs), shown, _base_path(), (wanted, q))
        return HTMLResponse(html)

    @app.get("/trends")
    def trends(user: Any = user_dependency) -> JSONResponse:
        """The sparklines' points, fetched by the table once it is drawn: reading a job's 12
        newest checks takes twice as long as reading its newest, so the table comes first."""
        jobs = load_table(_readable_dags(user), per_task=TABLE_CHECKS)
        return JSONResponse({job.location: lag_points(job) for job in jobs})

    @app.get("/job", response_class=HTMLResponse)
    def job(location: str, user: Any = user_dependency) -> HTMLResponse:
        found = job_history(_readable_dags(user), location)
        if found is None:
            raise HTTPException(404, "no check of this location in the DAGs you may read")
        checked = [c for c in reversed(found.checks) if c.report is not None]
        thresholds = load_thresholds(checked[0]) if checked else {}
        return HTMLResponse(lag_html.job_page(found, thresholds, _base_path()))

    return app


class SparkLagPlugin(AirflowPlugin):
    """Registered through the ``airflow.plugins`` entry point of this distribution."""

    name = "sparklag"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Streaming lag"}]
    external_views = [
        {
            "name": "Streaming lag",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "streaming-lag",
        }
    ]
