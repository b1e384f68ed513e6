"""Batch time against the trigger, flagged before lag grows (issue 34 item 3).

A real PySpark query on a 5 s processing-time trigger whose foreachBatch sleeps 0.5 s longer
at each batch, reading a topic produced at 40 records/s, is checked every second with a lag
threshold (``max_lag_records_total``), ``max_batch_time_ratio`` 0.7 and
``min_time_to_breach_seconds``:

- while its batches fit their interval, every verdict is OK (no false alarm), and the report's
  pace measures the 5 s interval from the listing alone;
- LAGGING with rule ``batch_time`` (the next step in its reason) comes before the lag crosses
  its threshold; the margin is measured and printed.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from test_real_time_mode import producing

from airflow_sparklag.errors import CheckpointNotFound
from airflow_sparklag.model.verdict import Health, Thresholds
from airflow_sparklag.monitor import CheckOptions, CheckResult, check
from airflow_sparklag.session import Session
from testbed import jobs

pytestmark = pytest.mark.testbed

INTERVAL = 5.0  # processingTime
STEP = 0.5  # each batch sleeps this much longer than the one before
RATE = 40  # records/s
# Crossed once the committed offsets trail the log end by 12 s of production: never while the
# batches fit their interval (at most an interval and a batch, under 10 s).
TOTAL_LIMIT = 12 * RATE
RATIO = 0.7
THRESHOLDS = Thresholds(
    max_lag_records_total=TOTAL_LIMIT, max_batch_time_ratio=RATIO, min_time_to_breach_seconds=30
)


def test_batches_slowing_past_their_interval_are_flagged_before_lag_crosses(
    spark: Any, kafka: Any, tmp_path: Any
) -> None:
    topic = kafka.create_topic(f"pace-{uuid.uuid4().hex[:8]}", partitions=1)
    ck = str(tmp_path / "ck")

    def slower(_df: Any, batch_id: int) -> None:
        time.sleep(min(STEP * batch_id, 40.0))

    polls: list[CheckResult] = []
    with producing(kafka.bootstrap, topic, RATE):
        df = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic], starting="latest")
        query = jobs.start_query(
            df,
            ck,
            sink="foreachBatch",
            foreach_batch=slower,
            trigger={"processingTime": f"{INTERVAL:g} seconds"},
        )
        try:
            polls = poll_until_crossed(kafka, ck, query)
        finally:
            jobs.stop_quietly(query)
    judged = [r for r in polls if r.report is not None and r.report.committed_batch_id is not None]
    flagged = next(r for r in judged if r.verdict.rule == "batch_time")
    crossed = next(r for r in judged if r.report is not None and r.report.total_lag > TOTAL_LIMIT)
    before = judged[: judged.index(flagged)]
    assert {r.verdict.health for r in before} <= {Health.OK}, [
        r.verdict.reason for r in before if r.verdict.health is not Health.OK
    ]
    assert flagged.verdict.health is Health.LAGGING, flagged.verdict
    assert "more than 70% of it" in flagged.verdict.reason, flagged.verdict
    assert "resources" in flagged.verdict.reason, flagged.verdict
    pace = flagged.report.pace if flagged.report else None
    assert pace is not None and pace.interval_seconds is not None, pace
    assert abs(pace.interval_seconds - INTERVAL) < 1.0, pace
    assert flagged.report is not None and flagged.report.total_lag <= TOTAL_LIMIT
    assert crossed.report is not None
    margin = crossed.report.generated_at - flagged.report.generated_at
    print(
        f"batch_time flagged {margin:.1f} s before the lag crossed {TOTAL_LIMIT} "
        f"({flagged.verdict.reason.split(':')[0]}; lag then {flagged.report.total_lag}); "
        f"{len(before)} OK polls before it"
    )
    assert margin > 0, margin


def poll_until_crossed(kafka: Any, ck: str, query: Any) -> list[CheckResult]:
    """Checks every second until the lag crossed TOTAL_LIMIT (at most 240 s)."""
    polls: list[CheckResult] = []
    deadline = time.monotonic() + 240
    with Session(kafka_config={"bootstrap.servers": kafka.bootstrap}) as session:
        while time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            try:
                result = check(session, ck, CheckOptions(THRESHOLDS))
            except CheckpointNotFound:  # nothing written yet
                time.sleep(1.0)
                continue
            polls.append(result)
            report = result.report
            if report is not None and report.total_lag > TOTAL_LIMIT:
                return polls
            time.sleep(1.0)
    raise AssertionError(f"the lag never crossed {TOTAL_LIMIT}: {polls[-1].verdict}")
