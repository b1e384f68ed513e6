"""Subscriptions on REAL queries: a query subscribed by pattern, checked with and without its
pattern, against the records a plain consumer counts and the records Spark reads on restart.

The query reads ``orders-<uid>\\..*`` (topics ``.a``, ``.b`` and ``old-orders-<uid>.z``: Spark
keeps the topics the pattern is FOUND in, so the decoy is read too), stops, then 300 records
go to ``.a`` and a new topic ``.c`` gets 500 (and ``orders-<uid>-x``, which the pattern is not
found in, gets 50). With the pattern the check counts 800, ``.c`` from its start; without it,
300 and a note saying what it cannot know. Restarted with AvailableNow, Spark reads exactly 800.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag import cli
from airflow_sparklag.kafka import KafkaOffsetsClient
from airflow_sparklag.lag import UNREAD_TOPICS
from airflow_sparklag.model.report import LagReport
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.monitor import CheckResult, check_checkpoint
from testbed import jobs
from tests.first_check import status_at_defaults

pytestmark = pytest.mark.testbed

LIMIT = {"max_lag_records_total": 500}  # between what each check sees: 300 and 800


def topic_lags(report: LagReport) -> dict[str, int | None]:
    return {t.topic: t.lag for s in report.sources for t in s.topics}


def committed(report: LagReport) -> dict[str, dict[int, int]]:
    """topic -> partition -> committed offset, of the partitions the checkpoint has."""
    out: dict[str, dict[int, int]] = {}
    for p in report.partitions():
        if p.committed_offset is not None:
            out.setdefault(p.topic, {})[p.partition] = p.committed_offset
    return out


@pytest.fixture(scope="module")
def stopped(spark, kafka, tmp_path_factory):  # type: ignore[no-untyped-def]
    tag = uuid.uuid4().hex[:8]
    pattern = f"orders-{tag}\\..*"
    a = kafka.create_topic(f"orders-{tag}.a", partitions=2)
    b = kafka.create_topic(f"orders-{tag}.b", partitions=1)
    z = kafka.create_topic(f"old-orders-{tag}.z", partitions=1)
    for name, n in ((a, 40), (b, 20), (z, 10)):
        kafka.produce(name, n)
    ck = tmp_path_factory.mktemp("pattern") / "ck"
    jobs.run_available_now(jobs.kafka_stream(spark, kafka.bootstrap, pattern=pattern), str(ck))
    kafka.produce(a, 300, start=1000)
    c = kafka.create_topic(f"orders-{tag}.c", partitions=2)
    kafka.produce(c, 500)
    x = kafka.create_topic(f"orders-{tag}-x", partitions=1)
    kafka.produce(x, 50)
    return {"pattern": pattern, "topics": (a, b, z, c, x), "ck": str(ck)}


def check(kafka: Any, location: str, **kwargs: Any) -> CheckResult:
    config = {"bootstrap.servers": kafka.bootstrap}
    return check_checkpoint(location, kafka_config=config, thresholds=LIMIT, **kwargs)


def test_with_the_pattern_new_topics_wait_from_their_start(stopped, kafka):
    a, b, z, c, x = stopped["topics"]
    result = check(kafka, stopped["ck"], subscribe_pattern=stopped["pattern"])
    report = result.report
    assert topic_lags(report) == {a: 300, b: 0, z: 0, c: 500}
    assert x not in topic_lags(report)  # the pattern is not found in x
    assert report.total_lag == 800
    (source,) = report.sources
    assert source.pattern == stopped["pattern"] == report.subscribe_pattern
    (new,) = [t for t in source.topics if t.new_topic]
    assert new.topic == c and len(new.partitions) == 2
    for p in new.partitions:
        assert p.new_partition and p.committed_offset is None and p.log_start_offset == 0
        assert p.lag == p.log_end_offset
    # Truth: a plain consumer from the committed offsets, and from the start of c.
    positions = {**committed(report), c: {0: 0, 1: 0}}
    assert set(positions) == {a, b, z, c}  # the checkpoint has the decoy z: Spark FINDS
    assert sum(jobs.count_from(kafka.bootstrap, positions).values()) == 800
    assert result.verdict.health is Health.LAGGING, result.verdict
    assert "800" in result.verdict.reason
    (note,) = [n for n in report.notes if "subscribePattern" in n]
    assert c in note and UNREAD_TOPICS not in report.notes


def test_the_checkpoint_does_not_record_the_subscription(stopped):
    """Why the pattern must be given: no file Spark wrote names it or the option (offsets/N
    and its conf line, sources/0/0, metadata, commits/N)."""
    ck = Path(stopped["ck"])
    files = [f for f in ck.rglob("*") if f.is_file() and "state" not in f.parts]
    assert {f.relative_to(ck).parts[0] for f in files} >= {"offsets", "commits", "sources"}
    for f in files:
        text = f.read_bytes().decode("utf-8", "replace")
        assert stopped["pattern"] not in text and "subscribe" not in text.lower(), f


def test_without_the_pattern_the_report_says_what_it_cannot_know(stopped, kafka):
    a, b, z, _c, _x = stopped["topics"]
    result = check(kafka, stopped["ck"])
    assert topic_lags(result.report) == {a: 300, b: 0, z: 0}
    assert result.report.total_lag == 300 and result.verdict.health is Health.OK
    assert result.report.notes.count(UNREAD_TOPICS) == 1
    assert result.report.subscribe_pattern is None


def test_the_cli_shows_the_note_and_takes_the_pattern(stopped, kafka, capsys):
    base = [
        "status",
        stopped["ck"],
        "--bootstrap-servers",
        kafka.bootstrap,
        "--max-lag-records-total",
    ]
    assert cli.main([*base, "500"]) == 0
    assert f"note        {UNREAD_TOPICS}" in capsys.readouterr().out
    assert cli.main([*base, "500", "--subscribe-pattern", stopped["pattern"], "--json"]) == 1
    (job,) = json.loads(capsys.readouterr().out)["results"]
    assert job["report"]["total_lag"] == 800
    assert job["report"]["subscribe_pattern"] == stopped["pattern"]


def test_first_check_of_a_pattern_query(stopped, kafka):
    """At defaults: the topics in the checkpoint exact, and one message naming the flag that
    counts the topics it cannot know of (--subscribe-pattern)."""
    a, b, z, _c, _x = stopped["topics"]
    first = status_at_defaults(stopped["ck"], kafka.bootstrap)
    lags = first.lags()
    assert {t: sum(n for (topic, _), n in lags.items() if topic == t) for t in (a, b, z)} == {
        a: 300,
        b: 0,
        z: 0,
    }, lags
    assert first.asks_for() == {"--subscribe-pattern"}, first.messages()


def test_internal_topics_are_never_matched(kafka):
    """Spark's Admin listing leaves Kafka's internal topics out; so does the check."""
    from confluent_kafka import Consumer, TopicPartition

    topic = kafka.create_topic(f"internal-{uuid.uuid4().hex[:8]}")
    group = {"bootstrap.servers": kafka.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"}
    consumer = Consumer(group)
    try:  # a committed group offset makes the broker create __consumer_offsets
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    assert "__consumer_offsets" in kafka.admin().list_topics(timeout=10).topics
    client = KafkaOffsetsClient({"bootstrap.servers": kafka.bootstrap}, timeout=10)
    try:
        snap = client.snapshot([topic], pattern="consumer_offsets|" + topic)
    finally:
        client.close()
    assert snap.pattern_topics == {topic} and "__consumer_offsets" not in snap.partitions


def test_spark_restarted_reads_exactly_what_the_pattern_check_counted(stopped, spark, kafka):
    """Last in this file: it moves the checkpoint on."""
    a, b, z, c, _x = stopped["topics"]
    df = jobs.kafka_stream(spark, kafka.bootstrap, pattern=stopped["pattern"])
    assert jobs.run_available_now_rows(df, stopped["ck"]) == 800
    after = check(kafka, stopped["ck"], subscribe_pattern=stopped["pattern"])
    assert after.report.total_lag == 0 and set(topic_lags(after.report)) == {a, b, z, c}
    assert not any(t.new_topic for s in after.report.sources for t in s.topics)
    assert set(committed(after.report)[c]) == {0, 1}
    assert Path(stopped["ck"], "commits").is_dir()


# -- assign: fixed partitions ---------------------------------------------------------------------


def assign_query(spark: Any, kafka: Any, ck: str, partitions: list[int]) -> tuple[str, Any]:
    """A 3-partition topic of 10 records each, read once into ``ck`` by a query assigned
    ``partitions`` of it (from the earliest): the topic and the query's maker."""
    topic = kafka.create_topic(f"assigned-{uuid.uuid4().hex[:8]}", partitions=3)
    for p in range(3):
        kafka.produce(topic, 10, partition=p, start=p * 100)

    def assigned() -> Any:
        reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
        assign = json.dumps({topic: partitions})
        return reader.option("assign", assign).option("startingOffsets", "earliest").load()

    jobs.run_available_now(assigned(), ck)
    return topic, assigned


