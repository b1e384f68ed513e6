"""The "Streaming lag" page's pure parts: reading XCom values into jobs, ordering, filtering,
naming, and the chart's geometry (tests/airflow/test_lag_page.py serves them in Airflow)."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta, timezone
from html import escape
from typing import Any

import pytest

from airflow_sparklag.airflow.lag_html import STYLE, fleet_page, job_page, time_chart
from airflow_sparklag.airflow.lag_page import collect, counts, matching, parse_xcom
from airflow_sparklag.compact import compact

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)


def result(location: str, health: str, lag: int | None = 0, error: str | None = None) -> dict:
    report = None if lag is None else {"total_lag": lag, "max_lag_seconds": 2.5}
    return {"location": location, "error": error, "verdict": {"health": health}, "report": report}


def judged(location: str, waiting: int, commit_age: float, thresholds: dict[str, Any]) -> dict:
    """A real check's ``CheckResult.to_dict()``: a one-batch checkpoint committed
    ``commit_age`` s ago with ``waiting`` records on three partitions since (exact ages, a
    7-day retention), measured by ``compute_lag`` and judged by ``health.evaluate``."""
    from airflow_sparklag.checkpoint_files import BatchOffsets, CheckpointState, SourceOffset
    from airflow_sparklag.health import evaluate
    from airflow_sparklag.kafka import KafkaSnapshot, PartitionOffsets, TopicRetention
    from airflow_sparklag.lag import Answers, compute_lag
    from airflow_sparklag.model.result import CheckResult
    from airflow_sparklag.model.verdict import Thresholds

    now, at = time.time(), time.time() - commit_age
    offsets = {"orders": dict.fromkeys(range(3), 100)}
    source = SourceOffset("0", "kafka", offsets, json.dumps(offsets))
    batch = BatchOffsets(7, 1, int(at * 1000), 0, {}, (source,), at)
    state = CheckpointState(location, None, 7, batch, at, None, (batch,), (7,), (7,), False)
    split = (waiting // 2, waiting // 3, waiting - waiting // 2 - waiting // 3)
    ends = {p: PartitionOffsets(0, 100 + n, None) for p, n in enumerate(split)}
    snapshot = KafkaSnapshot({"orders": ends}, frozenset(), now, None)
    stamps = {("orders", p): int((at + 1) * 1000) for p in range(3)}  # waiting since then
    week = {"0": {"orders": TopicRetention(7 * 86_400_000, None, deletes=True)}}
    report = compute_lag(state, snapshot, record_timestamps=stamps, answers=Answers(week))
    verdict = evaluate(report, Thresholds.from_dict(thresholds))
    return CheckResult(report, verdict, location).to_dict()


def row(task: str, minutes: int, value, name: str | None = None):
    return (
        "dag",
        f"run{minutes}",
        task,
        -1 if name is None else 0,
        name,
        T0 + timedelta(minutes=minutes),
        value,
    )


def test_xcom_values_of_every_kind():
    failed = result("/ck/a", "CHECK_FAILED", lag=None, error="CheckpointNotFound: /ck/a")
    assert parse_xcom(failed)[0]["health"] == "CHECK_FAILED"
    assert parse_xcom(failed)[0]["reason"] == "CheckpointNotFound: /ck/a"
    scan = [
        {"location": "/ck/b", "health": "UNKNOWN", "error": "CheckpointCorrupt: /ck/b/offsets/0"},
        {"location": "/ck/c", "health": "OK", "total_lag": 3, "max_lag_seconds": 1.5},
    ]
    parsed = {p["location"]: p for p in parse_xcom(scan)}  # a scan's list (sparklag_results)
    assert parsed["/ck/b"]["health"] == "CHECK_FAILED"  # unreadable is a failed check
    assert (parsed["/ck/c"]["health"], parsed["/ck/c"]["total_lag"]) == ("OK", 3)
    fleet = {"jobs": 2, "failing": [{"location": "/ck/d", "health": "LAGGING", "total_lag": 9}]}
    assert [p["location"] for p in parse_xcom(fleet)] == ["/ck/d"]
    assert parse_xcom('{"location": "/ck/e", "verdict": {"health": "OK"}}')[0]["health"] == "OK"
    assert parse_xcom("not json") == [] and parse_xcom({"unrelated": 1}) == []
    # a check task's document (docs/json.md): one job, named by its task
    summary = {"jobs": 1, "failed_checks": 0}
    document = {"schema": "sparklag/1", "command": "check", "summary": summary,
                "results": [result("/ck/f", "LAGGING", lag=4)]}  # fmt: skip
    (job,) = collect([row("check_f", 1, document)])
    assert (job.name, job.last.health, job.last.total_lag) == ("check_f", "LAGGING", 4)


def test_jobs_worst_first_named_and_filtered():
    jobs = collect(
        [
            row("check_orders", 0, result("/ck/orders", "LAGGING", 10), name="orders"),
            row("check_orders", 5, result("/ck/orders", "OK", 0), name="orders"),
            row("check_x", 1, result("/ck/x", "STOPPED", 7)),
            row("fleet", 2, {"failing": [{"location": "/ck/team/y", "health": "DATA_LOSS"}]}),
            row("fleet", 3, [{"location": "/ck/z", "health": "UNKNOWN", "error": "boom"}]),
        ]
    )
    assert [(j.name, j.last.health) for j in jobs] == [
        ("z", "CHECK_FAILED"),
        ("y", "DATA_LOSS"),
        ("check_x", "STOPPED"),
        ("orders", "OK"),  # the newest check decides
    ]
    assert counts(jobs) == {"CHECK_FAILED": 1, "DATA_LOSS": 1, "STOPPED": 1, "OK": 1}
    assert [j.name for j in matching(jobs, "STOPPED", None)] == ["check_x"]
    assert [j.name for j in matching(jobs, None, "TEAM")] == ["y"]  # the location matches too
    orders = jobs[-1]
    assert [c.total_lag for c in orders.checks] == [10, 0]  # oldest first
    # a fleet's later check of the same location keeps the name a task gave it
    again = collect([*[row("check_orders", 0, result("/ck/o", "OK"), name="o1")],
                     row("fleet", 9, [{"location": "/ck/o", "health": "OK"}])])  # fmt: skip
    assert again[0].name == "o1" and again[0].last.task_id == "fleet"


def test_chart_keeps_y_labels_left_of_the_plot_and_draws_thresholds():
    points = [(T0.timestamp() + 600 * i, v) for i, v in enumerate([0, 50_000, 1_234_567])]
    svg = time_chart(points, unit="records", thresholds={"max_lag_records_total": 100_000})
    plot_left = min(float(x) for x in re.findall(r'<circle class="point" cx="([\d.]+)"', svg))
    for x, text in re.findall(r'class="axis y-label" x="([\d.]+)"[^>]*>([^<]*)<', svg):
        # right-aligned at x, about 7 px per character: the longest label still fits the margin
        assert float(x) < plot_left and len(text) * 7 <= float(x), (x, text)
    assert re.findall(r'class="axis x-label"[^>]*>([^<]*)<', svg) == [
        "12:00", "12:05", "12:10", "12:15", "12:20",
    ]  # fmt: skip
    assert 'class="threshold"' in svg and "max_lag_records_total 100,000" in svg


def test_stopped_unknown_and_failed_have_their_own_colours():
    colours = dict(re.findall(r"\.health-([A-Z_]+)\{background:(#[0-9a-f]+)", STYLE))
    verdicts = ["OK", "LAGGING", "STALLED", "STOPPED", "REWIND", "DATA_LOSS", "UNKNOWN"]
    assert len({colours[h] for h in [*verdicts, "CHECK_FAILED"]}) == 8


def test_time_to_data_loss_is_a_column():
    def losing(location: str, loss) -> dict:  # type: ignore[no-untyped-def]
        value = result(location, "LAGGING", 5)
        value["report"]["min_time_to_loss_seconds"] = loss
        return value

    jobs = collect(
        [
            row("a", 0, losing("/ck/a", 7200.0)),
            row("b", 0, losing("/ck/b", "infinite")),
            row("c", 0, losing("/ck/c", None)),
        ]
    )
    losses = {j.location: j.last.min_time_to_loss_seconds for j in jobs}
    assert losses == {"/ck/a": 7200.0, "/ck/b": float("inf"), "/ck/c": None}
    html = fleet_page(jobs, counts(jobs), jobs, "http://airflow", (None, None))
    assert "<th>Data loss in</th>" in html
    # the last number cell of each row, before the trend
    cells = re.findall(r'<td class="num">([^<]*)</td><td>(?:<svg|<span class="muted">)', html)
    assert sorted(cells) == ["-", "2.0h", "never"], cells


def test_an_unknown_number_says_why_under_its_cell():
    """A real check of a job with one batch: its catch-up is unknown, and the page says why
    in the report's own words (``report.unknown``), as the CLI and JSON do."""
    from airflow_sparklag.lag import ONE_BATCH

    value = judged("/ck/stopped", 700, 3600.0, {"max_commit_age_seconds": 600})
    assert value["report"]["unknown"] == {"catch_up_seconds": ONE_BATCH}
    jobs = collect([row("check", 0, value)])
    assert jobs[0].last.unknown == {"catch_up_seconds": ONE_BATCH}
    html = fleet_page(jobs, counts(jobs), jobs, "http://airflow", (None, None))
    assert f'<td class="num">unknown<span class="why">{ONE_BATCH}</span></td>' in html
    reason = value["verdict"]["reason"]
    assert value["verdict"]["health"] == "STOPPED" and reason.startswith("no commit for 3600 s")
    assert f'<td class="reason">{escape(reason)}</td>' in html  # the verdict's own reason


