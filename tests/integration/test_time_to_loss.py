"""Time to data loss on a real broker: a real Spark query reads a topic with a short
retention and small segments, stops, and records wait; the check predicts when retention
deletes the oldest unread one, and DATA_LOSS is first reported no earlier than that.

The broker enforces retention every second (testbed/kafka_broker.py). Kafka deletes a whole
segment once its NEWEST record is older than retention.ms, so the prediction (from the oldest
unread record's own timestamp) is a lower bound, late by at most the span of that record's
segment (segment.ms here, while records keep arriving) plus the broker's check interval.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from airflow_sparklag.model.verdict import Health, Thresholds
from airflow_sparklag.monitor import CheckOptions, check
from airflow_sparklag.session import Session
from testbed import jobs
from tests.first_check import status_at_defaults

pytestmark = pytest.mark.testbed

SPARKLAG = Path(sys.executable).parent / "sparklag"
RETENTION_S = 20
SEGMENT_S = 2


def test_time_to_loss_is_a_lower_bound_of_when_data_loss_is_reported(spark, kafka, tmp_path):
    topic = kafka.create_topic(
        f"ttl-{uuid.uuid4().hex[:8]}",
        partitions=1,
        config={"retention.ms": str(RETENTION_S * 1000), "segment.ms": str(SEGMENT_S * 1000)},
    )
    kept = kafka.create_topic(
        f"ttl-kept-{uuid.uuid4().hex[:8]}", partitions=1, config={"retention.ms": "-1"}
    )
    compacted = kafka.create_topic(
        f"ttl-compact-{uuid.uuid4().hex[:8]}", partitions=1, config={"cleanup.policy": "compact"}
    )
    ck = str(tmp_path / "ck")
    stream = jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic, kept, compacted])
    for name in (topic, kept, compacted):
        kafka.produce(name, 10)
    jobs.run_available_now(stream, ck)  # committed 10 on each topic
    for name in (topic, kept, compacted):
        kafka.produce(name, 5, start=100)  # 5 wait on each
    # A first check at defaults: a compacted topic's lag too is its end offset minus the
    # committed one. Three topics named alike (ttl-...) may be a pattern's: the one thing
    # asked is that pattern, should there be one.
    first = status_at_defaults(ck, kafka.bootstrap)
    assert first.lags() == {(name, 0): 5 for name in (topic, kept, compacted)}, first
    assert first.asks_for() == {"--subscribe-pattern"}, first.messages()

    stop = threading.Event()

    def keep_producing() -> None:  # new segments keep rolling, as on a live topic
        i = 1000
        while not stop.wait(0.5):
            kafka.produce(topic, 1, start=i)
            i += 1

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    try:
        with Session(kafka_config={"bootstrap.servers": kafka.bootstrap}) as session:
            options = CheckOptions(Thresholds(min_time_to_loss_seconds=3600), exact_time_lag=True)
            first = check(session, ck, options)
            parts = {p.topic: p for p in first.report.partitions()}
            ttl = parts[topic].time_to_loss_seconds
            assert ttl is not None and 0 < ttl <= RETENTION_S, parts[topic]
            assert parts[kept].time_to_loss_seconds == float("inf")
            assert parts[compacted].time_to_loss_seconds == float("inf")
            assert first.report.min_time_to_loss_seconds == ttl
            # The threshold: the records go before an hour is up.
            assert first.verdict.health is Health.LAGGING, first.verdict
            assert first.verdict.rule == "time_to_data_loss", first.verdict
            predicted = first.report.generated_at + ttl
            data = first.to_dict()["report"]
            by_topic = {
                t["topic"]: t["partitions"][0]["time_to_loss_seconds"]
                for s in data["sources"]
                for t in s["topics"]
            }
            assert by_topic[kept] == "infinite" and by_topic[compacted] == "infinite"
            json.dumps(data)  # JSON-safe

            deadline = time.time() + RETENTION_S + 40
            lost_at = None
            while time.time() < deadline:
                result = check(session, ck, CheckOptions())
                if result.verdict.health is Health.DATA_LOSS:
                    lost_at = result.report.generated_at
                    break
                time.sleep(0.5)
    finally:
        stop.set()
        producer.join(10)
    assert lost_at is not None, "retention never deleted the unread records"
    late = lost_at - predicted
    print(f"time to loss predicted {ttl:.1f} s; DATA_LOSS reported {late:+.1f} s after it")
    assert late >= -1.0, f"loss reported {-late:.1f} s before the predicted lower bound"
    assert late <= SEGMENT_S + 1 + 10, f"loss reported {late:.1f} s after the prediction"


def test_cli_prints_the_time_to_loss_and_fails_on_its_threshold(spark, kafka, tmp_path):
    topic = kafka.create_topic(
        f"ttl-cli-{uuid.uuid4().hex[:8]}", partitions=2, config={"retention.ms": "600000"}
    )
    ck = str(tmp_path / "ck")
    kafka.produce(topic, 10)
    jobs.run_available_now(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]), ck)
    kafka.produce(topic, 4)

    def status(*flags: str) -> subprocess.CompletedProcess[str]:
        command = [str(SPARKLAG), "status", ck, "-b", kafka.bootstrap, "--exact-time-lag", *flags]
        return subprocess.run(command, capture_output=True, text=True, timeout=90)

    text = status()
    assert text.returncode == 0, text.stdout + text.stderr
    assert "data loss   the oldest unread records are deleted in" in text.stdout, text.stdout
    breach = status("--min-time-to-loss-seconds", "1h", "--json")
    assert breach.returncode == 1, breach.stdout + breach.stderr
    verdict = json.loads(breach.stdout)["results"][0]["verdict"]
    assert verdict["rule"] == "time_to_data_loss", verdict
    assert "retention deletes unread records in" in verdict["reason"], verdict
    ok = status("--min-time-to-loss-seconds", "5m")
    assert ok.returncode == 0, ok.stdout + ok.stderr
