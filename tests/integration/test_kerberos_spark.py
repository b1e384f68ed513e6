"""PySpark on a Kerberized HDFS (MiniKdc + secure MiniDFSCluster: Kerberos RPC, SASL data
transfer protection, block tokens, WebHDFS over SPNEGO on HTTPS only), as Spark users run it.

One driver for the module (testbed/spark_kerberos.py): ``spark-submit --principal alice
--keytab alice.keytab`` with the cluster's Hadoop client configuration (HADOOP_CONF_DIR) and
krb5.conf, and an EMPTY ticket cache, so every login comes from the keytab spark-submit was
given. Its availableNow query writes its checkpoint straight to the Kerberized HDFS; then
`sparklag status` (a kinit ticket cache) and the Spark fleet scan (run in that driver, with no
Kerberos flag: it logs in as spark-submit did) measure it. The truth is independent of the
package: the offsets file read back with Spark's own Hadoop client and parsed here, which must
be every record produced before the query (by construction), and the records produced after.

The last test kills a Kafka-to-Kafka job mid-batch (a second spark-submit driver, kill -9 of
its process group), migrates its checkpoint with `sparklag migrate` and runs the new job in the
module's driver: the sink, read by a plain consumer, against the records produced.

Cost (2 cores shared, load 10-12): the driver's start 28-30 s, the query 22 s, status + scan
21-29 s; the file 114-120 s with the secure HDFS (13-23 s) and Kafka started for it alone.
The kill test: 26-28 s at load 5-7 (the second driver's start 8-10 s, v1 to the kill 10 s,
migrate 3-5 s, v2 to the log end 3-9 s), 35-51 s at load 12.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import jobs
from testbed.process import TestbedError
from testbed.spark_kerberos import KerberizedSpark

pytestmark = pytest.mark.testbed

SPARKLAG = Path(sys.executable).parent / "sparklag"
BEFORE = 6  # records per partition before the query
AFTER = {0: 3, 1: 0, 2: 5}  # produced per partition after the query stopped


@pytest.fixture(scope="module")
def driver(secure_hdfs: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    spark = KerberizedSpark(tmp_path_factory.mktemp("krb-spark"), secure_hdfs, "alice").start()
    print(
        f"kerberized spark-submit driver: Spark {spark.version}, up in {spark.start_seconds:.1f}s"
    )
    yield spark
    spark.stop()


@pytest.fixture(scope="module")
def written(driver: Any, kafka: Any, secure_hdfs: Any) -> dict[str, Any]:
    """The query's checkpoint on the Kerberized HDFS, and what its files say."""
    topic = kafka.create_topic(f"krb-spark-{uuid.uuid4().hex[:8]}", partitions=3)
    for p in range(3):
        kafka.produce(topic, BEFORE, partition=p, start=p * 100)
    prefix = f"{secure_hdfs.namenode_uri}/checkpoints/spark-{uuid.uuid4().hex[:8]}"
    location = f"{prefix}/orders"
    started = time.monotonic()
    progress = driver.call(
        "available_now",
        topic=topic,
        checkpoint=location,
        bootstrap=kafka.bootstrap,
        max_offsets=100,
    )["progress"]
    print(f"availableNow query on the Kerberized HDFS: {time.monotonic() - started:.1f}s")
    for p, n in AFTER.items():
        kafka.produce(topic, n, partition=p, start=p * 100 + 50)
    files = driver.call("files", path=location)["files"]
    newest = max(int(name.split("/")[1]) for name in files if name.startswith("commits/"))
    offsets = json.loads(files[f"offsets/{newest}"].split("\n")[2])[topic]
    return {
        "topic": topic,
        "prefix": prefix,
        "location": location,
        "progress": progress,
        "committed": {int(p): o for p, o in offsets.items()},
    }


def _webhdfs(secure_hdfs: Any) -> list[str]:
    return [
        "--webhdfs-url",
        secure_hdfs.webhdfs_url,
        "--hdfs-ca-bundle",
        str(secure_hdfs.ca_bundle),
    ]


def _scan(driver: Any, written: dict, kafka: Any, output: str, *flags: str) -> dict[str, Any]:
    """The fleet scan over the module's prefix, in the spark-submit driver."""
    argv = ["--prefix", written["prefix"], "--bootstrap-servers", kafka.bootstrap, *flags]
    return dict(driver.call("scan", argv=[*argv, "--output", output]))


