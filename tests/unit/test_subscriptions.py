"""Subscriptions in `compute_lag`: topics found by the query's subscribePattern that it has not
read yet, and what the report says when it cannot know (real queries:
tests/integration/test_subscribe_pattern.py)."""

from __future__ import annotations

import json

import pytest

from airflow_sparklag import params
from airflow_sparklag.checkpoint_files import BatchOffsets, CheckpointState, SourceOffset
from airflow_sparklag.errors import InvalidParameter
from airflow_sparklag.kafka import KafkaSnapshot, PartitionOffsets, subscribe_regex
from airflow_sparklag.lag import UNREAD_TOPICS, compute_lag
from airflow_sparklag.model.report import LagReport
from airflow_sparklag.monitor import CheckOptions

NOW = 1_700_000_100.0
Offsets = dict[str, dict[int, int]]


def source(offsets: Offsets, source_id: str = "0") -> SourceOffset:
    return SourceOffset(source_id, "kafka", offsets, json.dumps(offsets))


def state(*sources: SourceOffset, in_flight: tuple[SourceOffset, ...] = ()) -> CheckpointState:
    committed = BatchOffsets(4, 1, int((NOW - 10) * 1000), 0, {}, sources, None)
    flight = BatchOffsets(5, 1, int(NOW * 1000), 0, {}, in_flight, None) if in_flight else None
    return CheckpointState(
        location="/ck",
        query_id=None,
        committed_batch_id=4,
        committed=committed,
        commit_modified=None,
        in_flight=flight,
        history=(committed,),
        offsets_ids=(4, 5) if flight else (4,),
        commit_ids=(4,),
        continuous=False,
    )


def cluster(ends: dict[str, dict[int, tuple[int, int]]], pattern: str | None) -> KafkaSnapshot:
    """The cluster's topics (log start, log end), listed by ``pattern`` as the client does."""
    regex = subscribe_regex(pattern) if pattern else None
    return KafkaSnapshot(
        {t: {p: PartitionOffsets(s, e, e) for p, (s, e) in ps.items()} for t, ps in ends.items()},
        frozenset(),
        NOW,
        None,
        pattern,
        frozenset(t for t in ends if regex and regex.search(t)),
    )


ENDS = {
    "orders.a": {0: (0, 40), 1: (0, 30)},
    "orders.c": {0: (5, 70), 1: (0, 20)},  # created after the query's last batch
    "payments": {0: (0, 9)},
}
READ = {"orders.a": {0: 40, 1: 25}}


def lags(report: LagReport) -> dict[str, int | None]:
    return {t.topic: t.lag for s in report.sources for t in s.topics}


def test_a_new_topic_the_pattern_is_found_in_waits_from_its_log_start() -> None:
    report = compute_lag(
        state(source(READ)), cluster(ENDS, r"orders\..*"), subscribe_pattern=r"orders\..*"
    )
    assert lags(report) == {"orders.a": 5, "orders.c": 65 + 20}
    assert report.total_lag == 90
    new = next(t for t in report.sources[0].topics if t.topic == "orders.c")
    assert new.new_topic and all(p.new_partition and not p.data_loss for p in new.partitions)
    assert report.sources[0].pattern == r"orders\..*"
    (note,) = report.notes
    assert note.startswith(r"subscribePattern 'orders\..*': 1 topic(s)") and "orders.c" in note
    assert json.loads(json.dumps(report.to_dict()))["sources"][0]["topics"][1]["new_topic"]


