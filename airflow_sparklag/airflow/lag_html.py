"""HTML and SVG of the "Streaming lag" page (lag_page.py reads the checks; this draws them).

Every value is escaped. Charts are inline SVG: a time axis with dated ticks, a y axis whose
labels sit in their own margin (never over the line), and each threshold a dashed line.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from html import escape
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from airflow_sparklag.compact import partition_rows
from airflow_sparklag.model.result import CHECK_FAILED
from airflow_sparklag.render import seconds_text

if TYPE_CHECKING:
    from airflow_sparklag.airflow.lag_page import Check, JobView

# Worst first: the page's order, and the health filter's choices.
HEALTH_ORDER = (
    CHECK_FAILED,
    "DATA_LOSS",
    "REWIND",
    "STOPPED",
    "STALLED",
    "LAGGING",
    "UNKNOWN",
    "OK",
)

STYLE = (resources.files(__package__) / "lag_page.css").read_text()


def _time(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def badge(health: str, href: str | None = None, text: str | None = None) -> str:
    label = escape(text or health)
    css = f"badge health-{escape(health)}"
    if href is None:
        return f'<span class="{css}">{label}</span>'
    return f'<a class="{css}" href="{escape(href)}">{label}</a>'


def page(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )


def table(css: str, headers: Sequence[str], rows: str) -> str:
    heads = "".join(f"<th>{head}</th>" for head in headers)
    return f'<table class="{css}"><thead><tr>{heads}</tr></thead><tbody>{rows}</tbody></table>'


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def job_href(location: str) -> str:
    return "job?" + urlencode({"location": location})


def ti_href(base: str, check: Check) -> str:
    """The task instance in Airflow's UI (a mapped one by its index)."""
    path = (
        f"{base}/dags/{quote(check.dag_id, safe='')}/runs/{quote(check.run_id, safe='')}"
        f"/tasks/{quote(check.task_id, safe='')}"
    )
    return path + (f"/mapped/{check.map_index}" if check.map_index >= 0 else "")


# -- charts ------------------------------------------------------------------------------------


SPARKLINES = (resources.files(__package__) / "lag_page.js").read_text()


def _ticks(t0: float, t1: float) -> list[tuple[float, str]]:
    """Times along the axis, labelled by time of day (and the date when the span is long)."""
    span = t1 - t0
    fmt = "%H:%M:%S" if span < 120 else "%H:%M" if span < 86400 else "%m-%d %H:%M"
    steps = 4  # five ticks
    times = [t0 + span * i / steps for i in range(steps + 1 if span else 1)]
    return [(t, datetime.fromtimestamp(t, timezone.utc).strftime(fmt)) for t in times]


def _y_text(value: float, unit: str) -> str:
    """An axis label, short enough for the margin: ``9,100``, ``45.0s``, ``15.2m``."""
    return seconds_text(value) if unit == "s" else f"{round(value):,}"


Points = Sequence[tuple[float, float]]  # (epoch seconds, value), oldest first
# Line colours of a chart with several lines (partitions), told apart in its legend.
PALETTE = ("#3b6ea5", "#d97706", "#059669", "#7c3aed", "#db2777", "#0891b2", "#65a30d", "#92400e")