def _by_partition(rows: list[dict[str, Any]]) -> dict[int, tuple[int, int, int]]:
    return {r["partition"]: (r["committed_offset"], r["log_end_offset"], r["lag"]) for r in rows}


def test_spark_logged_in_from_its_keytab_and_wrote_the_checkpoint(driver, written):
    assert (driver.info["user"], driver.info["keytab"]) == ("alice@EXAMPLE.TEST", True)
    assert sum(rows for _, rows in written["progress"]) == 3 * BEFORE
    assert written["committed"] == {p: BEFORE for p in range(3)}


def test_status_and_the_spark_scan_give_the_committed_offsets_and_lag(
    driver, written, secure_hdfs, kafka, tmp_path
):
    """`sparklag status` from a kinit ticket cache, then the fleet scan in the spark-submit
    driver (no Kerberos flag: spark.kerberos.principal/keytab), both against the same Kafka."""
    env = secure_hdfs.kinit("alice", tmp_path / "alice.cc")
    status = subprocess.run(
        [str(SPARKLAG), "status", written["location"], "-b", kafka.bootstrap, "--json",
         "--hdfs-kerberos", *_webhdfs(secure_hdfs)],
        capture_output=True, text=True, timeout=120, env={**os.environ, **env},
    )  # fmt: skip
    assert status.returncode in (0, 1, 2), status.stdout + status.stderr
    (result,) = json.loads(status.stdout)["results"]
    sources = result["report"]["sources"]
    cli = _by_partition([p for s in sources for t in s["topics"] for p in t["partitions"]])
    truth = {p: (c, c + AFTER[p], AFTER[p]) for p, c in written["committed"].items()}
    assert cli == truth

    output = f"{written['prefix']}-scan"  # Spark writes the tables to the Kerberized HDFS too
    answer = _scan(driver, written, kafka, output, *_webhdfs(secure_hdfs))
    assert answer["code"] == 0
    summary = answer["summary"]
    assert [r["location"] for r in summary["results"]] == [written["location"]]
    assert summary["lag"]["total_records"] == sum(AFTER.values())
    tables = driver.call("files", path=output)["files"]
    rows = [
        json.loads(line)
        for name, text in tables.items()
        if name.startswith("partitions/part-")
        for line in text.splitlines()
    ]
    assert _by_partition(rows) == truth
    job = json.loads(next(t for n, t in tables.items() if n.startswith("jobs/part-") and t.strip()))
    assert job["health"] == result["verdict"]["health"]


def test_the_scan_flags_override_the_login_of_spark_submit(driver, written, secure_hdfs, kafka):
    """--hdfs-principal/--hdfs-keytab win over spark-submit's: here a keytab of another KDC,
    refused by name on the driver before any Spark job."""
    login = ["--hdfs-principal", secure_hdfs.principal("alice"), "--hdfs-keytab"]
    login.append(str(secure_hdfs.keytab("rogue_alice")))
    with pytest.raises(TestbedError, match=r"Kerberos login of alice@EXAMPLE\.TEST with keytab"):
        _scan(
            driver, written, kafka, f"{written['prefix']}-refused", *_webhdfs(secure_hdfs), *login
        )


# -- kill -9 of the job mid-batch, migration, the migrated job ----------------------------------

SOURCE = 40  # records per partition before v1 starts
BATCH = 45  # v1's maxOffsetsPerTrigger: 15 records a partition, one task each
NAP_MS = 100  # per record in v1's tasks after its first batch: 3 tasks of 1.5 s on local[2]
KILL_AFTER = 1.0  # seconds after the in-flight batch is first seen: its first tasks half done
DOWN = {0: 4, 1: 0, 2: 7}  # produced per partition while no job runs


def _batches(files: dict[str, str], kind: str) -> list[int]:
    return sorted(int(n.split("/")[1]) for n in files if re.fullmatch(rf"{kind}/\d+", n))


def _offsets(files: dict[str, str], batch: int, topic: str) -> dict[int, int]:
    offsets = json.loads(files[f"offsets/{batch}"].split("\n")[2])[topic]
    return {int(p): o for p, o in offsets.items()}


def _span(start: dict[int, int], end: dict[int, int]) -> set[tuple[int, int]]:
    return {(p, o) for p, stop in end.items() for o in range(start.get(p, 0), stop)}


