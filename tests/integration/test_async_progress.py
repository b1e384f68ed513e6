"""A REAL query with asynchronous progress tracking (``asyncProgressTrackingEnabled``), judged
over and over while it runs, then stopped, against an independent truth.

With async progress tracking Spark writes ``offsets/N`` and ``commits/N`` only for some batches
(at most once per ``asyncProgressTrackingCheckpointIntervalMs``), in the background: batch ids
on disk have gaps, the newest offsets run ahead of the newest commit, and the commit lags the
query's true progress by up to an interval. None of that may read as LAGGING, STALLED, STOPPED
or REWIND while the query keeps up: it is checked every ``POLL`` seconds for ``SOAK`` seconds
while records arrive steadily. Stopped with records waiting, it is STOPPED (past the user's
``max_commit_age_seconds`` at once, threshold-free once its documented bound passed) and its lag
is exactly what a plain consumer reads from the committed offsets on disk.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_lag_scenarios import _ids, assert_exact, disk_committed, disk_offsets, merged, uid
from test_real_time_mode import producing

from airflow_sparklag.model.verdict import STOPPED_MIN_IDLE_SECONDS, Health
from airflow_sparklag.monitor import CheckResult, check_checkpoint
from testbed import jobs

pytestmark = pytest.mark.testbed

RATE = 40  # records/s, steady
SOAK = 30.0  # seconds judged while running
POLL = 2.0  # seconds between checks
COMMIT_AGE = 10.0  # the user's max_commit_age_seconds: async commits come every second
FALSE_WHILE_RUNNING = {Health.LAGGING, Health.STALLED, Health.STOPPED, Health.REWIND}
# Issue 34: the forecast and batch-time rules, set tight, never fire on this healthy query.
AHEAD = {
    "max_lag_records_total": 10 * RATE,
    "max_lag_seconds": 30,
    "min_time_to_breach_seconds": 60,
    "max_batch_time_ratio": 0.8,
}


def check(kafka: Any, checkpoint: Path, **thresholds: Any) -> CheckResult:
    return check_checkpoint(
        str(checkpoint), kafka_config={"bootstrap.servers": kafka.bootstrap}, thresholds=thresholds
    )


def start(spark: Any, kafka: Any, topic: str, sink: str, checkpoint: Path) -> Any:
    df = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]).selectExpr("key", "value")
    return (
        df.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(checkpoint))
        .option("asyncProgressTrackingEnabled", "true")
        .option("asyncProgressTrackingCheckpointIntervalMs", "1000")
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def test_async_progress_tracking_soak_then_stopped(spark: Any, kafka: Any, tmp_path: Path) -> None:
    tag = uid()
    topic = kafka.create_topic(f"async-{tag}", partitions=2)
    sink = kafka.create_topic(f"async-{tag}-out", partitions=1)
    ck = tmp_path / "ck"
    with producing(kafka.bootstrap, topic, RATE):
        query = start(spark, kafka, topic, sink, ck)
        try:
            seen = soak(kafka, query, ck)
        finally:
            query.stop()
        stopped_at = time.time()
        time.sleep(1.0)  # records keep coming after the stop: they wait
    commits = _ids(ck / "commits")
    assert any(b - a > 1 for a, b in itertools.pairwise(commits)), commits  # ids with gaps
    assert seen["polls"] >= SOAK / POLL / 2, seen
    assert seen["gaps_in_history"] > 0, seen

    # Stopped with records waiting: STOPPED past the user's commit age, and by the
    # threshold-free rule once no batch came for its bound; never LAGGING/STALLED/REWIND.
    committed, on_disk = disk_committed(ck)
    aged = until_stopped(kafka, ck, stopped_at + COMMIT_AGE, max_commit_age_seconds=COMMIT_AGE)
    assert aged.verdict.rule == "stopped", aged.verdict
    assert aged.report is not None and aged.report.committed_batch_id == committed
    counted = assert_exact(aged, kafka, merged(on_disk))
    assert sum(counted.values()) >= RATE // 2, counted
    newest = _ids(ck / "offsets")[-1]
    flight = aged.report.in_flight
    if newest > committed:  # planned, never durably committed before the stop
        assert flight is not None and flight.batch_id == newest
        planned = {sid: o for sid, o in disk_offsets(ck, newest).items() if o is not None}
        assert flight.planned_offsets == planned
    else:
        assert flight is None
    # Threshold-free: no batch for 30 s (STOPPED_MIN_IDLE_SECONDS; its last batch on disk
    # may be up to a tracking interval older than the stop).
    idle = until_stopped(kafka, ck, stopped_at + STOPPED_MIN_IDLE_SECONDS)
    assert idle.verdict.rule == "stopped_idle", idle.verdict
    assert time.time() - stopped_at > STOPPED_MIN_IDLE_SECONDS - 2, idle.verdict


def soak(kafka: Any, query: Any, checkpoint: Path) -> Counter[str]:
    """Checks the running query every POLL s for SOAK s after its first commit, with default
    thresholds and (once it committed: a first batch on a loaded machine may take longer)
    with max_commit_age_seconds: OK every time (UNKNOWN before the first commit); counts what
    it saw (offsets ahead of the commit, gaps in the history read)."""
    seen: Counter[str] = Counter()
    first = None
    deadline = time.monotonic() + SOAK + 90
    while first is None or time.monotonic() - first < SOAK:
        assert time.monotonic() < deadline, seen
        assert query.exception() is None, f"query failed: {query.exception()}"
        for thresholds in ({}, {"max_commit_age_seconds": COMMIT_AGE}, AHEAD) if first else ({},):
            result = check(kafka, checkpoint, **thresholds)
            health = result.verdict.health
            assert health not in FALSE_WHILE_RUNNING, (thresholds, result.verdict)
            report = result.report
            if report is None or report.committed_batch_id is None:
                assert result.verdict.rule == "no_commit", result.verdict
                continue
            first = first or time.monotonic()
            assert health is Health.OK, (thresholds, result.verdict)
            ids = [h.batch_id for h in report.history]
            seen["gaps_in_history"] += any(b - a > 1 for a, b in itertools.pairwise(ids))
            seen["offsets_ahead"] += report.in_flight is not None
            seen["polls"] += 1
            seen["paced"] += thresholds is AHEAD and report.pace is not None
            seen["forecast"] += any(b.seconds is not None for b in report.time_to_breach)
        time.sleep(POLL)
    print(f"async soak: {dict(seen)}")
    return seen


def until_stopped(kafka: Any, checkpoint: Path, due: float, **thresholds: Any) -> CheckResult:
    """Checks the stopped query until STOPPED, at most 20 s past ``due`` (epoch seconds):
    OK before, never another verdict."""
    while True:
        result = check(kafka, checkpoint, **thresholds)
        health = result.verdict.health
        assert health in (Health.OK, Health.STOPPED), (thresholds, result.verdict)
        if health is Health.STOPPED:
            return result
        assert time.time() < due + 20, (thresholds, result.verdict)
        time.sleep(1.0)