def test_without_a_pattern_one_note_where_a_pattern_may_read_the_topics() -> None:
    """Topics that share a first or last word (orders.a, orders.b) are what a pattern reads:
    a note says topics not read yet are not counted. One topic, or topics named apart
    (orders.a, payments): a list reads them, and nothing is said."""
    two = {**READ, "orders.b": {0: 3}}
    report = compute_lag(state(source(two)), cluster({**ENDS, "orders.b": {0: (0, 3)}}, None))
    assert lags(report) == {"orders.a": 5, "orders.b": 0} and report.notes == (UNREAD_TOPICS,)
    assert "--subscribe-pattern" in UNREAD_TOPICS and "#subscriptions" in UNREAD_TOPICS
    suffix = {"eu-clicks": {0: 1}, "us-clicks": {0: 1}}
    ends = {t: {0: (0, 1)} for t in suffix}
    assert compute_lag(state(source(suffix)), cluster(ends, None)).notes == (UNREAD_TOPICS,)
    assert compute_lag(state(source(READ)), cluster(ENDS, None)).notes == ()
    apart = source({**READ, "payments": {0: 9}})
    assert compute_lag(state(apart), cluster(ENDS, None)).notes == ()


def test_a_pattern_not_found_in_every_topic_a_source_read_is_not_applied() -> None:
    both = source({**READ, "payments": {0: 9}})
    report = compute_lag(state(both), cluster(ENDS, r"orders\."), subscribe_pattern=r"orders\.")
    assert set(lags(report)) == {"orders.a", "payments"} and report.sources[0].pattern is None
    (note,) = report.notes
    assert "is not found in every topic of any source (orders.a, payments)" in note


def test_only_the_source_of_the_pattern_counts_its_new_topics() -> None:
    two = state(source(READ), source({"payments": {0: 9}}, "1"))
    report = compute_lag(two, cluster(ENDS, r"orders"), subscribe_pattern="orders")
    by_source = {s.source_id: {t.topic for t in s.topics} for s in report.sources}
    assert by_source == {"0": {"orders.a", "orders.c"}, "1": {"payments"}}
    assert [s.pattern for s in report.sources] == ["orders", None]


def test_a_snapshot_not_listed_by_the_pattern_counts_nothing_new() -> None:
    report = compute_lag(state(source(READ)), cluster(ENDS, None), subscribe_pattern="orders")
    assert set(lags(report)) == {"orders.a"}
    assert "not applied" in report.notes[0]


def test_a_topic_only_in_the_in_flight_batch_waits_from_its_log_start() -> None:
    """Spark found orders.c and planned batch 5 with it: re-run, that batch reads it from
    EARLIEST (a partition new to the committed offsets), whatever the pattern."""
    st = state(source(READ), in_flight=(source({**READ, "orders.c": {0: 70, 1: 20}}),))
    report = compute_lag(st, cluster(ENDS, None))
    assert lags(report) == {"orders.a": 5, "orders.c": 85}
    new = next(t for t in report.sources[0].topics if t.topic == "orders.c")
    assert new.new_topic and {p.planned_offset for p in new.partitions} == {70, 20}


def test_the_option_is_read_from_rendered_text_and_checked() -> None:
    assert params.options(CheckOptions, {"subscribe_pattern": "None"}).subscribe_pattern is None
    given = params.options(CheckOptions, {"subscribe_pattern": r" orders\..* "})
    assert given.subscribe_pattern == r"orders\..*"
    assert CheckOptions.from_dict(given.to_dict()) == given
    with pytest.raises(InvalidParameter, match=r"^subscribe_pattern: cannot read '\(\?<n>x\)'"):
        CheckOptions(subscribe_pattern="(?<n>x)")  # Java's named group: not Python's


def test_assign_and_a_pattern_exclude_each_other() -> None:
    with pytest.raises(InvalidParameter, match=r"^assign: a query reads by assign or by"):
        CheckOptions(subscribe_pattern="orders", assign=True)


def test_an_assign_query_counts_only_the_partitions_it_has() -> None:
    one = state(source({"orders.a": {0: 38}}))  # assigned orders.a partition 0 only
    report = compute_lag(one, cluster(ENDS, None), assign=True)
    assert [(p.partition, p.lag) for p in report.partitions()] == [(0, 2)]
    assert report.notes == ()  # neither the topics nor the partitions note
    unsaid = compute_lag(one, cluster(ENDS, None))
    assert [(p.partition, p.lag, p.new_partition) for p in unsaid.partitions()] == [
        (0, 2, False),
        (1, 30, True),
    ]
    (note,) = unsaid.notes  # partition 1 is after the highest listed: ambiguous
    assert note.startswith("partitions not in the checkpoint counted from their log")


