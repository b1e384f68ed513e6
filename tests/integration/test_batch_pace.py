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
from collections import Counter
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
            polls = poll_until_crossed(kafka, ck, query, THRESHOLDS, TOTAL_LIMIT)
        finally:
            jobs.stop_quietly(query)
    judged = [r for r in polls if r.report is not None and r.report.committed_batch_id is not None]
    flagged = next(r for r in judged if _batch_time(r) is not None)
    crossed = next(r for r in judged if r.report is not None and r.report.total_lag > TOTAL_LIMIT)
    before = judged[: judged.index(flagged)]
    # Before it: OK, or the lag trend of a job whose batches read more as they slow (the
    # lagging rule, which comes first when both fire); never a threshold crossed.
    assert all(
        r.verdict.health is Health.OK or r.verdict.reason.startswith("lag grew at every batch")
        for r in before
    ), [r.verdict.reason for r in before]
    finding = _batch_time(flagged)
    assert finding is not None and finding.health is Health.LAGGING, flagged.verdict
    assert flagged.verdict.health is Health.LAGGING, flagged.verdict
    assert "more than 70% of it" in finding.reason, finding
    assert "resources" in finding.reason, finding
    pace = flagged.report.pace if flagged.report else None
    assert pace is not None and pace.interval_seconds is not None, pace
    assert abs(pace.interval_seconds - INTERVAL) < 1.0, pace
    assert flagged.report is not None and flagged.report.total_lag <= TOTAL_LIMIT
    assert crossed.report is not None
    margin = crossed.report.generated_at - flagged.report.generated_at
    print(
        f"batch_time flagged {margin:.1f} s before the lag crossed {TOTAL_LIMIT} "
        f"({finding.reason.split(':')[0]}; lag then {flagged.report.total_lag}); "
        f"{sum(r.verdict.health is Health.OK for r in before)} OK polls of {len(before)} before it"
    )
    assert margin > 0, margin
    rules = Counter(r.verdict.rule for r in judged)
    forecasts = [b for r in judged if r.report for b in r.report.time_to_breach if b.seconds]
    print(f"verdicts over {len(judged)} polls: {dict(rules)}; forecasts: {len(forecasts)}")


def _batch_time(result: CheckResult) -> Any:
    """The batch_time finding of ``result``, if the rule fired."""
    return next((f for f in result.verdict.findings if f.rule == "batch_time"), None)


def poll_until_crossed(
    kafka: Any, ck: str, query: Any, thresholds: Thresholds, limit: int
) -> list[CheckResult]:
    """Checks every second until the total lag crossed ``limit`` (at most 240 s)."""
    polls: list[CheckResult] = []
    deadline = time.monotonic() + 240
    with Session(kafka_config={"bootstrap.servers": kafka.bootstrap}) as session:
        while time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            try:
                result = check(session, ck, CheckOptions(thresholds))
            except CheckpointNotFound:  # nothing written yet
                time.sleep(1.0)
                continue
            polls.append(result)
            report = result.report
            if report is not None and report.total_lag > limit:
                return polls
            time.sleep(1.0)
    raise AssertionError(f"the lag never crossed {limit}: {polls[-1].verdict}")


CAPPED_RATE = 100  # records/s produced
CAP = 40  # maxOffsetsPerTrigger, on a 1 s trigger: the backlog grows by ~60 records/s
CAPPED_LIMIT = 4000
BREACH_BOUND = 20.0  # min_time_to_breach_seconds


def test_a_capped_query_is_forecast_to_cross_its_threshold_before_it_does(
    spark: Any, kafka: Any, tmp_path: Any
) -> None:
    """Issue 34 item 2: a query capped by maxOffsetsPerTrigger below the production rate. The
    forecast of max_lag_records_total is in its reports, the rule time_to_breach is among the
    findings before the lag crosses the threshold, and the crossing it predicted is compared
    with the real one (the production rate is an upper bound: it errs early)."""
    topic = kafka.create_topic(f"capped-{uuid.uuid4().hex[:8]}", partitions=1)
    ck = str(tmp_path / "ck")
    limits = Thresholds(max_lag_records_total=CAPPED_LIMIT, min_time_to_breach_seconds=BREACH_BOUND)
    polls: list[CheckResult] = []
    with producing(kafka.bootstrap, topic, CAPPED_RATE):
        df = jobs.kafka_stream(
            spark,
            kafka.bootstrap,
            topics=[topic],
            starting="latest",
            options={"maxOffsetsPerTrigger": str(CAP)},
        )
        query = jobs.start_query(df, ck, trigger={"processingTime": "1 second"})
        try:
            polls = poll_until_crossed(kafka, ck, query, limits, CAPPED_LIMIT)
        finally:
            jobs.stop_quietly(query)
    judged = [r for r in polls if r.report is not None and r.report.committed_batch_id is not None]
    flagged = next(r for r in judged if any(f.rule == "time_to_breach" for f in r.verdict.findings))
    crossed = judged[-1]
    assert flagged.report is not None and crossed.report is not None
    assert flagged.report.total_lag <= CAPPED_LIMIT, flagged.report.total_lag
    breach = next(
        b for b in flagged.report.time_to_breach if b.threshold == "max_lag_records_total"
    )
    assert breach.seconds is not None and 0 < breach.seconds < BREACH_BOUND, breach
    finding = next(f for f in flagged.verdict.findings if f.rule == "time_to_breach")
    assert "maxOffsetsPerTrigger" in finding.reason, finding
    predicted = flagged.report.generated_at + breach.seconds
    actual = crossed.report.generated_at
    print(
        f"time_to_breach flagged {actual - flagged.report.generated_at:.1f} s before the lag "
        f"crossed {CAPPED_LIMIT}: predicted in {breach.seconds:.1f} s at "
        f"+{breach.growth:.1f} records/s, crossed {actual - predicted:+.1f} s after the "
        f"prediction (polled every second); {finding.reason.split(':')[0]}"
    )
    assert actual > flagged.report.generated_at
    first = next(r for r in judged if r.report and _forecast(r.report) is not None)
    assert first.report is not None
    early = first.report.generated_at + (_forecast(first.report) or 0.0)
    print(
        f"first forecast {actual - first.report.generated_at:.1f} s before the crossing: "
        f"predicted {actual - early:+.1f} s early"
    )


def _forecast(report: Any) -> float | None:
    """The finite forecast of max_lag_records_total in ``report``, if any."""
    for b in report.time_to_breach:
        if b.threshold == "max_lag_records_total" and b.seconds and b.seconds < float("inf"):
            return float(b.seconds)
    return None