def _checkpoint(driver: Any, location: str) -> dict[str, str]:
    """Every file of a checkpoint, read with Spark's Hadoop client; {} while there is none."""
    try:
        return dict(driver.call("files", path=location)["files"])
    except TestbedError as exc:  # not there yet, or a file renamed while it was listed
        if "FileNotFoundException" in str(exc):
            return {}
        raise


def _sink(kafka: Any, topic: str) -> list[tuple[str, tuple[int, int], str]]:
    """(job tag, source partition and offset, source value) of every record in the sink, read
    by a plain consumer from offset 0 to the end."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": f"krb-kill-truth-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    found: list[tuple[str, tuple[int, int], str]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                if message.error() is not None:
                    if message.error().name() == "_PARTITION_EOF":
                        return found
                    raise RuntimeError(f"sink consumer: {message.error()}")
                p, o = message.key().decode().split(":")
                tag, value = message.value().decode().split(":", 1)
                found.append((tag, (int(p), int(o)), value))
    finally:
        consumer.close()
    raise TimeoutError(f"no end of {topic} in 30 s")


def _kill_mid_batch(victim: Any, driver: Any, location: str) -> tuple[int, float]:
    """kill -9 of v1's driver once a batch after a committed one has been in flight (offsets/L
    written, commits/L not) for KILL_AFTER; returns L and the kill's time."""
    seen: tuple[int, float] | None = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        files = _checkpoint(driver, location)
        offsets, commits = _batches(files, "offsets"), _batches(files, "commits")
        if commits and offsets[-1] > commits[-1]:
            if seen is None or seen[0] != offsets[-1]:
                seen = (offsets[-1], time.monotonic())
            elif time.monotonic() - seen[1] >= KILL_AFTER:
                victim.kill()
                return seen[0], time.monotonic()
        time.sleep(0.1)
    raise TimeoutError(f"v1 never had a batch in flight after a committed one: {sorted(files)}")


