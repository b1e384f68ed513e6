"""The "Streaming lag" page: an Airflow 3 plugin (FastAPI app + external view in the UI nav).

The page lists every job the provider's operators have checked, read back from the metadata
database: the XComs of SparkLagCheckOperator / SparkLagBranchOperator / SparkLagSensor
(``CheckResult.to_dict()``) and SparkLagFleetCheckOperator (``failing`` / ``results``). Per job:
the health badge and reason, the last check time, the total lag of every recorded check as an
inline SVG chart, and links to the DAG runs that checked it. Server-rendered HTML, every value
escaped; no JavaScript, no CDN.

Behind Airflow's own authentication: the route depends on the API server's ``get_user`` (JWT
cookie or bearer token) and shows only checks of DAGs the user may read. Locations are shown as
the operators recorded them (credentials are scrubbed before XCom); no connection is read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import quote

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse

URL_PREFIX = "/sparklag"
CHECK_OPERATORS = ("SparkLagCheckOperator", "SparkLagBranchOperator", "SparkLagSensor")
FLEET_OPERATORS = ("SparkLagFleetCheckOperator",)
XCOM_KEYS = ("return_value", "report")
MAX_ROWS = 5000  # newest XComs read per page view
MAX_POINTS = 200  # newest checks charted per job
MAX_RUNS = 10  # newest run links per job


@dataclass(frozen=True)
class Check:
    """One recorded check of one job."""

    location: str
    health: str
    reason: str
    total_lag: int | None
    at: datetime
    dag_id: str
    run_id: str
    task_id: str


@dataclass
class JobView:
    location: str
    checks: list[Check] = field(default_factory=list)  # oldest first

    @property
    def last(self) -> Check:
        return self.checks[-1]


def _number(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _from_result(value: Mapping[str, Any]) -> tuple[str, str, str, int | None] | None:
    """(location, health, reason, total_lag) of a ``CheckResult.to_dict()``."""
    verdict = value.get("verdict")
    if not isinstance(verdict, Mapping) or not value.get("location"):
        return None
    report = value.get("report")
    lag = _number(report.get("total_lag")) if isinstance(report, Mapping) else None
    reason = str(value.get("error") or verdict.get("reason") or "")
    return str(value["location"]), str(verdict.get("health", "UNKNOWN")), reason, lag


def _from_failing(value: Mapping[str, Any]) -> tuple[str, str, str, int | None] | None:
    """(location, health, reason, total_lag) of one ``failing`` entry of a fleet check."""
    if not value.get("location"):
        return None
    reason = str(value.get("error") or value.get("reason") or "")
    health = str(value.get("health", "UNKNOWN"))
    return str(value["location"]), health, reason, _number(value.get("total_lag"))


def parse_xcom(value: Any) -> list[tuple[str, str, str, int | None]]:
    """Every (location, health, reason, total_lag) an XCom value of our operators records."""
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    if not isinstance(value, Mapping):
        return []
    if "verdict" in value:
        one = _from_result(value)
        return [one] if one else []
    found: dict[str, tuple[str, str, str, int | None]] = {}
    for entry in value.get("results") or ():  # xcom_results="all": every job
        parsed = _from_result(entry) if isinstance(entry, Mapping) else None
        if parsed:
            found[parsed[0]] = parsed
    for entry in value.get("failing") or ():
        parsed = _from_failing(entry) if isinstance(entry, Mapping) else None
        if parsed and parsed[0] not in found:
            found[parsed[0]] = parsed
    return list(found.values())


def collect(rows: Iterable[tuple[str, str, str, datetime, Any]]) -> list[JobView]:
    """Jobs from XCom rows ``(dag_id, run_id, task_id, timestamp, value)``; the worst-looking
    first (newest check not OK), then by location."""
    jobs: dict[str, JobView] = {}
    for dag_id, run_id, task_id, at, value in rows:
        for location, health, reason, lag in parse_xcom(value):
            check = Check(location, health, reason, lag, at, dag_id, run_id, task_id)
            jobs.setdefault(location, JobView(location)).checks.append(check)
    for job in jobs.values():
        job.checks.sort(key=lambda c: c.at)
        del job.checks[:-MAX_POINTS]
    return sorted(jobs.values(), key=lambda j: (j.last.health == "OK", j.location))


def chart_svg(checks: list[Check], width: int = 480, height: int = 120) -> str:
    """Total lag of each check over time: a polyline with one circle per check."""
    points = [c for c in checks if c.total_lag is not None]
    if not points:
        return '<p class="muted">no lag recorded (checks failed before measuring)</p>'
    pad = 28
    t0, t1 = points[0].at.timestamp(), points[-1].at.timestamp()
    top = max(c.total_lag or 0 for c in points) or 1
    span = (t1 - t0) or 1.0

    def xy(c: Check) -> tuple[float, float]:
        x = pad + (c.at.timestamp() - t0) / span * (width - 2 * pad) if t1 > t0 else width / 2
        y = height - pad / 2 - (c.total_lag or 0) / top * (height - pad)
        return round(x, 1), round(y, 1)

    coords = [xy(c) for c in points]
    line = " ".join(f"{x},{y}" for x, y in coords)
    dots = "".join(
        f'<circle class="point" cx="{x}" cy="{y}" r="3"><title>'
        f"{escape(c.at.strftime('%Y-%m-%d %H:%M:%S'))}: {c.total_lag} records</title></circle>"
        for (x, y), c in zip(coords, points, strict=True)
    )
    return (
        f'<svg class="chart" width="{width}" height="{height}" role="img" '
        f'aria-label="total lag over time, {len(points)} checks">'
        f'<text x="2" y="12" class="axis">{top} records</text>'
        f'<text x="2" y="{height - 2}" class="axis">0</text>'
        f'<polyline fill="none" stroke="#3b6ea5" stroke-width="2" points="{line}"/>{dots}</svg>'
    )


def _run_links(job: JobView, base: str) -> str:
    seen: dict[tuple[str, str], Check] = {}
    for check in reversed(job.checks):
        seen.setdefault((check.dag_id, check.run_id), check)
    links = []
    for (dag_id, run_id), check in list(seen.items())[:MAX_RUNS]:
        href = f"{base}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"
        links.append(
            f'<li><a class="run" target="_top" href="{escape(href)}">{escape(dag_id)} / '
            f"{escape(run_id)}</a> <span class='muted'>{escape(check.health)}, "
            f"{escape(_time(check.at))}</span></li>"
        )
    return f'<ul class="runs">{"".join(links)}</ul>'


def _time(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def render_job(job: JobView, base: str = "") -> str:
    last = job.last
    lag = "unknown" if last.total_lag is None else f"{last.total_lag} records"
    return (
        f'<section class="job"><h2 class="location">{escape(job.location)}</h2>'
        f'<p><span class="badge health-{escape(last.health)}">{escape(last.health)}</span> '
        f'<span class="reason">{escape(last.reason)}</span></p>'
        f'<p class="meta">Last check: <time>{escape(_time(last.at))}</time> · total lag '
        f"{escape(lag)} · {len(job.checks)} checks recorded</p>"
        f"{chart_svg(job.checks)}<h3>Checked by</h3>{_run_links(job, base)}</section>"
    )


STYLE = """
body{font-family:system-ui,sans-serif;margin:1rem 1.5rem;color:#1f2933;background:#fff}
h1{font-size:1.4rem}h2{font-size:1.05rem;margin:.2rem 0;word-break:break-all}
h3{font-size:.9rem;margin:.6rem 0 .2rem}
.job{border:1px solid #d9dee3;border-radius:8px;padding:.8rem 1rem;margin:0 0 1rem}
.badge{display:inline-block;padding:.1rem .5rem;border-radius:10px;font-weight:600;
font-size:.8rem;color:#fff;background:#7b8794}
.health-OK{background:#2f855a}.health-LAGGING,.health-STALLED{background:#c05621}
.health-FALLING_BEHIND{background:#b7791f}.health-DATA_LOSS,.health-ERROR{background:#c53030}
.muted,.meta,.axis{color:#616e7c;font-size:.8rem}.axis{fill:#616e7c}
.chart{background:#f7f9fb;border-radius:4px}.point{fill:#3b6ea5}.runs{margin:0;padding-left:1.2rem}
"""


def render_page(jobs: list[JobView], base: str = "") -> str:
    body = "".join(render_job(job, base) for job in jobs) or (
        '<p class="empty">No checks recorded yet: run a DAG with SparkLagCheckOperator, '
        "SparkLagFleetCheckOperator or SparkLagSensor.</p>"
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>Streaming lag</title><style>{STYLE}</style></head><body>"
        f'<h1>Streaming lag</h1><p class="muted">{len(jobs)} jobs checked, newest checks '
        f"from the XComs of the sparklag operators.</p>{body}</body></html>"
    )


def load_rows(dag_ids: set[str] | None) -> list[tuple[str, str, str, datetime, Any]]:
    """XComs of our operators' task instances, newest first (``dag_ids``: only those DAGs)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import and_, select

    ti = TaskInstance
    query = (
        select(
            XComModel.dag_id,
            XComModel.run_id,
            XComModel.task_id,
            XComModel.timestamp,
            XComModel.value,
        )
        .join(
            ti,
            and_(
                ti.dag_id == XComModel.dag_id,
                ti.run_id == XComModel.run_id,
                ti.task_id == XComModel.task_id,
                ti.map_index == XComModel.map_index,
            ),
        )
        .where(XComModel.key.in_(XCOM_KEYS))
        .where(ti.operator.in_(CHECK_OPERATORS + FLEET_OPERATORS))
        .order_by(XComModel.timestamp.desc())
        .limit(MAX_ROWS)
    )
    if dag_ids is not None:
        query = query.where(XComModel.dag_id.in_(sorted(dag_ids)))
    with create_session() as session:
        return [(r[0], r[1], r[2], r[3], r[4]) for r in session.execute(query)]


def _readable_dags(user: Any) -> set[str]:
    from airflow.api_fastapi.app import get_auth_manager

    return set(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))


def _base_path() -> str:
    from urllib.parse import urlparse

    from airflow.configuration import conf

    return urlparse(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


def _current_user() -> Any:
    from airflow.api_fastapi.core_api.security import get_user

    return get_user


def create_app() -> FastAPI:
    app = FastAPI(title="Streaming lag", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/", response_class=HTMLResponse)
    def page(user: Any = Depends(_current_user())) -> HTMLResponse:  # noqa: B008
        jobs = collect(load_rows(_readable_dags(user)))
        return HTMLResponse(render_page(jobs, _base_path()))

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
