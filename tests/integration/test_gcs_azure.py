"""Checkpoints on GCS (fake-gcs-server) and Azure Blob (Azurite), read through gcsfs / adlfs.

Real checkpoints written by a real Spark query on local disk are copied, file by file, into a
``gs://`` bucket and an ``abfs://`` container with the stores' own clients (as ``gsutil cp -r``
or ``azcopy`` would). Then the CLI (credentials from the environment, as gcsfs and adlfs read
them), the core ``Session`` (per-scheme ``fsspec_options``) and the Airflow operators (a
``google_cloud_platform`` and a ``wasb`` connection) must read the same numbers as the local
copy and as Kafka (end offsets and records consumed); discovery under a prefix finds every job;
snapshots, the consumer-group export and migrations (dry run and real, archiving by verified
copy) work on each store.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.session import Session
from testbed import jobs
from testbed.azurite import Azurite
from testbed.gcs_server import GcsServer
from tests.first_check import status_at_defaults

pytestmark = pytest.mark.testbed

SPARKLAG = Path(sys.executable).parent / "sparklag"
JOBS = ("lagging", "caught-up", "team/nested/lagging-copy")
KAFKA_ID, GCP_ID, WASB_ID = "gcsaz_kafka", "gcsaz_gcp", "gcsaz_wasb"


def _copy_tree(local: Path, fs: Any, target: str) -> int:
    """Upload every file under ``local`` to ``target`` (``bucket/path``) with ``fs``."""
    count = 0
    for path in sorted(local.rglob("*")):
        if path.is_file():
            fs.pipe_file(f"{target}/{path.relative_to(local).as_posix()}", path.read_bytes())
            count += 1
    return count


def _gcsfs(gcs: GcsServer) -> Any:
    import gcsfs

    return gcsfs.GCSFileSystem(**gcs.options, skip_instance_cache=True)


def _adlfs(azurite: Azurite) -> Any:
    import adlfs

    return adlfs.AzureBlobFileSystem(**azurite.options, skip_instance_cache=True)


@pytest.fixture(scope="module")
def stores(spark, kafka, gcs, azurite, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Two real checkpoints (one lagging, one caught up) on local disk, copied to GCS and
    Azure under one prefix each, plus a nested copy of the lagging one (3 jobs per store)."""
    topic = kafka.create_topic(f"gcsaz-{uuid.uuid4().hex[:8]}", partitions=3)
    for p in range(3):
        kafka.produce(topic, 10, partition=p, start=p * 100)
    local = tmp_path_factory.mktemp("gcsaz")
    jobs.run_available_now(
        jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]), str(local / "lagging")
    )
    kafka.produce(topic, 4, partition=0, start=1000)
    kafka.produce(topic, 6, partition=2, start=1000)
    jobs.run_available_now(
        jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]), str(local / "caught-up")
    )
    tag = uuid.uuid4().hex[:8]
    roots = {"gs": f"gs://checkpoints/{tag}", "abfs": f"abfs://checkpoints/{tag}"}
    for fs in (_gcsfs(gcs), _adlfs(azurite)):
        for job in JOBS:
            source = local / job.replace("team/nested/lagging-copy", "lagging")
            assert _copy_tree(source, fs, f"checkpoints/{tag}/{job}") > 5
    return {"topic": topic, "local": local, "roots": roots}


def _rows(report: dict) -> list[tuple]:
    return [
        (p["topic"], p["partition"], p["committed_offset"], p["log_end_offset"], p["lag"])
        for s in report["sources"]
        for t in s["topics"]
        for p in t["partitions"]
    ]


def _store_env(gcs: GcsServer, azurite: Azurite) -> dict[str, str]:
    """How a user points gcsfs and adlfs at a store without any sparklag option."""
    import os

    return {
        **os.environ,
        "STORAGE_EMULATOR_HOST": gcs.endpoint,
        "AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string,
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }


