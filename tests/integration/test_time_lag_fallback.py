"""A seconds SLA is never skipped: when the estimate cannot date the records, exact mode does.

A rate-limited job (maxOffsetsPerTrigger) stopped with a backlog: its checkpoint's batches all
read the same number of records, so the history cannot say when the waiting records were
produced. With `max_lag_seconds` set, the check reads their timestamps instead of judging OK.
"""

from __future__ import annotations

import time

import pytest

from airflow_sparklag.monitor import check_checkpoint
from testbed import jobs

pytestmark = pytest.mark.testbed


def test_seconds_threshold_falls_back_to_exact_time_lag(spark, kafka, topic, tmp_path):
    kafka.produce(topic, 600)
    produced_at = time.time()
    checkpoint = str(tmp_path / "ck")
    stream = jobs.kafka_stream(
        spark, kafka.bootstrap, topics=[topic], options={"maxOffsetsPerTrigger": "30"}
    )
    query = jobs.start_query(stream, checkpoint, trigger={"processingTime": "500 milliseconds"})
    try:
        jobs.wait_for_batches(query, 4)
    finally:
        jobs.stop_quietly(query)
    time.sleep(3)  # the waiting records are now at least 3 s old
    config = {"bootstrap.servers": kafka.bootstrap}

    # The imminent-loss warning off: at defaults it reads the waiting records' timestamps.
    alone = {"min_time_to_loss_ratio": 0}
    estimate = check_checkpoint(checkpoint, kafka_config=config, thresholds=alone)
    assert estimate.report.rate_limited
    assert estimate.report.total_lag > 0
    assert estimate.report.max_lag_seconds is None  # the estimate says it cannot tell
    assert estimate.report.time_lag_mode == "estimate"
    # At defaults the time-to-loss rule asks for the ages the estimate cannot give.
    dated = check_checkpoint(checkpoint, kafka_config=config)
    assert dated.report.time_lag_mode == "exact"
    assert dated.report.min_time_to_loss_seconds is not None

    # A window longer than the retained history keeps the trend rules (STOPPED after idling)
    # silent, so the verdict is the seconds rule's alone.
    quiet = {"window": 50, "min_window": 50}
    judged = check_checkpoint(
        checkpoint, kafka_config=config, thresholds={"max_lag_seconds": 1, **quiet}
    )
    report = judged.report
    assert report.time_lag_mode == "exact"
    age = time.time() - produced_at
    assert report.max_lag_seconds is not None
    assert 3 <= report.max_lag_seconds <= age + 1
    assert judged.verdict.health.value == "LAGGING"
    assert "s > 1 s" in judged.verdict.reason

    relaxed = check_checkpoint(
        checkpoint, kafka_config=config, thresholds={"max_lag_seconds": age + 600, **quiet}
    )
    assert relaxed.verdict.health.value == "OK", relaxed.verdict.reason
    assert relaxed.report.time_lag_mode == "exact"
