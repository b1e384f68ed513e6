"""render: what the CLI prints beside the numbers (LSO, notes, unknown time lag, last run)."""

from __future__ import annotations

import dataclasses

from test_lag import NOW, batch, snapshot, state

from airflow_sparklag.health import evaluate
from airflow_sparklag.lag import MAY_KEEP_PACE, ONE_BATCH, compute_lag
from airflow_sparklag.model.verdict import Thresholds
from airflow_sparklag.render import partition_table, render


def rows(table: str) -> list[dict[str, str]]:
    header, *lines = table.splitlines()
    return [dict(zip(header.split(), line.split(), strict=False)) for line in lines]


def test_log_end_and_last_stable_offset_side_by_side() -> None:
    st = state([batch(0, {"t": {0: 90}}, NOW - 10)])
    report = compute_lag(st, snapshot({"t": {0: (0, 100, 95)}}), now=NOW, read_committed=True)
    (row,) = rows(partition_table(report))
    assert (row["log_end"], row["lso"], row["lag"]) == ("100", "95", "5")
    text = render(report, evaluate(report))
    assert "note        read_committed: lag measured to the last stable offset" in text
    assert "open transactions: last stable offset below the high watermark on t:0 95<100" in text


def test_unknown_time_lag_says_why() -> None:
    history = [batch(0, {"t": {0: 100}}, NOW - 1001), batch(1, {"t": {0: 200}}, NOW - 1000)]
    report = compute_lag(state(history), snapshot({"t": {0: (0, 3200)}}), now=NOW)
    text = render(report, evaluate(report))
    assert "time lag    unknown: produced at an unknown moment of a 1000 s gap" in text


def test_first_batch_and_last_run_lines() -> None:
    first = batch(0, {"t": {0: 2000}}, NOW - 5, modified=NOW - 5)
    report = compute_lag(
        state([], in_flight=first),
        snapshot({"t": {0: (0, 2000)}}),
        now=NOW,
        source_starts={"0": {"t": {0: 0}}},
    )
    text = render(report, evaluate(report))
    assert "committed   nothing yet" in text
    assert "not_committed(started at 0)" in text
    assert "health      UNKNOWN: the query has not committed a batch yet" in text

    history = [batch(0, {"t": {0: 10}}, NOW - 7200), batch(1, {"t": {0: 20}}, NOW - 3600)]
    scheduled = compute_lag(state(history), snapshot({"t": {0: (0, 20)}}), now=NOW, runs_every=3600)
    text = render(scheduled, evaluate(scheduled))
    assert "schedule    every 60.0m (+15.0m grace), 2 run(s) in the history read" in text
    assert "last run    batches 1..1 (1), started " in text


def test_rate_line_names_the_batches_it_is_measured_over() -> None:
    history = [batch(i, {"t": {0: 100 * (i + 1)}}, NOW - 30 + 10 * i) for i in range(3)]
    report = compute_lag(state(history), snapshot({"t": {0: (0, 350)}}), now=NOW)
    text = render(report, evaluate(report))
    assert "rate        10.0 records/s consumed over batches 0-2, catch-up " in text
    two = compute_lag(state(history[1:]), snapshot({"t": {0: (0, 350)}}), now=NOW)
    assert "records/s consumed over batches 1-2, catch-up " in render(two, evaluate(two))


def test_pace_and_forecast_lines() -> None:
    """Issue 34: the batches' pace (from the listing's times) and when each threshold is
    crossed at the current rates."""
    history = [batch(i, {"t": {0: 100 * (i + 1)}}, NOW - 30 + 10 * i) for i in range(3)]
    listed = tuple((i, NOW - 30 + 10 * i, NOW - 28 + 10 * i) for i in range(3))
    read = dataclasses.replace(state(history), listed_times=listed)
    limits = Thresholds(max_lag_records_total=10_000)
    report = compute_lag(read, snapshot({"t": {0: (0, 500)}}), now=NOW, thresholds=limits)
    text = render(report, evaluate(report, limits))
    assert "batches     batches take 2.0 s on a 10.0 s interval (20%)" in text
    # 400 produced in 30 s, 200 consumed in 20 s: +3.3 records/s, 9,800 records to go
    assert "forecast    max_lag_records_total 10000 crossed in 49.0 min at +3.3 records/s" in text
    assert report.to_dict()["pace"]["interval_seconds"] == 10.0


def test_an_unknown_catch_up_says_why() -> None:
    """Consumed 10 records/s while up to 30/s may have been produced (an upper bound: the log
    end at the oldest batch is not known): the backlog may not shrink, and the line says so
    in report.unknown's words, with the bound. One batch read: no rate at all, said too."""
    history = [batch(i, {"t": {0: 100 * (i + 1)}}, NOW - 30 + 10 * i) for i in range(3)]
    report = compute_lag(state(history), snapshot({"t": {0: (0, 1000)}}), now=NOW)
    assert report.catch_up_seconds is None
    assert report.unknown["catch_up_seconds"] == MAY_KEEP_PACE
    text = render(report, evaluate(report))
    assert (
        "rate        10.0 records/s consumed over batches 0-2, catch-up unknown: production "
        "may keep pace (up to 30.0 records/s produced: an upper bound)"
    ) in text
    one = compute_lag(state(history[-1:]), snapshot({"t": {0: (0, 1000)}}), now=NOW)
    assert one.unknown["catch_up_seconds"] == ONE_BATCH
    assert f"catch-up    unknown: {ONE_BATCH}" in render(one, evaluate(one))
    caught_up = compute_lag(state(history), snapshot({"t": {0: (0, 300)}}), now=NOW)
    assert caught_up.unknown == {} and caught_up.catch_up_seconds == 0.0
