"""A Kerberized HDFS (MiniKdc + secure MiniDFSCluster: WebHDFS over SPNEGO, HTTPS only, block
tokens, data transfer protection), read by `sparklag status` and the storage backend.

The checkpoint is written by a REAL PySpark query on the local file system and copied in with
the package's own Kerberos client: Spark writing to the secure MiniDFSCluster itself needs the
cluster's SASL data transfer and keystores in Spark's Hadoop configuration, not tried yet. The
truth is independent of the package: the committed offsets parsed by hand from the local copy,
and the records produced after the query stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.errors import StorageAccessDenied
from airflow_sparklag.storage.webhdfs import WebHDFSStorage
from testbed import jobs

pytestmark = pytest.mark.testbed

SPARKLAG = Path(sys.executable).parent / "sparklag"
AFTER = {0: 3, 1: 0, 2: 5}  # produced per partition after the query stopped


def _committed(checkpoint: Path) -> dict[str, dict[int, int]]:
    newest = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    lines = (checkpoint / "offsets" / str(newest)).read_text().split("\n")
    return {t: {int(p): o for p, o in ps.items()} for t, ps in json.loads(lines[2]).items()}


def _storage(secure_hdfs: Any, **options: Any) -> WebHDFSStorage:
    return WebHDFSStorage.for_url(
        secure_hdfs.namenode_uri,
        url=secure_hdfs.webhdfs_url,
        verify=str(secure_hdfs.ca_bundle),
        **options,
    )


@pytest.fixture(scope="module")
def kerberized(spark, kafka, secure_hdfs, tmp_path_factory):  # type: ignore[no-untyped-def]
    topic = kafka.create_topic(f"krb-{uuid.uuid4().hex[:8]}", partitions=3)
    for p in range(3):
        kafka.produce(topic, 6, partition=p, start=p * 100)
    local = tmp_path_factory.mktemp("krb") / "ck"
    jobs.run_available_now(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]), str(local))
    for p, n in AFTER.items():
        if n:
            kafka.produce(topic, n, partition=p, start=p * 100 + 50)
    alice = _storage(
        secure_hdfs,
        principal=secure_hdfs.principal("alice"),
        keytab=str(secure_hdfs.keytab("alice")),
    )
    location = f"{secure_hdfs.namenode_uri}/checkpoints/{uuid.uuid4().hex[:8]}"
    before = os.environ.get("KRB5_CONFIG")
    os.environ["KRB5_CONFIG"] = secure_hdfs.krb5_conf  # where the realm's KDC is
    try:
        for path in local.rglob("*"):
            if path.is_file() and not path.name.endswith(".crc"):
                relative = path.relative_to(local).as_posix()
                alice.write_atomic(f"{location}/{relative}", path.read_bytes())
    finally:
        if before is None:
            os.environ.pop("KRB5_CONFIG", None)
        else:
            os.environ["KRB5_CONFIG"] = before
    return {
        "topic": topic,
        "local": local,
        "location": location,
        "committed": _committed(local),
        "dir": tmp_path_factory.mktemp("krb-cc"),
    }


def _status(
    kerberized: dict, secure_hdfs: Any, kafka: Any, env: dict[str, str], *flags: str
) -> subprocess.CompletedProcess[str]:
    argv = [
        str(SPARKLAG),
        "status",
        kerberized["location"],
        "-b",
        kafka.bootstrap,
        "--json",
        "--webhdfs-url",
        secure_hdfs.webhdfs_url,
        "--hdfs-ca-bundle",
        str(secure_hdfs.ca_bundle),
        *flags,
    ]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def test_status_from_the_ticket_cache_kinit_left(kerberized, secure_hdfs, kafka):
    env = secure_hdfs.kinit("alice", kerberized["dir"] / "alice.cc")
    proc = _status(kerberized, secure_hdfs, kafka, env, "--hdfs-kerberos")
    assert proc.returncode in (0, 1, 2), proc.stderr
    report = json.loads(proc.stdout)["report"]
    partitions = {
        p["partition"]: p for s in report["sources"] for t in s["topics"] for p in t["partitions"]
    }
    committed = kerberized["committed"][kerberized["topic"]]
    assert {p: v["committed_offset"] for p, v in partitions.items()} == committed
    assert {p: v["lag"] for p, v in partitions.items()} == AFTER


def test_keytab_login_and_renewal(kerberized, secure_hdfs, tmp_path, monkeypatch):
    # Tickets of 4 s: after they expire the client logs in again from the keytab by itself.
    short = tmp_path / "krb5.conf"
    short.write_text(Path(secure_hdfs.krb5_conf).read_text().replace("1h", "4s"))
    monkeypatch.setenv("KRB5_CONFIG", str(short))
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/none.cc")  # no ambient ticket
    storage = _storage(
        secure_hdfs,
        principal=secure_hdfs.principal("alice"),
        keytab=str(secure_hdfs.keytab("alice")),
    )
    offsets = f"{kerberized['location']}/offsets"
    first = sorted(o.name for o in storage.list_dir(offsets))
    assert first
    time.sleep(6)
    storage._connected[1].cookies.clear()  # no hadoop.auth cookie: a new SPNEGO login
    assert sorted(o.name for o in storage.list_dir(offsets)) == first


def test_no_ticket_names_the_cache_and_the_way_out(kerberized, secure_hdfs, kafka):
    env = {"KRB5_CONFIG": secure_hdfs.krb5_conf, "KRB5CCNAME": f"FILE:{kerberized['dir']}/empty.cc"}
    proc = _status(kerberized, secure_hdfs, kafka, env, "--hdfs-kerberos")
    assert proc.returncode == 4, proc.stderr
    assert "no Kerberos ticket in FILE:" in proc.stdout and "run kinit" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_expired_ticket_is_named(kerberized, secure_hdfs, kafka):
    env = secure_hdfs.kinit("alice", kerberized["dir"] / "short.cc", lifetime=3)
    time.sleep(5)
    proc = _status(kerberized, secure_hdfs, kafka, env, "--hdfs-kerberos")
    assert proc.returncode == 4, proc.stderr
    assert "has expired: run kinit, or give a keytab" in proc.stdout


def test_ticket_of_another_kdc_is_refused(kerberized, secure_hdfs, kafka):
    env = secure_hdfs.kinit(
        "alice",
        kerberized["dir"] / "rogue.cc",
        keytab=secure_hdfs.keytab("rogue_alice"),
        krb5_conf=secure_hdfs.rogue_krb5_conf,
    )
    env["KRB5_CONFIG"] = secure_hdfs.krb5_conf
    proc = _status(kerberized, secure_hdfs, kafka, env, "--hdfs-kerberos")
    assert proc.returncode == 4, proc.stderr
    assert "refused the ticket of alice@EXAMPLE.TEST" in proc.stdout


def test_keytab_that_does_not_match(kerberized, secure_hdfs, monkeypatch):
    monkeypatch.setenv("KRB5_CONFIG", secure_hdfs.krb5_conf)
    storage = _storage(
        secure_hdfs,
        principal=secure_hdfs.principal("alice"),
        keytab=str(secure_hdfs.keytab("rogue_alice")),
    )
    with pytest.raises(
        StorageAccessDenied, match=r"Kerberos login of alice@EXAMPLE\.TEST with keytab"
    ):
        storage.list_dir(f"{kerberized['location']}/offsets")


def test_without_kerberos_the_401_says_to_use_it(kerberized, secure_hdfs, kafka):
    proc = _status(kerberized, secure_hdfs, kafka, {})
    assert proc.returncode == 4, proc.stderr
    assert "asks for Kerberos" in proc.stdout and "--hdfs-kerberos" in proc.stdout


def test_a_user_without_permission_gets_403_naming_path_and_user(secure_hdfs, monkeypatch):
    monkeypatch.setenv("KRB5_CONFIG", secure_hdfs.krb5_conf)
    bob = _storage(
        secure_hdfs, principal=secure_hdfs.principal("bob"), keytab=str(secure_hdfs.keytab("bob"))
    )
    with pytest.raises(StorageAccessDenied, match=r"/private.*user=bob"):
        bob.list_dir(f"{secure_hdfs.namenode_uri}/private")


def test_fleet_and_snapshot_on_the_kerberized_cluster(kerberized, secure_hdfs, kafka):
    """`status --prefix` discovers the checkpoint and `snapshot` writes one, both logged in
    from a keytab."""
    flags = [
        "--webhdfs-url",
        secure_hdfs.webhdfs_url,
        "--hdfs-ca-bundle",
        str(secure_hdfs.ca_bundle),
        "--hdfs-principal",
        secure_hdfs.principal("alice"),
        "--hdfs-keytab",
        str(secure_hdfs.keytab("alice")),
    ]
    env = {**os.environ, "KRB5_CONFIG": secure_hdfs.krb5_conf}
    prefix = kerberized["location"].rsplit("/", 1)[0]
    fleet = subprocess.run(
        [str(SPARKLAG), "status", "--prefix", prefix, "-b", kafka.bootstrap, "--json", *flags],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert fleet.returncode in (0, 1, 2), fleet.stdout + fleet.stderr
    document = json.loads(fleet.stdout)
    locations = [r["location"] for r in document.get("results", [document])]
    assert kerberized["location"] in locations
    snapshots = f"{secure_hdfs.namenode_uri}/checkpoints/snapshots-{uuid.uuid4().hex[:6]}"
    snap = subprocess.run(
        [
            str(SPARKLAG),
            "snapshot",
            kerberized["location"],
            "--to",
            snapshots,
            "-b",
            kafka.bootstrap,
            "--json",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert snap.returncode == 0, snap.stdout + snap.stderr
    written = json.loads(snap.stdout)
    offsets = json.dumps(written)
    committed = kerberized["committed"][kerberized["topic"]]
    assert all(str(o) in offsets for o in committed.values())


def test_airflow_hook_with_a_kerberos_webhdfs_connection(
    kerberized, secure_hdfs, kafka, monkeypatch
):
    """A `webhdfs` connection whose extra asks for Kerberos (principal + keytab, CA bundle)."""
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    monkeypatch.setenv("KRB5_CONFIG", secure_hdfs.krb5_conf)
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka.bootstrap}}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_HDFS_KRB",
        json.dumps(
            {
                "conn_type": "webhdfs",
                "host": "localhost",
                "port": int(secure_hdfs.webhdfs_url.rsplit(":", 1)[1]),
                "extra": {
                    "use_ssl": True,
                    "verify": str(secure_hdfs.ca_bundle),
                    "principal": secure_hdfs.principal("alice"),
                    "keytab": str(secure_hdfs.keytab("alice")),
                },
            }
        ),
    )
    hook = SparkLagHook(webhdfs_conn_id="hdfs_krb")
    offsets = hook.committed_offsets(kerberized["location"])["offsets"]
    committed = kerberized["committed"][kerberized["topic"]]
    assert {int(p): o for ps in offsets.values() for p, o in ps[kerberized["topic"]].items()} == (
        committed
    )