def time_chart(
    lines: Mapping[str, Points] | Points, *, unit: str, thresholds: Mapping[str, float]
) -> str:
    """Lines of ``(epoch seconds, value)`` (one, or name -> points, each in its colour with a
    legend) with a time axis, y labels in the left margin and each threshold (name -> value)
    as a dashed line."""
    width, height = 760, 240
    named = dict(lines) if isinstance(lines, Mapping) else {"": lines}
    every = [p for points in named.values() for p in points]
    t0, t1 = min(t for t, _ in every), max(t for t, _ in every)
    top = max([v for _, v in every] + list(thresholds.values())) * 1.1 or 1
    y_labels = [(v, _y_text(v, unit)) for v in (0, top / 2 / 1.1, top / 1.1)]
    # the y labels' own margin, wide enough for the longest (~7 px a character at 0.8rem)
    left = 14 + 7 * max(len(text) for _, text in y_labels)
    right, top_pad, bottom = 16, 14, 34
    inner_w, inner_h = width - left - right, height - top_pad - bottom

    def x(t: float) -> float:
        return round(left + ((t - t0) / (t1 - t0) * inner_w if t1 > t0 else inner_w / 2), 1)

    def y(v: float) -> float:
        return round(top_pad + inner_h - v / top * inner_h, 1)

    parts = [f'<line class="grid" x1="{left}" y1="{y(0)}" x2="{width - right}" y2="{y(0)}"/>']
    for value, text in y_labels:
        parts.append(
            f'<text class="axis y-label" x="{left - 6}" y="{y(value) + 4}" '
            f'text-anchor="end">{escape(text)}</text>'
        )
    ticks = _ticks(t0, t1)
    for i, (t, label) in enumerate(ticks):
        anchor = "start" if i == 0 and len(ticks) > 1 else "middle"
        anchor = "end" if i == len(ticks) - 1 and len(ticks) > 1 else anchor
        parts.append(
            f'<line class="grid" x1="{x(t)}" y1="{y(0)}" x2="{x(t)}" y2="{y(0) + 4}"/>'
            f'<text class="axis x-label" x="{x(t)}" y="{height - 12}" '
            f'text-anchor="{anchor}">{escape(label)}</text>'
        )
    labelled: list[float] = []  # label baselines so far: a close one goes below its line
    for name, value in thresholds.items():
        above = y(value) - 4
        label_y = above if all(abs(above - at) >= 13 for at in labelled) else y(value) + 13
        labelled.append(label_y)
        parts.append(
            f'<line class="threshold" x1="{left}" y1="{y(value)}" x2="{width - right}" '
            f'y2="{y(value)}"><title>{escape(name)}</title></line><text class="axis '
            f'threshold-label" x="{width - right - 4}" y="{label_y}" text-anchor="end">'
            f"{escape(name)} {escape(_y_text(value, unit))}</text>"
        )
    for colour, (name, points) in zip(itertools.cycle(PALETTE), named.items()):
        tip = f"{name}, " if name else ""
        parts.append(
            f'<polyline class="line" style="stroke:{colour}" data-line="{escape(name)}" '
            f'points="{" ".join(f"{x(t)},{y(v)}" for t, v in points)}"/>'
        )
        parts.extend(
            f'<circle class="point" cx="{x(t)}" cy="{y(v)}" r="2.5" style="fill:{colour}"><title>'
            f"{escape(tip)}{escape(_time(datetime.fromtimestamp(t, timezone.utc)))}: "
            f"{escape(_y_text(v, unit))}</title></circle>"
            for t, v in points
        )
    legend = "".join(
        f'<span class="key"><i style="background:{colour}"></i>{escape(name)}</span>'
        for colour, name in zip(itertools.cycle(PALETTE), named)
        if name
    )
    svg = (
        f'<svg class="chart" width="{width}" height="{height}" role="img" '
        f'aria-label="{len(every)} points over time">{"".join(parts)}</svg>'
    )
    return svg + (f'<div class="legend">{legend}</div>' if legend else "")


# -- the fleet table ---------------------------------------------------------------------------


def _loss_text(seconds: float | None) -> str:
    """Time until retention deletes an unread record: ``never`` when it does not delete."""
    return "never" if seconds is not None and math.isinf(seconds) else seconds_text(seconds)


def _batch_text(check: Check) -> str:
    """``9.2 s (92%)``: the batches' time and its share of their interval (report.pace)."""
    share = "" if check.batch_time_ratio is None else f" ({check.batch_time_ratio:.0%})"
    return seconds_text(check.batch_seconds) + share


def _measure(check: Check, name: str, text: str) -> str:
    """A number's cell: ``text``, or when the report says why it is unknown, that reason."""
    why = check.unknown.get(name)
    if why is None:
        return f'<td class="num">{text}</td>'
    return f'<td class="num">unknown<span class="why">{escape(why)}</span></td>'


def _row(job: JobView, base: str) -> str:
    last = job.last
    return (
        f'<tr class="job" data-health="{escape(last.health)}">'
        f'<td><a class="name" href="{escape(job_href(job.location))}">{escape(job.name)}</a>'
        f'<span class="loc">{escape(job.location)}</span></td>'
        f"<td>{badge(last.health)}</td>"
        f'<td class="reason">{escape(last.reason)}</td>'
        f'<td class="num">{_count(last.total_lag)}</td>'
        f"{_measure(last, 'max_lag_seconds', seconds_text(last.max_lag_seconds))}"
        f'<td class="num">{seconds_text(last.commit_age_seconds)}</td>'
        f"{_measure(last, 'catch_up_seconds', seconds_text(last.catch_up_seconds))}"
        f'<td class="num">{_batch_text(last)}</td>'
        f"{_measure(last, 'min_time_to_loss_seconds', _loss_text(last.min_time_to_loss_seconds))}"
        f'<td><svg class="spark" width="120" height="24" role="img" '
        f'data-job="{escape(job.location)}"></svg></td>'
        f'<td><a href="{escape(ti_href(base, last))}" target="_top">'
        f'<time title="{escape(_time(last.at))}">'
        f"{escape(last.at.astimezone(timezone.utc).strftime('%m-%d %H:%M'))}</time></a></td></tr>"
    )


