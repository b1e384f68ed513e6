"""What `sparklag status` says at defaults on a real one-topic `subscribe` query: no note that
cannot change its numbers, and every unknown number with its reason, in the same words in the
table and in JSON (``LagReport.unknown``).

The query reads 30 records in one batch (AvailableNow) and stops; 25 more are produced.
"""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_sparklag import cli
from airflow_sparklag.lag import ONE_BATCH, UNREAD_TOPICS
from testbed import jobs

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def one_batch(spark, kafka, tmp_path_factory):  # type: ignore[no-untyped-def]
    topic = kafka.create_topic(f"plain-{uuid.uuid4().hex[:8]}", partitions=2)
    kafka.produce(topic, 30)
    ck = tmp_path_factory.mktemp("plain") / "ck"
    jobs.run_available_now(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]), str(ck))
    kafka.produce(topic, 25, start=100)
    return {"topic": topic, "ck": str(ck)}


def status(kafka, ck: str, capsys, *flags: str) -> str:  # type: ignore[no-untyped-def]
    # A day's commit age decides STOPPED: the verdict must not depend on when the test runs.
    cli.main(["status", ck, "--bootstrap-servers", kafka.bootstrap,
              "--max-commit-age-seconds", "86400", *flags])  # fmt: skip
    return str(capsys.readouterr().out)


def test_a_one_topic_subscribe_job_gets_no_topics_note(one_batch, kafka, capsys):
    text = status(kafka, one_batch["ck"], capsys)
    assert "lag         25 records" in text
    assert UNREAD_TOPICS not in text and "note  " not in text, text
    payload = json.loads(status(kafka, one_batch["ck"], capsys, "--json"))
    (job,) = payload["results"]
    assert job["report"]["notes"] == []


def test_an_unknown_catch_up_says_why_in_the_table_and_in_json(one_batch, kafka, capsys):
    """One batch: no consumption rate, so no catch-up time; the table and JSON say so."""
    text = status(kafka, one_batch["ck"], capsys)
    assert f"catch-up    unknown: {ONE_BATCH}" in text, text
    payload = json.loads(status(kafka, one_batch["ck"], capsys, "--json"))
    (job,) = payload["results"]
    report = job["report"]
    assert report["catch_up_seconds"] is None
    assert report["unknown"]["catch_up_seconds"] == ONE_BATCH
    for measure, why in report["unknown"].items():  # each one said in the table, same words
        assert report[measure] is None or measure == "max_lag_seconds"
        assert why in text