def test_cli_status_reads_the_same_numbers_as_local_and_kafka(stores, kafka, gcs, azurite):
    topic, local, roots = stores["topic"], stores["local"], stores["roots"]
    urls = [str(local / "lagging"), f"{roots['gs']}/lagging", f"{roots['abfs']}/lagging"]
    proc = subprocess.run(
        [str(SPARKLAG), "status", *urls, "--bootstrap-servers", kafka.bootstrap, "--json"],
        capture_output=True,
        text=True,
        timeout=90,
        env=_store_env(gcs, azurite),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = {r["location"]: r for r in json.loads(proc.stdout)["results"]}
    assert set(results) == set(urls)
    truth_end = kafka.end_offsets(topic)
    readable = jobs.count_from(kafka.bootstrap, {topic: {0: 10, 1: 10, 2: 10}})
    expected = [(topic, p, 10, truth_end[p], readable[(topic, p)]) for p in range(3)]
    assert [readable[(topic, p)] for p in range(3)] == [4, 0, 6]
    for url in urls:
        assert results[url]["error"] is None, results[url]["error"]
        assert _rows(results[url]["report"]) == expected, url
        assert results[url]["report"]["total_lag"] == 10
    local_report = results[urls[0]]["report"]
    for url in urls[1:]:
        assert results[url]["report"]["committed_batch_id"] == local_report["committed_batch_id"]
        assert results[url]["report"]["query_id"] == local_report["query_id"]


@pytest.mark.parametrize("scheme", ["gs", "abfs"])
def test_first_check_with_the_stores_environment(stores, kafka, gcs, azurite, scheme):
    """At defaults with only the variable the store's own clients read (gcsfs:
    STORAGE_EMULATOR_HOST, or credentials found by google.auth; adlfs:
    AZURE_STORAGE_CONNECTION_STRING): the lag is Kafka's end offsets minus the committed
    offsets, and nothing asks for a flag."""
    env = {
        "gs": {"STORAGE_EMULATOR_HOST": gcs.endpoint},
        "abfs": {"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string},
    }[scheme]
    topic = stores["topic"]
    first = status_at_defaults(f"{stores['roots'][scheme]}/lagging", kafka.bootstrap, env=env)
    ends = kafka.end_offsets(topic)
    assert first.lags() == {(topic, p): ends[p] - 10 for p in range(3)}, first
    assert first.asks_for() == set(), first.messages()


@pytest.mark.parametrize("scheme", ["gs", "abfs"])
def test_cli_prefix_finds_every_job(stores, kafka, gcs, azurite, scheme):
    root = stores["roots"][scheme]
    proc = subprocess.run(
        [str(SPARKLAG), "status", "--prefix", root, "--bootstrap-servers", kafka.bootstrap,
         "--json", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=90,
        env=_store_env(gcs, azurite),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(proc.stdout)["results"]
    assert sorted(r["location"] for r in results) == sorted(f"{root}/{job}" for job in JOBS)
    lags = {r["location"][len(root) + 1 :]: r["report"]["total_lag"] for r in results}
    assert lags == {"lagging": 10, "caught-up": 0, "team/nested/lagging-copy": 10}


def test_session_with_per_scheme_options_discovers_and_checks(stores, kafka, gcs, azurite):
    from airflow_sparklag.fleet import discover_checkpoints
    from airflow_sparklag.monitor import CheckOptions, check

    roots = stores["roots"]
    # One session, options per scheme: gcsfs never sees adlfs's connection string.
    with Session(
        kafka_config={"bootstrap.servers": kafka.bootstrap},
        fsspec_options={"gs": gcs.options, "abfs": azurite.options},
    ) as session:
        for root in roots.values():
            found = discover_checkpoints(root, session=session)
            assert found == sorted(f"{root}/{job}" for job in JOBS)
        local = check(session, str(stores["local"] / "lagging"), CheckOptions())
        for root in roots.values():
            remote = check(session, f"{root}/lagging", CheckOptions())
            assert [
                (p.partition, p.committed_offset, p.log_end_offset, p.lag)
                for p in remote.report.partitions()
            ] == [
                (p.partition, p.committed_offset, p.log_end_offset, p.lag)
                for p in local.report.partitions()
            ]
            assert remote.report.total_lag == 10


@pytest.fixture
def connections(kafka, gcs, azurite, monkeypatch):  # type: ignore[no-untyped-def]
    """A kafka, a google_cloud_platform and a wasb connection, as a deployment sets them."""
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{KAFKA_ID.upper()}",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka.bootstrap}}),
    )
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{GCP_ID.upper()}",
        json.dumps(
            {
                "conn_type": "google_cloud_platform",
                "extra": {"token": "anon", "endpoint_url": gcs.endpoint, "project": "testbed"},
            }
        ),
    )
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{WASB_ID.upper()}",
        json.dumps(
            {"conn_type": "wasb", "extra": {"connection_string": azurite.connection_string}}
        ),
    )
    return {"kafka_config_id": KAFKA_ID, "gcp_conn_id": GCP_ID, "wasb_conn_id": WASB_ID}


@pytest.mark.parametrize("scheme", ["gs", "abfs"])
def test_operators_snapshot_export_and_migrate_through_connections(
    stores, kafka, gcs, azurite, connections, scheme
):
    from airflow_sparklag.hooks.sparklag import SparkLagHook
    from airflow_sparklag.operators.snapshot import (
        CheckpointMigrationOperator,
        CheckpointSnapshotOperator,
        ConsumerGroupExportOperator,
    )
    from airflow_sparklag.storage import StorageOptions, open_storage

    topic, root = stores["topic"], stores["roots"][scheme]
    # A job of its own (the other tests read the shared ones): a copy of the lagging one.
    location = f"{root}/migrate-me/ck"
    fs = _gcsfs(gcs) if scheme == "gs" else _adlfs(azurite)
    _copy_tree(stores["local"] / "lagging", fs, location.split("://", 1)[1])
    expected_files = open_storage(str(stores["local"] / "lagging")).walk(
        str(stores["local"] / "lagging")
    )

    hook = SparkLagHook(**connections)
    try:
        result = hook.check(location)
        assert result.report.total_lag == 10
        assert [p.lag for p in result.report.partitions()] == [4, 0, 6]
    finally:
        hook.close()

    snap = CheckpointSnapshotOperator(
        task_id="snap",
        location=location,
        snapshot_root=f"{root}/snapshots",
        **connections,
    ).execute({})["results"][0]
    assert snap["path"].startswith(f"{root}/snapshots/")
    assert fs.exists(snap["path"].split("://", 1)[1])
    assert snap["starting_offsets"]["0"][topic] == {"0": 10, "1": 10, "2": 10}

    group = f"spark-{scheme}-{uuid.uuid4().hex[:6]}"
    export = ConsumerGroupExportOperator(
        task_id="export", location=location, consumer_group=group, **connections
    ).execute({})["results"][0]
    assert export["total_lag"] == 10
    assert _committed(kafka.bootstrap, group, topic) == {0: 10, 1: 10, 2: 10}

    archive = f"{root}/archive"
    dry = CheckpointMigrationOperator(
        task_id="migrate_dry",
        location=location,
        archive_root=archive,
        snapshot=snap["path"],
        quiet_period=0,
        dry_run=True,
        **connections,
    ).execute({})["results"][0]
    assert dry["status"] == "planned", dry
    assert fs.exists(f"{location.split('://', 1)[1]}/offsets/0")  # nothing moved
    done = CheckpointMigrationOperator(
        task_id="migrate",
        location=location,
        archive_root=archive,
        snapshot=snap["path"],
        quiet_period=0,
        **connections,
    ).execute({})["results"][0]
    assert done["status"] == "completed", done
    assert json.loads(done["starting_offsets_json"]) == snap["starting_offsets"]["0"]
    # Archived by verified copy: every file of the checkpoint is in the archive, none left.
    archived = [a for a in done["archives"] if a.get("method") == "copy"]
    assert archived, done["archives"]
    moved = open_storage(
        archived[0]["target"], StorageOptions(fsspec=_options(scheme, gcs, azurite))
    )
    assert set(moved.walk(archived[0]["target"])) >= {
        name for name in expected_files if not name.rsplit("/", 1)[-1].startswith(".")
    }
    assert not fs.exists(f"{location.split('://', 1)[1]}/offsets/0")
    text = json.dumps([snap, export, dry, done])
    assert "AccountKey" not in text


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets, read back with a plain Kafka consumer."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def _options(scheme: str, gcs: GcsServer, azurite: Azurite) -> dict:
    return gcs.options if scheme == "gs" else azurite.options