def test_job_killed_mid_batch_then_migrated_loses_and_skips_nothing(
    driver, secure_hdfs, kafka, tmp_path, monkeypatch
):
    """v1 (spark-submit with alice's keytab, Kafka to Kafka, checkpoint on the Kerberized HDFS)
    is killed -9 while a batch is in flight; `sparklag migrate` (keytab) snapshots and archives
    its checkpoint; v2, in the module's driver, starts a new checkpoint there from the
    startingOffsets the migration printed (the snapshot's). The truth: the records produced
    (their values by construction) and the sink read by a plain consumer. v2 writes exactly the
    records v1 had not committed; together nothing is lost, and only the in-flight batch's
    range can be there twice."""
    from airflow_sparklag.snapshot import load_snapshot
    from airflow_sparklag.storage.webhdfs import WebHDFSOptions, WebHDFSStorage

    began = time.monotonic()
    topic = kafka.create_topic(f"krb-kill-{uuid.uuid4().hex[:8]}", partitions=3)
    sink = kafka.create_topic(f"krb-kill-sink-{uuid.uuid4().hex[:8]}", partitions=1)
    for p in range(3):
        kafka.produce(topic, SOURCE, partition=p, start=p * 1000)
    base = f"{secure_hdfs.namenode_uri}/checkpoints/kill-{uuid.uuid4().hex[:8]}"
    ck1, ck2 = f"{base}/v1", f"{base}/v2"
    relay = {"topic": topic, "sink": sink, "bootstrap": kafka.bootstrap}
    victim = KerberizedSpark(tmp_path / "v1", secure_hdfs, "alice")
    try:
        victim.start()
        victim_up = time.monotonic()
        victim.call("relay", name="v1", tag="v1", checkpoint=ck1, max_offsets=BATCH,
                    nap_ms=NAP_MS, nap_from=BATCH // 3, **relay)  # fmt: skip
        in_flight, killed_at = _kill_mid_batch(victim, driver, ck1)
    finally:
        victim.stop()

    # What the killed job left, read with Spark's own Hadoop client.
    before = _checkpoint(driver, ck1)
    committed_batch = _batches(before, "commits")[-1]
    assert _batches(before, "offsets")[-1] == in_flight > committed_batch >= 0
    committed = _offsets(before, committed_batch, topic)
    planned = _offsets(before, in_flight, topic)
    replay = _span(committed, planned)
    assert replay, "the killed batch planned to read nothing"
    for p, n in DOWN.items():
        kafka.produce(topic, n, partition=p, start=p * 1000 + SOURCE)
    ends = kafka.end_offsets(topic)

    flags = ["--webhdfs-url", secure_hdfs.webhdfs_url, "--hdfs-ca-bundle",
             str(secure_hdfs.ca_bundle), "--hdfs-principal", secure_hdfs.principal("alice"),
             "--hdfs-keytab", str(secure_hdfs.keytab("alice"))]  # fmt: skip
    krb = {"KRB5_CONFIG": secure_hdfs.krb5_conf, "KRB5CCNAME": f"FILE:{tmp_path}/none.cc"}
    migrated = subprocess.run(
        [str(SPARKLAG), "migrate", ck1, "--archive-root", f"{base}/archive", "-b", kafka.bootstrap,
         "--quiet-period", "0", "--json", *flags],
        capture_output=True, text=True, timeout=120, env={**os.environ, **krb},
    )  # fmt: skip
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    (result,) = json.loads(migrated.stdout)["results"]
    assert result["status"] == "completed"
    assert (result["committed_batch_id"], result["in_flight_batch_id"]) == (
        committed_batch,
        in_flight,
    )
    assert result["replay_ranges"] == {
        "0": {
            topic: {
                str(p): {"from": committed[p], "to": planned[p]}
                for p in sorted(planned)
                if planned[p] > committed[p]
            }
        }
    }
    # The old checkpoint archived whole (same files, same bytes), none left at its place.
    assert _checkpoint(driver, result["archive_location"]) == before
    assert _checkpoint(driver, ck1) == {}
    # The snapshot reads back verified, and its startingOffsets are the committed offsets.
    monkeypatch.setenv("KRB5_CONFIG", secure_hdfs.krb5_conf)
    alice = WebHDFSStorage.for_url(
        secure_hdfs.namenode_uri,
        WebHDFSOptions(
            url=secure_hdfs.webhdfs_url,
            verify=str(secure_hdfs.ca_bundle),
            principal=secure_hdfs.principal("alice"),
            keytab=str(secure_hdfs.keytab("alice")),
        ),
    )
    snapshot = load_snapshot(alice, result["snapshot_path"])
    assert snapshot.committed.batch_id == committed_batch
    assert snapshot.in_flight is not None and snapshot.in_flight.batch_id == in_flight
    starting = result["starting_offsets"]["0"]  # what `migrate` prints for the new job
    assert starting == snapshot.starting_offsets()
    assert starting == {topic: {str(p): o for p, o in committed.items()}}
    migrated_at = time.monotonic()

    try:
        driver.call("relay", name="v2", tag="v2", checkpoint=ck2, starting=json.dumps(starting),
                    **relay)  # fmt: skip

        def caught_up() -> bool:
            files = _checkpoint(driver, ck2)
            commits = _batches(files, "commits")
            return bool(commits) and _offsets(files, commits[-1], topic) == ends

        jobs.wait_until(caught_up, 120, "v2 caught up with the log end")
    finally:
        with contextlib.suppress(TestbedError, KeyError):
            driver.call("stop", name="v2")
    caught_up_at = time.monotonic()

    records = _sink(kafka, sink)
    truth = {(p, o): f"r-{p * 1000 + o}" for p, end in ends.items() for o in range(end)}
    assert [r for r in records if truth.get(r[1]) != r[2]] == [], "a record changed or unknown"
    v1 = [key for tag, key, _ in records if tag == "v1"]
    v2 = [key for tag, key, _ in records if tag == "v2"]
    assert len(set(v1)) == len(v1) and len(set(v2)) == len(v2), "a job wrote a record twice"
    assert set(v1) | set(v2) == set(truth), f"lost: {sorted(set(truth) - set(v1) - set(v2))}"
    assert set(v2) == _span(committed, ends), "v2 skipped or re-read committed records"
    assert _span({}, committed) <= set(v1) <= _span({}, planned)
    twice = set(v1) & set(v2)
    assert twice <= replay
    print(
        f"\nv1 killed in batch {in_flight} (committed {committed_batch}); produced "
        f"{len(truth)}, v1 wrote {len(v1)} ({len(set(v1) & replay)} of the {len(replay)} "
        f"in flight), v2 {len(v2)}, twice {len(twice)}. v1's driver up in "
        f"{victim_up - began:.1f}s, kill at {killed_at - began:.1f}s, migrated at "
        f"{migrated_at - began:.1f}s, v2 caught up at {caught_up_at - began:.1f}s"
    )
