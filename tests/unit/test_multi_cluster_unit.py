"""Several Kafka clusters in one query: the session's source -> cluster mapping, compute_lag per
source cluster, judge_states' snapshot per cluster, the warning without a mapping, the CLI flag.
In-memory clusters (tests/fakes.py) stand in for Kafka; tests/integration/test_multi_cluster.py
runs real ones."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_sparklag import params
from airflow_sparklag.checkpoint_files import BatchOffsets, CheckpointState, SourceOffset
from airflow_sparklag.errors import InvalidParameter, KafkaError
from airflow_sparklag.health import evaluate
from airflow_sparklag.kafka import KafkaSnapshot
from airflow_sparklag.lag import UNREAD_TOPICS, compute_lag
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.monitor import CheckOptions, judge_states
from airflow_sparklag.positions import SourceCluster
from airflow_sparklag.render import render
from airflow_sparklag.session import Session
from tests.fakes import Call, FakeKafka

NOW = 1_700_000_000.0
A, B = "a:9092", "b:9092"


def cluster(servers: str, topics: dict[str, dict[int, int]]) -> FakeKafka:
    """A cluster of the in-memory Kafka: topic -> partition -> log end (log start 0); records
    written 60 s ago."""
    return FakeKafka(
        topics, lambda *_: NOW - 60, now=NOW, cluster_id="id", bootstrap_servers=servers
    )


def snapshot_of(have: dict[str, dict[int, int]], topics: list[str]) -> KafkaSnapshot:
    return cluster("-", have).snapshot(topics)


def source(source_id: str, offsets: dict[str, dict[int, int]]) -> SourceOffset:
    return SourceOffset(source_id, "kafka", offsets, json.dumps(offsets))


def union_state(*sources: SourceOffset) -> CheckpointState:
    batch = BatchOffsets(3, 1, int((NOW - 5) * 1000), 0, {}, sources, NOW - 5)
    return CheckpointState("/ck", "q", 3, batch, NOW - 5, None, (batch,), (3,), (3,), False)


ORDERS = source("0", {"orders": {0: 10, 1: 20}})
PAYMENTS = source("1", {"payments": {0: 5}})
CLUSTER_A = {"orders": {0: 14, 1: 20}}
CLUSTER_B = {"payments": {0: 14}, "orders": {0: 90, 1: 95}}  # B mirrors orders, other offsets


def lags(report: Any) -> dict[tuple[str, str, int], int]:
    return {
        (s.source_id, t.topic, p.partition): p.lag
        for s in report.sources
        for t in s.topics
        for p in t.partitions
    }


# -- compute_lag -----------------------------------------------------------------------------


def test_each_source_is_measured_against_its_own_snapshot() -> None:
    state = union_state(ORDERS, PAYMENTS)
    on_b = SourceCluster(snapshot_of(CLUSTER_B, ["payments"]), B)
    report = compute_lag(
        state, snapshot_of(CLUSTER_A, ["orders"]), now=NOW, source_clusters={"1": on_b}
    )
    assert lags(report) == {("0", "orders", 0): 4, ("0", "orders", 1): 0, ("1", "payments", 0): 9}
    assert [s.lag for s in report.sources] == [4, 9] and report.total_lag == 13
    assert [s.cluster for s in report.sources] == [None, B]
    assert not report.single_cluster_assumed and report.notes == ()  # one topic per source
    assert UNREAD_TOPICS not in report.notes
    assert report.missing_topics == ()


def test_a_topic_of_one_name_on_two_clusters_is_measured_per_source() -> None:
    # source 1 reads B's orders (the mirror): its reference is B's log end, not A's
    state = union_state(ORDERS, source("1", {"orders": {0: 80, 1: 95}}))
    on_b = SourceCluster(snapshot_of(CLUSTER_B, ["orders"]), B)
    report = compute_lag(
        state, snapshot_of(CLUSTER_A, ["orders"]), now=NOW, source_clusters={"1": on_b}
    )
    assert lags(report) == {
        ("0", "orders", 0): 4,
        ("0", "orders", 1): 0,
        ("1", "orders", 0): 10,
        ("1", "orders", 1): 0,
    }


def test_a_topic_its_cluster_lacks_is_unknown_never_zero() -> None:
    state = union_state(ORDERS, PAYMENTS)
    on_a = SourceCluster(snapshot_of(CLUSTER_A, ["payments"]), A)
    report = compute_lag(
        state, snapshot_of(CLUSTER_A, ["orders"]), now=NOW, source_clusters={"1": on_a}
    )
    payments = report.sources[1]
    assert payments.lag is None and payments.topics[0].partitions == ()
    assert payments.lag_unknown == f"topic payments not found in cluster {A}"
    assert dict(payments.topics[0].checkpoint_offsets) == {0: 5}
    assert report.missing_topics == ("payments",) and report.total_lag == 4
    data = json.loads(json.dumps(report.to_dict()))["sources"][1]
    assert data["lag"] is None and data["topics"][0]["lag"] is None
    verdict = evaluate(report)
    assert (verdict.health, verdict.rule) == (Health.UNKNOWN, "topic_missing")
    assert verdict.reason == f"lag unknown: source 1: topic payments not found in cluster {A}"
    rows = [line for line in render(report, verdict).splitlines() if "payments" in line]
    assert any("topic_missing" in row and " ? " in row for row in rows)


def test_several_sources_without_a_mapping_warn_in_report_and_verdict() -> None:
    state = union_state(ORDERS, PAYMENTS)
    report = compute_lag(state, snapshot_of(CLUSTER_B, ["orders", "payments"]), now=NOW)
    assert report.single_cluster_assumed
    (note,) = report.notes
    assert note.startswith("all 2 Kafka sources (0, 1) were measured against one cluster")
    verdict = evaluate(report)
    assert verdict.health is Health.OK
    assert verdict.reason.endswith(f"; warning: {note}")
    # One Kafka source: nothing to warn about.
    single = compute_lag(union_state(ORDERS), snapshot_of(CLUSTER_A, ["orders"]), now=NOW)
    assert not single.single_cluster_assumed and "warning" not in evaluate(single).reason


# -- the session's mapping -----------------------------------------------------------------


def test_sources_are_numbered_per_distinct_cluster() -> None:
    session = Session(
        kafka_config={"bootstrap.servers": A},
        source_kafka={
            "1": {"bootstrap.servers": B},
            "named": {"bootstrap.servers": B},
            "2": {"bootstrap.servers": A},  # the main cluster's config: the main cluster
        },
    )
    assert [session.cluster_of(s) for s in ("0", "1", "named", "2")] == [0, 1, 1, 0]
    assert session.cluster_servers(0) == A and session.cluster_servers(1) == B
    assert set(session.source_kafka) == {"1", "named", "2"}
    client = session.kafka_for("1")
    assert client is session.kafka_for("named") is session.cluster_kafka(1)
    assert client.bootstrap_servers == B and session.kafka_for("0") is session.kafka
    session.close()


def test_clients_handed_in_are_shared_and_never_closed() -> None:
    main, other = cluster(A, {}), cluster(B, {})
    session = Session(
        kafka_client=main,
        source_kafka_clients={"1": other, "2": other, "3": main},
    )
    assert [session.cluster_of(s) for s in ("1", "2", "3")] == [1, 1, 0]
    assert session.kafka_for("2") is other and session.cluster_servers(1) == B
    session.close()
    assert not other.closed and not main.closed


@pytest.mark.parametrize(
    "mapping", [{"1": {}}, {"1": {"security.protocol": "SSL"}}, {"": {"bootstrap.servers": B}}]
)
def test_a_mapped_source_needs_its_servers(mapping: dict) -> None:
    with pytest.raises(KafkaError):
        Session(kafka_config={"bootstrap.servers": A}, source_kafka=mapping)


# -- judge_states: one snapshot per cluster ------------------------------------------------


def clusters() -> tuple[FakeKafka, FakeKafka, Session]:
    a, b = cluster(A, CLUSTER_A), cluster(B, CLUSTER_B)
    session = Session(kafka_client=a, source_kafka_clients={"1": b})
    return a, b, session


def test_judge_takes_one_snapshot_per_cluster_of_its_sources_topics() -> None:
    a, b, session = clusters()
    states = {"/ck": union_state(ORDERS, PAYMENTS), "/other": union_state(ORDERS)}
    results = judge_states(session, states, CheckOptions())
    assert a.calls == [Call("snapshot", ("orders",))]
    assert b.calls == [Call("snapshot", ("payments",))]
    report = results["/ck"].report
    assert report is not None and [s.lag for s in report.sources] == [4, 9]
    assert results["/ck"].verdict.health is Health.OK
    assert "warning" not in results["/ck"].verdict.reason


def test_exact_time_lag_reads_each_record_on_its_own_cluster() -> None:
    a, b, session = clusters()
    result = judge_states(
        session,
        {"/ck": union_state(ORDERS, PAYMENTS)},
        CheckOptions(exact_time_lag=True),
    )["/ck"]
    assert Call("record_timestamps", ("orders",)) in a.calls
    assert Call("record_timestamps", ("payments",)) in b.calls
    report = result.report
    assert report is not None and report.time_lag_mode == "exact"
    assert {p.topic: p.lag_seconds for p in report.partitions() if p.lag} == {
        "orders": 60.0,
        "payments": 60.0,
    }


def test_only_mapped_clusters_are_asked() -> None:
    a, b, session = clusters()
    results = judge_states(
        session,
        {"/ck": union_state(PAYMENTS)},
        CheckOptions(),
    )
    assert a.calls == [] and b.calls == [Call("snapshot", ("payments",))]
    assert results["/ck"].report is not None and results["/ck"].report.total_lag == 9


# -- reading the mapping ---------------------------------------------------------------------


def test_source_map_reads_rendered_mappings() -> None:
    assert params.source_map("m", None) == {}
    assert params.source_map("m", {1: "kafka_b", "named": " kafka_c "}) == {
        "1": "kafka_b",
        "named": "kafka_c",
    }
    assert params.source_map("m", "{'1': 'kafka_b'}") == {"1": "kafka_b"}
    for bad in ("kafka_b", {"1": ""}, {"1": 3}, {" ": "kafka_b"}):
        with pytest.raises(InvalidParameter, match=r"^m"):
            params.source_map("m", bad)


def test_source_assignment() -> None:
    assert params.source_assignment("f", "1=b:9092,c:9092") == ("1", "b:9092,c:9092")
    assert params.source_assignment("f", "orders_src = b:9092") == ("orders_src", "b:9092")
    for bad in ("b:9092", "=b:9092", "1="):
        with pytest.raises(InvalidParameter):
            params.source_assignment("f", bad)


def test_cli_source_servers_keep_the_rest_of_the_kafka_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from airflow_sparklag import cli

    config = tmp_path / "kafka.json"
    config.write_text(json.dumps({"security.protocol": "PLAINTEXT", "client.id": "x"}))
    args = cli.build_parser().parse_args(
        ["status", "/ck", "-b", A, "--kafka-config", str(config), "--source-servers", f"1={B}"]
    )
    with cli.open_session(args) as session:
        assert dict(session.source_kafka["1"]) == {
            "security.protocol": "PLAINTEXT",
            "client.id": "x",
            "bootstrap.servers": B,
        }
        assert session.cluster_of("1") == 1 and session.cluster_of("0") == 0
    twice = cli.build_parser().parse_args(
        ["status", "/ck", "-b", A, "--source-servers", f"1={B}", "--source-servers", "1=c:1"]
    )
    with pytest.raises(InvalidParameter, match="--source-servers: source 1 is given twice"):
        cli.open_session(twice)
    for command in (["snapshot", "/ck", "--snapshot-root", "/s"],
                    ["migrate", "/ck", "--archive-root", "/a"], ["history", "/ck"]):  # fmt: skip
        args = cli.build_parser().parse_args([*command, "-b", A, "--source-servers", f"1={B}"])
        with cli.open_session(args) as session:
            assert session.cluster_of("1") == 1