@pytest.mark.parametrize("stored", ["full", "compact"])
def test_job_view_draws_the_most_lagging_partitions_over_time_with_thresholds(stored):
    """From XComs of every partition in full (before airflow_sparklag.compact) and from the
    compact ones the check classes store now (20 in full, every one in columns)."""

    def with_partitions(minute: int, lags: list[int]) -> tuple:
        parts = [
            {"topic": "orders", "partition": p, "lag": lag, "lag_seconds": lag / 10}
            for p, lag in enumerate(lags)
        ]
        value = result("/ck/p", "LAGGING", sum(lags))
        value["report"]["sources"] = [{"topics": [{"topic": "orders", "partitions": parts}]}]
        return row("check_p", minute, compact(value) if stored == "compact" else value, name="p")

    # 1,000 partitions: partition p lags p records, partition 3 lags most in the newest check
    many = list(range(1000))
    job = collect([with_partitions(0, many), with_partitions(5, [*many[:3], 5000, *many[4:]])])[0]
    html = job_page(job, {"max_lag_records_per_partition": 900, "max_lag_seconds": 60}, "")
    lines = re.findall(
        r'<polyline class="line" style="stroke:#[0-9a-f]+" data-line="([^"]*)"', html
    )
    top = ["orders-3", *(f"orders-{p}" for p in range(999, 992, -1))]
    assert lines[2:] == top + top  # after the total and time charts: records, then seconds
    assert "8 of 1000 partitions" in html
    assert "max_lag_records_per_partition 900</text>" in html
    assert html.count("max_lag_seconds 60.0s<") == 2  # the time lag and per-partition charts
    assert html.count('<span class="key">') == 16  # a legend per partition chart
    assert len(html) < 200_000  # the 1,000 partitions' table, not 1,000 lines


