"""A REAL Spark query over TWO Kafka clusters: each source measured against its own cluster.

The query unions `orders` on cluster A (the session's broker) with `payments` on cluster B (a
second broker started here). Cluster B also holds a topic named `orders` (a mirror) with other
offsets, so measuring the `orders` source against B gives numbers that look right and are not.
After the query stopped, more records are produced on each cluster. The same query is then
snapshotted, migrated (and restarted on the new checkpoint), rebuilt by `history`, served by
the exporter and scanned on Spark, each source mapped to its cluster.

The truth is independent of the package:

- committed offsets: parsed by hand from the newest ``commits/N`` and its ``offsets/N``;
- records waiting: counted by a plain confluent_kafka consumer on each cluster from the
  committed offsets to the end (``jobs.count_from``), equal to what was produced after the
  run and to the broker's own end offsets minus the committed ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.conditions import CatchUpCondition
from airflow_sparklag.errors import KafkaError
from airflow_sparklag.kafka import KafkaOffsetsClient
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.monitor import CheckResult, check_checkpoint
from airflow_sparklag.session import Session
from testbed import jobs
from testbed.kafka_broker import KafkaBroker
from tests.first_check import status_at_defaults

pytestmark = pytest.mark.testbed

SPARKLAG = Path(sys.executable).parent / "sparklag"
ORDERS_AFTER = {0: 4, 1: 0, 2: 7}  # produced on A's orders after the run
PAYMENTS_AFTER = {0: 9, 1: 3}  # produced on B's payments after the run
WARNING = "were measured against one cluster"
# A commit-age threshold the user set outranks the threshold-free STOPPED rule, so a slow
# machine between the run and the checks cannot turn the verdicts into STOPPED.
THRESHOLDS = {"max_commit_age_seconds": 3600}

Offsets = dict[str, dict[int, int]]


@pytest.fixture(scope="module")
def cluster_b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-b")).start()
    yield broker
    broker.stop()


def disk_committed(checkpoint: Path) -> dict[str, Offsets]:
    """source index -> Kafka offsets of offsets/C, C the newest commits/N (read by hand)."""
    newest = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    lines = (checkpoint / "offsets" / str(newest)).read_text().split("\n")
    assert lines[0] == "v1"
    return {
        str(index): {t: {int(p): o for p, o in ps.items()} for t, ps in json.loads(raw).items()}
        for index, raw in enumerate(lines[2:])
    }


@pytest.fixture(scope="module")
def union(spark, kafka, cluster_b, tmp_path_factory):  # type: ignore[no-untyped-def]
    suffix = uuid.uuid4().hex[:6]
    orders, payments = f"orders-{suffix}", f"payments-{suffix}"
    kafka.create_topic(orders, partitions=3)
    cluster_b.create_topic(payments, partitions=2)
    cluster_b.create_topic(orders, partitions=3)  # the mirror: same name, other offsets
    for p in range(3):
        kafka.produce(orders, 10 + p, partition=p, start=p * 1000)
        cluster_b.produce(orders, 60, partition=p, start=p * 1000)
    for p in range(2):
        cluster_b.produce(payments, 20 + p, partition=p, start=p * 1000)
    ck = tmp_path_factory.mktemp("union") / "ck"
    a = jobs.select_value(jobs.kafka_stream(spark, kafka.bootstrap, topics=[orders]))
    b = jobs.select_value(jobs.kafka_stream(spark, cluster_b.bootstrap, topics=[payments]))
    jobs.run_available_now(a.union(b), str(ck))
    committed = disk_committed(ck)
    assert committed == {
        "0": {orders: kafka.end_offsets(orders)},
        "1": {payments: cluster_b.end_offsets(payments)},
    }
    for p, n in ORDERS_AFTER.items():
        kafka.produce(orders, n, partition=p, start=p * 1000 + 500)
    for p, n in PAYMENTS_AFTER.items():
        cluster_b.produce(payments, n, partition=p, start=p * 1000 + 500)
    for p in range(3):
        cluster_b.produce(orders, 11, partition=p, start=p * 1000 + 500)
    truth = {
        **{(orders, p): n for p, n in ORDERS_AFTER.items()},
        **{(payments, p): n for p, n in PAYMENTS_AFTER.items()},
    }
    # The same truth, counted by plain consumers on each cluster and from the brokers' ends.
    counted = {
        **jobs.count_from(kafka.bootstrap, committed["0"]),
        **jobs.count_from(cluster_b.bootstrap, committed["1"]),
    }
    assert counted == truth
    ends = {orders: kafka.end_offsets(orders), payments: cluster_b.end_offsets(payments)}
    for (topic, p), n in truth.items():
        source = "0" if topic == orders else "1"
        assert ends[topic][p] - committed[source][topic][p] == n
    return {
        "ck": str(ck),
        "orders": orders,
        "payments": payments,
        "committed": committed,
        "truth": truth,
        "a": kafka.bootstrap,
        "b": cluster_b.bootstrap,
    }


def lags(result: CheckResult | dict[str, Any]) -> dict[tuple[str, str, int], Any]:
    """(source, topic, partition) -> lag, from a result or its JSON."""
    data = result if isinstance(result, dict) else result.to_dict()
    return {
        (s["source_id"], t["topic"], p["partition"]): p["lag"]
        for s in data["report"]["sources"]
        for t in s["topics"]
        for p in t["partitions"]
    }


def assert_truth(union: dict[str, Any], result: CheckResult | dict[str, Any]) -> None:
    data = result if isinstance(result, dict) else result.to_dict()
    source = {union["orders"]: "0", union["payments"]: "1"}
    expected = {(source[t], t, p): n for (t, p), n in union["truth"].items()}
    assert lags(data) == expected
    report = data["report"]
    assert report["total_lag"] == sum(union["truth"].values())
    assert not report["single_cluster_assumed"]
    assert WARNING not in data["verdict"]["reason"]
    by_id = {s["source_id"]: s for s in report["sources"]}
    assert by_id["0"]["lag"] == sum(ORDERS_AFTER.values()) and by_id["0"]["cluster"] is None
    assert by_id["1"]["lag"] == sum(PAYMENTS_AFTER.values())
    assert by_id["1"]["cluster"] == union["b"]
    for s in report["sources"]:
        for t in s["topics"]:
            committed = union["committed"][s["source_id"]][t["topic"]]
            assert {p["partition"]: p["committed_offset"] for p in t["partitions"]} == committed


def test_each_source_is_measured_against_its_cluster(union):
    mapping = {"1": {"bootstrap.servers": union["b"]}}
    result = check_checkpoint(
        union["ck"],
        kafka_config={"bootstrap.servers": union["a"]},
        source_kafka=mapping,
        thresholds=THRESHOLDS,
    )
    assert_truth(union, result)
    assert result.verdict.health is not Health.UNKNOWN, result.verdict

    # Exact time lag reads each record on its own cluster: every lagging partition is dated.
    exact = check_checkpoint(
        union["ck"],
        kafka_config={"bootstrap.servers": union["a"]},
        source_kafka=mapping,
        exact_time_lag=True,
        thresholds=THRESHOLDS,
    )
    assert exact.report.time_lag_mode == "exact"
    waiting = [p for p in exact.report.partitions() if p.lag > 0]
    assert len(waiting) == 4 and all(p.lag_seconds is not None for p in waiting)

    # Caught up until now? Compared per cluster: exactly the records produced after the run.
    with Session(kafka_config={"bootstrap.servers": union["a"]}, source_kafka=mapping) as session:
        probe = CatchUpCondition(union["ck"], int(time.time() * 1000)).probe(session)
    assert not probe.done
    assert probe.payload["results"][0]["records_behind"] == sum(union["truth"].values())


def test_without_a_mapping_the_report_and_verdict_warn(union):
    on_a = check_checkpoint(
        union["ck"], kafka_config={"bootstrap.servers": union["a"]}, thresholds=THRESHOLDS
    )
    report = on_a.report
    assert report.single_cluster_assumed
    assert any(WARNING in note for note in report.notes)
    assert WARNING in on_a.verdict.reason
    # payments is not on A: its lag is unknown with the reason, never 0.
    data = on_a.to_dict()["report"]["sources"][1]
    assert data["lag"] is None and data["topics"][0]["lag"] is None
    assert data["topics"][0]["partitions"] == []
    assert data["lag_unknown"] == f"topic {union['payments']} not found in the cluster"
    assert on_a.verdict.health is Health.UNKNOWN and union["payments"] in on_a.verdict.reason

    # Against B alone, orders (the mirror) gives wrong numbers: the warning says so.
    on_b = check_checkpoint(
        union["ck"], kafka_config={"bootstrap.servers": union["b"]}, thresholds=THRESHOLDS
    )
    assert on_b.report.single_cluster_assumed and WARNING in on_b.verdict.reason
    wrong = {k: v for k, v in lags(on_b).items() if k[0] == "0"}
    assert all(v != union["truth"][(k[1], k[2])] for k, v in wrong.items())


def test_a_source_mapped_to_a_cluster_without_its_topic_has_unknown_lag(union):
    # payments mapped to A, which has no such topic
    result = check_checkpoint(
        union["ck"],
        kafka_config={"bootstrap.servers": union["a"]},
        source_kafka={"1": {"bootstrap.servers": union["a"]}},
        thresholds=THRESHOLDS,
    )
    report = result.report
    assert not report.single_cluster_assumed
    payments = report.sources[1]
    assert payments.lag is None
    reason = f"topic {union['payments']} not found in cluster {union['a']}"
    assert payments.lag_unknown == reason
    assert dict(payments.topics[0].checkpoint_offsets) == union["committed"]["1"][union["payments"]]
    assert result.verdict.health is Health.UNKNOWN
    assert result.verdict.reason == f"lag unknown: source 1: {reason}"
    assert json.loads(json.dumps(result.to_dict()))["report"]["sources"][1]["lag"] is None
    # The orders source is still measured exactly.
    orders = {k: v for k, v in lags(result).items() if k[0] == "0"}
    assert orders == {("0", union["orders"], p): n for p, n in ORDERS_AFTER.items()}


def test_cli_source_servers(union):
    def status(*flags: str) -> subprocess.CompletedProcess[str]:
        command = [
            str(SPARKLAG),
            "status",
            union["ck"],
            "-b",
            union["a"],
            "--max-commit-age-seconds",
            "1h",
        ]
        command += flags
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    mapped = status("--source-servers", f"1={union['b']}", "--json")
    assert mapped.returncode == 0, mapped.stderr
    assert_truth(union, json.loads(mapped.stdout)["results"][0])

    table = status("--source-servers", f"1={union['b']}")
    assert f"source 1   measured against cluster {union['b']}" in table.stdout
    unmapped = status()
    assert unmapped.returncode == 3, unmapped.stdout
    assert WARNING in unmapped.stdout and "topic_missing" in unmapped.stdout


def test_airflow_hook_with_two_kafka_connections(union, monkeypatch):
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    for conn_id, servers in (("mc_cluster_a", union["a"]), ("mc_cluster_b", union["b"])):
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}",
            json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": servers}}),
        )
    hook = SparkLagHook(kafka_config_id="mc_cluster_a", source_kafka_conn_ids={"1": "mc_cluster_b"})
    try:
        assert_truth(union, hook.check(union["ck"], thresholds=THRESHOLDS))
        ok, message = hook.test_connection()
        assert ok and f"source 1: Kafka {union['b']} answered" in message
    finally:
        hook.close()
    # The triggerer's hook gets the mapping through the trigger's serialized kwargs.
    from airflow_sparklag.triggers.sparklag import SparkLagTrigger

    _, kwargs = SparkLagTrigger(
        union["ck"], kafka_config_id="mc_cluster_a", source_kafka_conn_ids={"1": "mc_cluster_b"}
    ).serialize()
    trigger_hook = SparkLagTrigger(**json.loads(json.dumps(kwargs)))._hook()
    try:
        assert_truth(union, trigger_hook.check(union["ck"], thresholds=THRESHOLDS))
    finally:
        trigger_hook.close()


def _cluster_id(bootstrap: str) -> str:
    with KafkaOffsetsClient({"bootstrap.servers": bootstrap}, timeout=10) as client:
        cluster = client.snapshot([]).cluster_id
    assert cluster
    return cluster


def test_first_check_with_the_first_cluster_only(union):
    """At defaults with one cluster's address: the source read there is exact, and one message
    names what to add for the other (--source-servers)."""
    first = status_at_defaults(union["ck"], union["a"])
    orders = {(t, p): n for (t, p), n in union["truth"].items() if t == union["orders"]}
    assert first.lags() == orders, first
    assert first.asks_for() == {"--source-servers"}, first.messages()


def test_a_bootstrap_list_spanning_two_clusters_is_refused(kafka, cluster_b, tmp_path):
    # Without the check, librdkafka takes metadata and offsets from whichever server answers:
    # the mirrored `orders` on B gives lags that look right and are not.
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(topic, partitions=1)
    cluster_b.create_topic(topic, partitions=1)
    both = f"{kafka.bootstrap},{cluster_b.bootstrap}"
    with (
        KafkaOffsetsClient({"bootstrap.servers": both}, timeout=10) as client,
        pytest.raises(KafkaError) as caught,
    ):
        client.snapshot([topic])
    message = str(caught.value)
    assert f"Kafka bootstrap servers {both} span 2 clusters" in message
    for server in (kafka.bootstrap, cluster_b.bootstrap):
        assert f"{server} belong to cluster {_cluster_id(server)}" in message
    # The CLI: the check failed (exit 4), the message says why; a checkpoint is not needed to
    # see it, but give it one so nothing else fails first.
    ck = tmp_path / "ck"
    (ck / "offsets").mkdir(parents=True)
    (ck / "commits").mkdir()
    (ck / "offsets" / "0").write_text(f'v1\n{{}}\n{{"{topic}":{{"0":0}}}}')
    (ck / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    proc = subprocess.run(
        [str(SPARKLAG), "status", str(ck), "-b", both],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 4, proc.stderr
    assert "span 2 clusters" in proc.stderr and "Traceback" not in proc.stderr


def test_a_bootstrap_list_of_one_cluster_with_a_dead_server_still_answers(kafka):
    # The same broker twice (two names) and a server that does not answer: one cluster.
    port = kafka.bootstrap.rsplit(":", 1)[1]
    servers = f"{kafka.bootstrap},localhost:{port},127.0.0.1:1"
    with KafkaOffsetsClient({"bootstrap.servers": servers}, timeout=5) as client:
        snapshot = client.snapshot([])
    assert snapshot.cluster_id == _cluster_id(kafka.bootstrap)


# -- every command over the two clusters: snapshot, migrate, history, serve, the Spark scan -------


def sparklag(*args: str) -> dict[str, Any]:
    """The one result of a CLI command's --json document; the command must succeed."""
    proc = subprocess.run(
        [str(SPARKLAG), *args, "--json"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    (result,) = json.loads(proc.stdout)["results"]
    return dict(result)


def mapped_flags(union: dict[str, Any]) -> list[str]:
    return ["-b", union["a"], "--source-servers", f"1={union['b']}"]


def as_text(offsets: dict[int, int]) -> dict[str, int]:
    return {str(p): o for p, o in offsets.items()}


def test_snapshot_records_each_sources_cluster_and_exports_to_it(union, tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    orders, payments, committed = union["orders"], union["payments"], union["committed"]
    group = f"spark-union-{uuid.uuid4().hex[:6]}"
    root = str(tmp_path / "snaps")
    payload = sparklag(
        "snapshot",
        union["ck"],
        "--snapshot-root",
        root,
        "--consumer-group",
        group,
        *mapped_flags(union),
    )
    assert payload["starting_offsets"] == {
        "0": {orders: as_text(committed["0"][orders])},
        "1": {payments: as_text(committed["1"][payments])},
    }
    ids = {"a": _cluster_id(union["a"]), "b": _cluster_id(union["b"])}
    assert ids["a"] != ids["b"]
    assert payload["kafka_cluster_id"] == ids["a"]
    assert payload["source_clusters"] == {
        "0": {"bootstrap_servers": union["a"], "cluster_id": ids["a"]},
        "1": {"bootstrap_servers": union["b"], "cluster_id": ids["b"]},
    }
    # The document itself records them, and the record times come from each source's cluster.
    document = json.loads(Path(payload["path"]).read_text())
    recorded = {
        s["source_id"]: (s["bootstrap_servers"], s["cluster_id"])
        for s in document["committed_batch"]["sources"]
    }
    assert recorded == {"0": (union["a"], ids["a"]), "1": (union["b"], ids["b"])}
    for source, bootstrap, topic, after in (
        ("0", union["a"], orders, ORDERS_AFTER),
        ("1", union["b"], payments, PAYMENTS_AFTER),
    ):
        waiting = {p: o for p, o in committed[source][topic].items() if after[p]}
        truth = jobs.timestamps_at(bootstrap, {topic: waiting})
        by_time = payload["starting_offsets_by_timestamp"][source][topic]
        assert {(topic, int(p)): by_time[p] for p in as_text(waiting)} == truth
    # The group holds each source's offsets on that source's cluster, read back by a consumer.
    export = payload["consumer_group"]
    assert export["total_lag"] == sum(union["truth"].values())
    assert set(export["clusters"]) == {union["a"], union["b"]}
    for source, bootstrap, topic in (("0", union["a"], orders), ("1", union["b"], payments)):
        assert export["clusters"][bootstrap]["offsets"] == {
            topic: as_text(committed[source][topic])
        }
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            wanted = [TopicPartition(topic, p) for p in committed[source][topic]]
            found = {tp.partition: tp.offset for tp in consumer.committed(wanted, timeout=30)}
        finally:
            consumer.close()
        assert found == committed[source][topic]


def test_migration_validates_on_each_cluster_and_the_restart_loses_and_repeats_nothing(
    union, spark, tmp_path
):
    import shutil

    orders, payments, committed = union["orders"], union["payments"], union["committed"]
    ck = tmp_path / "ck"
    shutil.copytree(union["ck"], ck)
    archive = str(tmp_path / "archive")
    moved = sparklag("migrate", str(ck), "--archive-root", archive, "--quiet-period", "0",
                     *mapped_flags(union))  # fmt: skip
    assert moved["status"] == "completed" and not moved["refusals"] and not ck.exists()
    assert moved["starting_offsets"] == {
        "0": {orders: as_text(committed["0"][orders])},
        "1": {payments: as_text(committed["1"][payments])},
    }
    assert moved["partitions_added"] == {} and moved["records_lost"] == {}

    # The snapshot is never applied to the wrong cluster: source 1 measured against A.
    again = tmp_path / "again"
    shutil.copytree(union["ck"], again)
    refused = subprocess.run(
        [str(SPARKLAG), "migrate", str(again), "--archive-root", archive, "--quiet-period", "0",
         "--snapshot", moved["snapshot_path"], "-b", union["a"], "--dry-run", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 5, refused.stderr
    reasons = json.loads(refused.stdout)["results"][0]["refusals"]
    assert any(
        f"source 1: snapshot was taken on Kafka cluster {_cluster_id(union['b'])} "
        f"({union['b']}), the configured cluster is {_cluster_id(union['a'])}" in r
        for r in reasons
    ), reasons

    # The new query on a new checkpoint, each source from its startingOffsets on its cluster,
    # reads exactly the records produced after the old run: none lost, none twice.
    a = jobs.kafka_stream(spark, union["a"], topics=[orders],
                          starting=json.dumps(moved["starting_offsets"]["0"]))  # fmt: skip
    b = jobs.kafka_stream(spark, union["b"], topics=[payments],
                          starting=json.dumps(moved["starting_offsets"]["1"]))  # fmt: skip
    out = str(tmp_path / "out-v2")
    jobs.run_available_now(
        jobs.select_value(a.union(b)), str(tmp_path / "ck-v2"), sink="parquet", path=out
    )
    rows = [(r["topic"], r["partition"], r["offset"]) for r in spark.read.parquet(out).collect()]
    assert len(rows) == len(set(rows)) == sum(union["truth"].values())
    source = {orders: "0", payments: "1"}
    expected_rows = {
        (topic, p, committed[source[topic]][topic][p] + i)
        for (topic, p), n in union["truth"].items()
        for i in range(n)
    }
    assert set(rows) == expected_rows


def test_history_reads_each_source_on_its_cluster(union):
    past = sparklag("history", union["ck"], *mapped_flags(union))
    source = {union["orders"]: "0", union["payments"]: "1"}
    now = past["points"][-1]
    assert now["kind"] == "now" and now["total_lag"] == sum(union["truth"].values())
    assert {(p["source_id"], p["topic"], p["partition"]): p["lag"] for p in now["partitions"]} == {
        (source[t], t, p): n for (t, p), n in union["truth"].items()
    }
    # The last batch planned up to the committed offsets: Kafka's log end at its time, asked
    # of each source's cluster, is exactly there (records produced after are stamped later).
    last = [p for p in past["points"] if p["kind"] == "committed"][-1]
    at_batch = {(p["source_id"], p["topic"], p["partition"]): p for p in last["partitions"]}
    for s, topics in union["committed"].items():
        for topic, parts in topics.items():
            for partition, offset in parts.items():
                point = at_batch[(s, topic, partition)]
                assert point["planned_offset"] == offset
                assert point["log_end_offset"] == offset, point


def test_the_exporter_serves_each_source_against_its_cluster(union):
    from prometheus_client.parser import text_string_to_metric_families

    proc = subprocess.run(
        [str(SPARKLAG), "serve", union["ck"], "--once", *mapped_flags(union)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    samples = {
        (s.name, s.labels.get("topic"), s.labels.get("partition")): s.value
        for family in text_string_to_metric_families(proc.stdout)
        for s in family.samples
    }
    ends = {union["orders"]: _ends(union["a"], union["orders"]),
            union["payments"]: _ends(union["b"], union["payments"])}  # fmt: skip
    for (topic, p), n in union["truth"].items():
        committed = union["committed"]["0" if topic == union["orders"] else "1"][topic][p]
        assert samples[("sparklag_partition_lag_records", topic, str(p))] == n
        assert samples[("sparklag_partition_committed_offset", topic, str(p))] == committed
        assert samples[("sparklag_partition_log_end_offset", topic, str(p))] == ends[topic][p]
    assert samples[("sparklag_job_lag_records", None, None)] == sum(union["truth"].values())


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    with KafkaOffsetsClient({"bootstrap.servers": bootstrap}, timeout=10) as client:
        return {p: po.log_end for p, po in client.snapshot([topic]).partitions[topic].items()}


def test_the_spark_scan_measures_each_source_against_its_cluster(union, spark, tmp_path, capsys):
    from airflow_sparklag import spark_scan

    out = str(tmp_path / "scan")
    flags = ["--bootstrap-servers", union["a"], "--source-servers", f"1={union['b']}"]
    code = spark_scan.main(
        ["--checkpoints", union["ck"], *flags, "--output", out, "--thresholds",
         json.dumps(THRESHOLDS)],
        spark=spark,
    )  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["topics"] == 2 and summary["lag"]["total_records"] == sum(
        union["truth"].values()
    )
    rows = [
        json.loads(line)
        for path in sorted(Path(out, "partitions").glob("*.json"))
        for line in path.read_text().splitlines()
    ]
    source = {union["orders"]: "0", union["payments"]: "1"}
    assert {(r["source_id"], r["topic"], r["partition"]): r["lag"] for r in rows} == {
        (source[t], t, p): n for (t, p), n in union["truth"].items()
    }
    for r in rows:
        committed = union["committed"][r["source_id"]][r["topic"]][r["partition"]]
        assert r["committed_offset"] == committed
        assert r["log_end_offset"] == committed + union["truth"][(r["topic"], r["partition"])]
    (job,) = [
        json.loads(line)
        for path in sorted(Path(out, "jobs").glob("*.json"))
        for line in path.read_text().splitlines()
    ]
    assert_truth(union, json.loads(job["result"]))