def test_an_assign_query_is_measured_on_its_partitions_only(spark, kafka, tmp_path):
    """A query assigned partitions 0 and 1 of a 3-partition topic never reads partition 2: with
    ``assign`` the check counts what Spark reads on restart; without, partition 2 is counted
    from its start, and a note says how to tell."""
    ck = str(tmp_path / "ck")
    topic, assigned = assign_query(spark, kafka, ck, [0, 1])
    for p in range(3):
        kafka.produce(topic, 4 + p, partition=p, start=1000)
    result = check(kafka, ck, assign=True)
    lags = {p.partition: p.lag for p in result.report.partitions()}
    assert lags == {0: 4, 1: 5} and result.report.total_lag == 9
    assert not any("partitions not in the checkpoint" in n for n in result.report.notes)
    unsaid = check(kafka, ck)
    assert unsaid.report.total_lag == 9 + 10 + 6  # partition 2, from its start
    (note,) = [n for n in unsaid.report.notes if "partitions not in the checkpoint" in n]
    assert f"({topic}:2)" in note and "--assign" in note
    first = status_at_defaults(ck, kafka.bootstrap)  # the same, from the command line
    assert sum(first.lags().values()) == 9 + 10 + 6
    assert first.asks_for() == {"--assign"}, first.messages()
    assert jobs.run_available_now_rows(assigned(), ck) == 9
    assert check(kafka, ck, assign=True).report.total_lag == 0