def _filter_form(health: str | None, text: str | None) -> str:
    options = "".join(
        f'<option value="{h}"{" selected" if h == health else ""}>{h}</option>'
        for h in HEALTH_ORDER
    )
    return (
        '<form method="get" action="">'
        '<label>Health <select name="health"><option value="">all</option>'
        f"{options}</select></label> "
        '<label>Name <input type="search" name="q" placeholder="job name or location" '
        f'value="{escape(text or "")}"></label> <button type="submit">Filter</button></form>'
    )


JOB_COLUMNS = (
    *("Job", "Health", "Reason", "Lag (records)", "Lag (time)", "Commit age", "Catch-up in"),
    *("Batch time", "Data loss in", "Trend", "Last check"),
)


def fleet_page(
    jobs: Sequence[JobView],
    per_health: Mapping[str, int],
    shown: Sequence[JobView],
    base: str,
    query: tuple[str | None, str | None],
) -> str:
    """Counts per health (each a filter link), the filter form (``query``: health, text) and
    the table of the ``shown`` jobs."""
    health, text = query
    links = [badge("UNKNOWN", "?", f"all {len(jobs)}")] + [
        badge(h, "?" + urlencode({"health": h}), f"{h} {n}") for h, n in per_health.items()
    ]
    rows = "".join(_row(job, base) for job in shown)
    jobs_table = table("jobs", JOB_COLUMNS, rows)
    empty = (
        '<p class="empty">No checks recorded yet: run a DAG with SparkLagCheckOperator, '
        "SparkLagFleetCheckOperator or SparkLagSensor, or the sparklag_fleet_scan DAG.</p>"
    )
    summary = (
        f'<p class="muted summary">{len(jobs)} jobs; showing {len(shown)}. Newest checks from '
        "the XComs of the sparklag tasks.</p>"
    )
    body = (
        f'<h1>Streaming lag</h1><div class="counts">{"".join(links)}</div>{summary}'
        f"{_filter_form(health, text)}{jobs_table if jobs else empty}"
    )
    return page("Streaming lag", body + f"<script>{SPARKLINES}</script>")


# -- one job -----------------------------------------------------------------------------------


def _partitions(report: Mapping[str, Any] | None) -> str:
    rows = []
    for p in partition_rows(report):
        cells = (p.get(k) for k in ("partition", "committed_offset", "log_end_offset", "lag"))
        numbers = "".join(
            f'<td class="num">{"-" if v is None else escape(str(v))}</td>' for v in cells
        )
        rows.append(
            f"<tr><td>{escape(str(p.get('topic')))}</td>{numbers}"
            f'<td class="num">{seconds_text(p.get("lag_seconds"))}</td></tr>'
        )
    if not rows:
        return '<p class="muted">No partitions in the newest check.</p>'
    headers = ("Topic", "Partition", "Committed", "Log end", "Lag", "Lag (time)")
    return table("partitions", headers, "".join(rows))


TOP_PARTITIONS = 8  # lines of the per-partition charts: the most lagging in the newest check


def partition_lines(job: JobView) -> tuple[dict[str, list[tuple[float, float]]], ...]:
    """``(lag in records, lag in seconds)`` over time of the ``TOP_PARTITIONS`` partitions
    that lag most in the newest check that has partitions, each ``"<topic>-<partition>"``."""
    lines: dict[str, dict[str, list[tuple[float, float]]]] = {"lag": {}, "lag_seconds": {}}
    for check in job.checks:
        for p in partition_rows(check.report):
            name, at = f"{p.get('topic')}-{p.get('partition')}", check.at.timestamp()
            for key, series in lines.items():
                if isinstance(value := p.get(key), (int, float)):
                    series.setdefault(name, []).append((at, float(value)))
    newest = next((c.report for c in reversed(job.checks) if partition_rows(c.report)), None)
    ranked = sorted(
        partition_rows(newest), key=lambda p: (-(p.get("lag") or 0), str(p.get("topic")))
    )
    top = [f"{p.get('topic')}-{p.get('partition')}" for p in ranked[:TOP_PARTITIONS]]
    return tuple({name: line[name] for name in top if name in line} for line in lines.values())