def test_batch_time_is_a_column():
    """report.pace's batch time and its share of the interval (issue 34), from a whole
    report and as the database extracts it (flat)."""
    paced = result("/ck/a", "LAGGING", 5)
    paced["report"]["pace"] = {"batch_seconds": 9.2, "ratio": 0.92, "interval_seconds": 10.0}
    jobs = collect([row("a", 0, paced), row("b", 0, result("/ck/b", "OK", 0))])
    html = fleet_page(jobs, counts(jobs), jobs, "http://airflow", (None, None))
    assert "<th>Batch time</th><th>Data loss in</th>" in html
    assert '<td class="num">9.2s (92%)</td>' in html
    flat = parse_xcom(result("/ck/c", "OK", 0))[0]
    assert flat["batch_seconds"] is None and flat["batch_time_ratio"] is None


def test_batch_chart_draws_each_batch_once_over_the_checks_windows():
    """Two checks whose windows overlap (batches 3-5, then 4-7): each batch once, at the
    time it was planned, against the newest interval; a check without pace draws nothing."""

    def paced(minute: int, ids: range, interval: float | None) -> tuple:
        value = result("/ck/pace", "OK", 0)
        start = T0.timestamp() + 60 * minute
        value["report"]["pace"] = {
            "batch_ids": list(ids),
            "batch_starts_ms": [(start + 2 * i) * 1000 for i in ids],
            "batch_times": [0.5 * i for i in ids],
            "interval_seconds": interval,
        }
        return row("check_pace", minute, value, name="pace")

    job = collect([paced(0, range(3, 6), 1.8), paced(1, range(4, 8), 2.0)])[0]
    html = job_page(job, {"max_batch_time_ratio": 0.75}, "")
    chart = html.split("<h2>Batch time against the trigger</h2>", 1)[1].split("<h2>", 1)[0]
    tips = re.findall(r"<title>[^<]*: ([^<]+)</title></circle>", chart)
    assert tips == ["1.5s", "2.0s", "2.5s", "3.0s", "3.5s"]  # batches 3..7, each once
    assert "trigger interval 2.0s</text>" in chart  # the newest check's
    assert "max_batch_time_ratio 75% 1.5s</text>" in chart
    # a bound close to the interval: its label goes below its line, not over the other's
    close = job_page(job, {"max_batch_time_ratio": 0.95}, "")
    labels = re.findall(r'threshold-label" x="[\d.]+" y="([\d.]+)"', close)
    assert len(labels) == 2 and abs(float(labels[0]) - float(labels[1])) >= 13, labels
    bare = collect([row("check_pace", 0, result("/ck/pace", "OK", 0), name="pace")])[0]
    assert "Not measured" in job_page(bare, {}, "").split("against the trigger</h2>", 1)[1]