def test_a_gap_in_the_partitions_shows_an_assign_query_at_defaults(spark, kafka, tmp_path, capsys):
    """A query assigned partitions 0 and 2 of a 3-partition topic: its checkpoint lists 0 and
    2, and Kafka only adds partitions at the end, so partition 1 is not read. At defaults the
    check counts what Spark reads on restart (100), not partition 1's whole log (220), and
    says why, in the table's notes and in JSON."""
    ck = str(tmp_path / "ck")
    topic, assigned = assign_query(spark, kafka, ck, [0, 2])
    kafka.produce(topic, 60, partition=0, start=100)
    kafka.produce(topic, 210, partition=1, start=1100)
    kafka.produce(topic, 40, partition=2, start=2100)
    result = check(kafka, ck)
    assert committed(result.report) == {topic: {0: 10, 2: 10}}  # Spark lists 0 and 2 only
    assert {p.partition: p.lag for p in result.report.partitions()} == {0: 60, 2: 40}
    assert result.report.total_lag == 100 and not result.report.assign
    (note,) = [n for n in result.report.notes if "not read" in n]
    assert note.startswith(f"partitions not read by the query, not counted: {topic}:1;")
    assert not any("--assign" in n for n in result.report.notes)
    base = ["status", ck, "--bootstrap-servers", kafka.bootstrap, "--max-lag-records-total", "500"]
    cli.main(base)
    assert f"note        {note}" in capsys.readouterr().out
    cli.main([*base, "--json"])
    (job,) = json.loads(capsys.readouterr().out)["results"]
    assert job["report"]["total_lag"] == 100 and note in job["report"]["notes"]
    assert job["report"]["sources"][0]["topics"][0]["not_read"] == [1]
    assert jobs.run_available_now_rows(assigned(), ck) == 100
    assert check(kafka, ck).report.total_lag == 0