def _partition_charts(job: JobView, thresholds: Mapping[str, Any]) -> str:
    records, seconds = partition_lines(job)
    if not records:
        return '<p class="muted">No partitions in the recorded checks.</p>'
    total = len(partition_rows(job.last.report)) or len(records)
    shown = f"{len(records)} of {total} partitions" if total > len(records) else "every partition"
    note = f'<p class="muted">{shown}, the most lagging in the newest check first.</p>'
    limits = _limits(thresholds, "max_lag_records_per_partition")
    charts = f"{note}<h3>Records</h3>{time_chart(records, unit='records', thresholds=limits)}"
    if seconds:
        limits = _limits(thresholds, "max_lag_seconds")
        charts += f"<h3>Time</h3>{time_chart(seconds, unit='s', thresholds=limits)}"
    return charts


def _limits(thresholds: Mapping[str, Any], *names: str) -> dict[str, float]:
    """The named thresholds that are set (numbers), as a chart draws them."""
    return {name: float(v) for name in names if isinstance(v := thresholds.get(name), (int, float))}


def _checks_table(job: JobView, base: str) -> str:
    rows = "".join(
        f'<tr><td><a href="{escape(ti_href(base, c))}" target="_top">{escape(_time(c.at))}</a>'
        f"</td><td>{escape(c.dag_id)} / {escape(c.task_id)}</td><td>{badge(c.health)}</td>"
        f'<td class="num">{_count(c.total_lag)}</td>'
        f'<td class="reason">{escape(c.reason)}</td></tr>'
        for c in reversed(job.checks)
    )
    return table("checks", ("Checked", "DAG / task", "Health", "Lag", "Reason"), rows)


def _chart_of(job: JobView, attr: str, unit: str, limits: Mapping[str, float]) -> str:
    points = [
        (c.at.timestamp(), float(getattr(c, attr)))
        for c in job.checks
        if getattr(c, attr) is not None
    ]
    if not points:
        return '<p class="muted">Not measured (checks that failed measure nothing).</p>'
    return time_chart(points, unit=unit, thresholds=limits)


def _batch_chart(job: JobView, thresholds: Mapping[str, Any]) -> str:
    """Each batch's time (offsets/N to commits/N written: report.pace) over the windows the
    recorded checks read, each batch once, against the trigger interval the newest of them
    measured and, when set, ``max_batch_time_ratio`` of it."""
    batches: dict[Any, tuple[Any, Any]] = {}
    interval = None
    for check in job.checks:
        pace = (check.report or {}).get("pace")
        if isinstance(pace, Mapping):
            # reports from before batch_starts_ms draw nothing: zip stops at the shortest
            at = [ms / 1000 for ms in pace.get("batch_starts_ms") or ()]
            starts = zip(at, pace.get("batch_times") or (), strict=False)
            batches.update(zip(pace.get("batch_ids") or (), starts, strict=False))
            interval = pace.get("interval_seconds") or interval
    points = [(float(t), float(s)) for _, (t, s) in sorted(batches.items())]
    if not points:
        return '<p class="muted">Not measured (a micro-batch query\'s checks measure it).</p>'
    limits = {"trigger interval": float(interval)} if interval else {}
    ratio = _limits(thresholds, "max_batch_time_ratio").get("max_batch_time_ratio")
    if interval and ratio is not None:
        limits[f"max_batch_time_ratio {ratio:.0%}"] = ratio * float(interval)
    return time_chart(points, unit="s", thresholds=limits)


def job_page(job: JobView, thresholds: Mapping[str, Any], base: str) -> str:
    """The job's lag over time (records, then time) with its thresholds, its batches' time
    against the trigger, the newest check's partitions and every check."""
    last = job.last
    records = _limits(thresholds, "max_lag_records_total")
    seconds = _limits(thresholds, "max_lag_seconds")
    body = (
        f'<p><a href="./">&larr; all jobs</a></p><h1 class="name">{escape(job.name)}</h1>'
        f'<p class="muted">{escape(job.location)}</p><p>{badge(last.health)} '
        f'<span class="reason">{escape(last.reason)}</span></p>'
        f"<h2>Total lag (records)</h2>{_chart_of(job, 'total_lag', 'records', records)}"
        f"<h2>Lag (time)</h2>{_chart_of(job, 'max_lag_seconds', 's', seconds)}"
        f"<h2>Lag per partition</h2>{_partition_charts(job, thresholds)}"
        f"<h2>Batch time against the trigger</h2>{_batch_chart(job, thresholds)}"
        f"<h2>Partitions (newest check)</h2>{_partitions(last.report)}"
        f"<h2>Checks ({len(job.checks)})</h2>{_checks_table(job, base)}"
    )
    return page(f"{job.name} - Streaming lag", body)