def test_the_spark_scan_takes_the_subscription_flags() -> None:
    from airflow_sparklag.spark_scan import _check_options, build_parser

    args = build_parser().parse_args(["--output", "o", "--subscribe-pattern", r"^orders\."])
    assert _check_options(args).subscribe_pattern == r"^orders\."
    assert _check_options(build_parser().parse_args(["--output", "o", "--assign"])).assign


# -- fixed partitions shown by a gap --------------------------------------------------------------

GAPPED = {"acc": {0: (0, 100), 1: (0, 220), 2: (0, 100), 3: (0, 7)}}


def test_a_gap_in_the_listed_partitions_shows_fixed_partitions() -> None:
    """A checkpoint that lists acc:0 and acc:2 but not acc:1: Kafka numbers partitions from 0
    and adds them only at the end, so only an assign query lists 2 without 1. That source is
    measured as with ``assign`` (acc:3, after the highest, too), and a note says why."""
    gapped = state(source({"acc": {0: 60, 2: 40}}))
    report = compute_lag(gapped, cluster(GAPPED, None))
    assert [(p.partition, p.lag) for p in report.partitions()] == [(0, 40), (2, 60)]
    assert report.total_lag == 100 and not report.assign
    (topic,) = report.sources[0].topics
    assert topic.not_read == (1, 3)
    (note,) = report.notes
    assert note.startswith("partitions not read by the query, not counted: acc:1, acc:3;")
    assert "assign" in note and "--assign" not in note
    data = json.loads(json.dumps(report.to_dict()))
    assert data["sources"][0]["topics"][0]["not_read"] == [1, 3] and data["notes"] == [note]
    given = compute_lag(gapped, cluster(GAPPED, None), assign=True)
    assert given.total_lag == 100 and given.notes == ()  # given: nothing to explain
    assert given.sources[0].topics[0].not_read == (1, 3)


def test_a_gap_in_one_topic_settles_its_whole_source_only() -> None:
    """Spark's source reads by one option: a gap in one topic is an assign source, so its
    other topics' unlisted partitions are not read either; another source is untouched."""
    ends = {**GAPPED, "b": {0: (0, 5), 1: (0, 8)}, "c": {0: (0, 4), 1: (0, 9)}}
    two = state(source({"acc": {1: 0}, "b": {0: 5}}), source({"c": {0: 4}}, "1"))
    report = compute_lag(two, cluster(ends, None))
    by_topic = {t.topic: ([p.partition for p in t.partitions], t.not_read)
                for s in report.sources for t in s.topics}  # fmt: skip
    assert by_topic == {"acc": ([1], (0, 2, 3)), "b": ([0], (1,)), "c": ([0, 1], ())}
    assert [n.split(";")[0] for n in report.notes if n.startswith("partitions")] == [
        "partitions not read by the query, not counted: acc:0, acc:2, acc:3, b:1",
        "partitions not in the checkpoint counted from their log start (c:1), as a subscribing "
        "query reads them",
    ]


def test_partitions_added_after_the_highest_listed_stay_counted() -> None:
    """A subscribe query's checkpoint written before partitions were added lists 0..n-1:
    no gap, the new partitions are read from their log start (and the note says so)."""
    report = compute_lag(state(source({"acc": {0: 100, 1: 220}})), cluster(GAPPED, None))
    assert [(p.partition, p.lag, p.new_partition) for p in report.partitions()] == [
        (0, 0, False), (1, 0, False), (2, 100, True), (3, 7, True),
    ]  # fmt: skip
    assert report.sources[0].topics[0].not_read == ()
