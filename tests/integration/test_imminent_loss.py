"""Imminent data loss is a verdict at defaults, before Kafka deletes anything (issue 34).

A real PySpark query reads a topic whose retention is short (60 s, segments of 2 s, the broker
enforcing retention every second: testbed/kafka_broker.py) and stops after ONE batch while
production goes on at 10 records/s. Checked at defaults (no threshold set) every second:

- at once the report carries a time to data loss: the single batch cannot date the waiting
  records, so their timestamps are read (those partitions only) because the time_to_data_loss
  rule declares it needs their age;
- the verdict turns LAGGING (rule time_to_data_loss) before Kafka deletes the unread records,
  whatever else is unknown (one batch: no pace to judge STOPPED by), with what to do;
- DATA_LOSS comes after, and the margin between the two is measured and printed.
"""

from __future__ import annotations

import time

import pytest

from airflow_sparklag.model.verdict import Health
from airflow_sparklag.monitor import CheckOptions, check
from airflow_sparklag.session import Session
from testbed import jobs

pytestmark = pytest.mark.testbed

RETENTION_S = 60
SEGMENT_S = 2
RATE = 10  # records per second


def test_a_job_stopped_after_one_batch_is_at_risk_before_kafka_deletes(spark, kafka, tmp_path):
    ck = str(tmp_path / "ck")
    topic = jobs.stopped_after_one_batch(spark, kafka, ck, RETENTION_S, SEGMENT_S)

    flagged = lost = None
    with jobs.trickle(kafka, topic, RATE):
        time.sleep(3)
        with Session(kafka_config={"bootstrap.servers": kafka.bootstrap}) as session:
            first = check(session, ck, CheckOptions())
            assert first.report is not None and first.report.total_lag > 0, first.verdict
            assert len(first.report.history) == 1, first.report.history
            ttl = first.report.min_time_to_loss_seconds
            assert ttl is not None and RETENTION_S - 15 < ttl <= RETENTION_S, first.report
            asked = {read.what: read.asked_by for read in first.evidence}
            assert any("time_to_data_loss" in by for by in asked.values()), asked
            assert first.verdict.health is not Health.LAGGING, first.verdict  # not yet

            deadline = time.time() + RETENTION_S + 60
            while time.time() < deadline and lost is None:
                result = check(session, ck, CheckOptions())
                health, rule = result.verdict.health, result.verdict.rule
                if flagged is None and rule == "time_to_data_loss":
                    flagged = result
                    assert health is Health.LAGGING and health.exit_code == 1, result.verdict
                    assert "retention.ms" in result.verdict.reason, result.verdict
                if health is Health.DATA_LOSS:
                    lost = result
                time.sleep(1.0)
    assert flagged is not None, "never judged at risk before the deadline"
    assert lost is not None, "retention never deleted the unread records"
    assert flagged.report is not None and lost.report is not None
    margin = lost.report.generated_at - flagged.report.generated_at
    print(
        f"at risk {margin:.1f} s before DATA_LOSS was reported "
        f"(time to loss then {flagged.report.min_time_to_loss_seconds:.1f} s; retention "
        f"{RETENTION_S} s, warned within {RETENTION_S // 4} s)"
    )
    assert margin > 0, margin
