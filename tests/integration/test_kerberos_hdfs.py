"""A Kerberized HDFS (MiniKdc + secure MiniDFSCluster: WebHDFS over SPNEGO, HTTPS only, block
tokens, data transfer protection), read and written by every command and Airflow class: status
(fleet too), history, snapshot, migrate (kill -9 mid-way, then resumed), serve, a long wait,
the hook, and sensors and operators in one real `airflow dags test` run.

The checkpoint is written by a REAL PySpark query on the local file system and copied in with
the package's own Kerberos client: Spark writing to the secure MiniDFSCluster itself needs the
cluster's SASL data transfer and keystores in Spark's Hadoop configuration, not tried here. The
truth is independent of the package: the committed offsets parsed by hand from the local copy,
and the records produced after the query stopped. Every command's output is checked for leaked
credentials (SPNEGO tokens, the auth cookie, delegation tokens, keytab bytes).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.errors import StorageAccessDenied
from airflow_sparklag.storage.webhdfs import WebHDFSOptions, WebHDFSStorage
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
        WebHDFSOptions(url=secure_hdfs.webhdfs_url, verify=str(secure_hdfs.ca_bundle), **options),
    )


def _alice(secure_hdfs: Any) -> WebHDFSStorage:
    """The storage as alice, who owns /checkpoints, logged in from her keytab."""
    return _storage(
        secure_hdfs,
        principal=secure_hdfs.principal("alice"),
        keytab=str(secure_hdfs.keytab("alice")),
    )


@contextlib.contextmanager
def _realm(secure_hdfs: Any) -> Iterator[None]:
    """KRB5_CONFIG naming the cluster's KDC, for this process's own Kerberos clients."""
    before = os.environ.get("KRB5_CONFIG")
    os.environ["KRB5_CONFIG"] = secure_hdfs.krb5_conf
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("KRB5_CONFIG", None)
        else:
            os.environ["KRB5_CONFIG"] = before


def _copy_in(secure_hdfs: Any, local: Path, *locations: str) -> dict[str, bytes]:
    """The local checkpoint written to each location as alice (keytab), 8 files at once
    through one storage, commits/ last as Spark writes them (a reader polling while it lands
    never sees commits/N before offsets/N, which a real checkpoint never shows and the reader
    refuses as damaged); its files by name."""
    from concurrent.futures import ThreadPoolExecutor

    alice = _alice(secure_hdfs)
    files = {
        path.relative_to(local).as_posix(): path.read_bytes()
        for path in local.rglob("*")
        if path.is_file() and not path.name.endswith(".crc")
    }
    with _realm(secure_hdfs), ThreadPoolExecutor(8) as pool:
        for commits in (False, True):
            writes = [
                (f"{at}/{name}", data)
                for at in locations
                for name, data in files.items()
                if name.startswith("commits/") == commits
            ]
            list(pool.map(lambda write: alice.write_atomic(*write), writes))
    return files


@pytest.fixture(scope="module")
def kerberized(spark, kafka, secure_hdfs, tmp_path_factory):  # type: ignore[no-untyped-def]
    topic = kafka.create_topic(f"krb-{uuid.uuid4().hex[:8]}", partitions=3)
    for p in range(3):
        kafka.produce(topic, 6, partition=p, start=p * 100)
    local = tmp_path_factory.mktemp("krb") / "ck"
    jobs.run_available_now(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]), str(local))
    time.sleep(0.01)
    between = time.time()  # after every record the query read, before the ones it did not
    time.sleep(0.01)
    for p, n in AFTER.items():
        if n:
            kafka.produce(topic, n, partition=p, start=p * 100 + 50)
    location = f"{secure_hdfs.namenode_uri}/checkpoints/{uuid.uuid4().hex[:8]}"
    _copy_in(secure_hdfs, local, location)
    return {
        "topic": topic,
        "local": local,
        "location": location,
        "committed": _committed(local),
        "batches": sorted(int(p.name) for p in (local / "commits").iterdir() if p.name.isdigit()),
        "between": between,
        "dir": tmp_path_factory.mktemp("krb-cc"),
    }


def _status(
    kerberized: dict, secure_hdfs: Any, kafka: Any, env: dict[str, str], *flags: str
) -> subprocess.CompletedProcess[str]:
    location = kerberized["location"]
    argv = ["status", location, "-b", kafka.bootstrap, "--json", *_https(secure_hdfs), *flags]
    return _sparklag(secure_hdfs, *argv, env=env)


def test_status_from_the_ticket_cache_kinit_left(kerberized, secure_hdfs, kafka):
    env = secure_hdfs.kinit("alice", kerberized["dir"] / "alice.cc")
    proc = _status(kerberized, secure_hdfs, kafka, env, "--hdfs-kerberos")
    assert proc.returncode in (0, 1, 2), proc.stderr
    report = json.loads(proc.stdout)["results"][0]["report"]
    partitions = {
        p["partition"]: p for s in report["sources"] for t in s["topics"] for p in t["partitions"]
    }
    committed = kerberized["committed"][kerberized["topic"]]
    assert {p: v["committed_offset"] for p, v in partitions.items()} == committed
    assert {p: v["lag"] for p, v in partitions.items()} == AFTER


def test_no_ticket_names_the_cache_and_the_way_out(kerberized, secure_hdfs, kafka):
    env = {"KRB5_CONFIG": secure_hdfs.krb5_conf, "KRB5CCNAME": f"FILE:{kerberized['dir']}/empty.cc"}
    proc = _status(kerberized, secure_hdfs, kafka, env, "--hdfs-kerberos")
    assert proc.returncode == 4, proc.stderr
    assert "no Kerberos ticket in FILE:" in proc.stdout and "run kinit" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_expired_ticket_is_named(kerberized, secure_hdfs, kafka):
    env = secure_hdfs.kinit("alice", kerberized["dir"] / "short.cc", lifetime=1)
    time.sleep(2)
    proc = _status(kerberized, secure_hdfs, kafka, env, "--hdfs-kerberos")
    assert proc.returncode == 4, proc.stderr
    assert "has expired: run kinit (or start `airflow kerberos`" in proc.stdout


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


def test_the_401_challenge_is_answered_from_the_ticket_cache(kerberized, secure_hdfs, kafka):
    """No flag, no Hadoop configuration: the NameNode's 401 `Negotiate` is answered with the
    ticket kinit left (on the previous code: exit 4, "pass --hdfs-kerberos")."""
    env = secure_hdfs.kinit("alice", kerberized["dir"] / "challenged.cc")
    proc = _status(kerberized, secure_hdfs, kafka, env)
    assert proc.returncode in (0, 1, 2, 3), proc.stdout + proc.stderr
    assert _lags(proc) == (kerberized["committed"][kerberized["topic"]], AFTER)


def test_without_a_ticket_the_401_names_the_cache_and_the_way_out(kerberized, secure_hdfs, kafka):
    """Was: "asks for Kerberos ... pass --hdfs-kerberos"; the flag is no longer needed, so
    the message names what is missing instead (the ticket) and no flag."""
    env = {"KRB5CCNAME": f"FILE:{kerberized['dir']}/nothing.cc"}
    proc = _status(kerberized, secure_hdfs, kafka, env)
    assert proc.returncode == 4, proc.stderr
    assert "HTTP 401: the NameNode asks for Kerberos (SPNEGO): no Kerberos ticket in FILE:" in (
        proc.stdout
    ), proc.stdout
    assert "run kinit" in proc.stdout and "--hdfs-kerberos" not in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def _lags(proc: subprocess.CompletedProcess[str]) -> tuple[dict[int, int], dict[int, int]]:
    """(committed offset, lag) per partition of a `status --json` of the one-topic query."""
    (source,) = json.loads(proc.stdout)["results"][0]["report"]["sources"]
    (topic,) = source["topics"]
    partitions = topic["partitions"]
    return (
        {p["partition"]: p["committed_offset"] for p in partitions},
        {p["partition"]: p["lag"] for p in partitions},
    )


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
    flags = ["-b", kafka.bootstrap, "--json", *_keytab_flags(secure_hdfs)]
    prefix = kerberized["location"].rsplit("/", 1)[0]
    fleet = _sparklag(secure_hdfs, "status", "--prefix", prefix, *flags, timeout=180)
    # 3 (UNKNOWN, short history) once the module's checkpoint is older than 30 s; 4 (a failed
    # read or discovery) still fails
    assert fleet.returncode in (0, 1, 2, 3), fleet.stdout + fleet.stderr
    document = json.loads(fleet.stdout)
    locations = [r["location"] for r in document["results"]]
    assert kerberized["location"] in locations
    snapshots = f"{secure_hdfs.namenode_uri}/checkpoints/snapshots-{uuid.uuid4().hex[:6]}"
    snap = _sparklag(
        secure_hdfs, "snapshot", kerberized["location"], "--snapshot-root", snapshots, *flags
    )
    assert snap.returncode == 0, snap.stdout + snap.stderr
    (written,) = json.loads(snap.stdout)["results"]
    offsets = json.dumps(written)
    committed = kerberized["committed"][kerberized["topic"]]
    assert all(str(o) in offsets for o in committed.values())


def test_a_fleet_written_and_scanned_by_many_threads_at_once(kerberized, secure_hdfs, kafka):
    """Eight checkpoints written through one storage by 8 threads, then scanned by `status
    --prefix` (its readers share one session): concurrent SPNEGO logins, each thread with its
    own security context (a shared one fails with MutualAuthenticationError on a 200)."""
    prefix = f"{secure_hdfs.namenode_uri}/checkpoints/fleet-{uuid.uuid4().hex[:8]}"
    locations = [f"{prefix}/job-{i}" for i in range(8)]
    _copy_in(secure_hdfs, kerberized["local"], *locations)
    fleet = _sparklag(
        secure_hdfs, "status", "--prefix", prefix, "-b", kafka.bootstrap, "--json",
        *_keytab_flags(secure_hdfs), timeout=180,
    )  # fmt: skip
    assert fleet.returncode in (0, 1, 2), fleet.stdout + fleet.stderr
    results = json.loads(fleet.stdout)["results"]
    assert sorted(r["location"] for r in results) == locations
    committed = kerberized["committed"][kerberized["topic"]]
    for result in results:
        assert result["error"] is None, result["error"]
        (source,) = result["report"]["sources"]
        (topic,) = source["topics"]
        assert {p["partition"]: p["committed_offset"] for p in topic["partitions"]} == committed


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


# -- every command on the Kerberized cluster ---------------------------------------------------


def _https(secure_hdfs: Any) -> list[str]:
    bundle = str(secure_hdfs.ca_bundle)
    return ["--webhdfs-url", secure_hdfs.webhdfs_url, "--hdfs-ca-bundle", bundle]


def _keytab_flags(secure_hdfs: Any) -> list[str]:
    keytab = str(secure_hdfs.keytab("alice"))
    principal = secure_hdfs.principal("alice")
    return [*_https(secure_hdfs), "--hdfs-principal", principal, "--hdfs-keytab", keytab]


def _sparklag(
    secure_hdfs: Any, *argv: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`sparklag <argv>` logged in from alice's keytab (or `env`'s ticket cache), checked for
    leaked credentials."""
    proc = subprocess.run(
        [str(SPARKLAG), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "KRB5_CONFIG": secure_hdfs.krb5_conf, **(env or {})},
    )
    _assert_no_credentials(proc.stdout + proc.stderr, secure_hdfs)
    return proc


def _assert_no_credentials(text: str, secure_hdfs: Any) -> None:
    """Canaries: no SPNEGO token, auth cookie, delegation token (any the test bed wrote to a
    token file too) or keytab bytes in `text`."""
    import base64

    for marker in ("Negotiate ", "hadoop.auth", "delegation=", "testbed-store"):
        assert marker not in text, f"{marker!r} in the output"
    for token in secure_hdfs.tokens:  # delegation tokens: their URL string, or its tail
        assert token not in text and token[-24:] not in text, "a delegation token in the output"
    for password in secure_hdfs.token_passwords:
        for form in (password.hex(), base64.b64encode(password).decode()[:16]):
            assert form not in text, "a delegation token's password in the output"
    keytab = secure_hdfs.keytab("alice").read_bytes()
    for start in range(len(keytab) - 16):
        window = keytab[start : start + 16]
        if all(32 <= b < 127 for b in window):  # principal names and realms may be printed
            continue
        for form in (window.hex(), base64.b64encode(window).decode()[:20]):
            assert form not in text, f"keytab bytes at {start} in the output"


def test_history_from_the_ticket_cache(kerberized, secure_hdfs, kafka):
    """`sparklag history`: a point per retained batch (offsets/N as the checkpoint has them),
    then now, whose lag is what was produced after the query stopped."""
    env = secure_hdfs.kinit("alice", kerberized["dir"] / "history.cc")
    argv = ["history", kerberized["location"], "-b", kafka.bootstrap, "--json"]
    proc = _sparklag(secure_hdfs, *argv, *_https(secure_hdfs), "--hdfs-kerberos", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    points = json.loads(proc.stdout)["results"][0]["points"]
    local = kerberized["local"]
    assert [p["batch_id"] for p in points] == [*kerberized["batches"], None]
    for point in points[:-1]:
        lines = (local / "offsets" / str(point["batch_id"])).read_text().split("\n")
        planned = json.loads(lines[2])[kerberized["topic"]]
        assert {str(p["partition"]): p["planned_offset"] for p in point["partitions"]} == planned
    now = points[-1]
    assert now["kind"] == "now"
    assert {p["partition"]: p["lag"] for p in now["partitions"]} == AFTER


def _scrape(url: str) -> dict[tuple[str, str | None], float]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, s.labels.get("partition")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_exporter_serves_across_ticket_and_cookie_expiry(kerberized, secure_hdfs, kafka, tmp_path):
    """`sparklag serve`, refreshing every second with 2 s tickets and the 3 s hadoop.auth
    cookie: scraped once a refresh after both expired has succeeded, the metrics are those of
    the Kerberized checkpoint and no refresh or check failed on the way."""
    short = tmp_path / "krb5.conf"
    short.write_text(Path(secure_hdfs.krb5_conf).read_text().replace("1h", "2s"))
    argv = [str(SPARKLAG), "serve", kerberized["location"], "--address", "127.0.0.1"]
    argv += ["--port", "0", "--interval", "1", "-b", kafka.bootstrap, *_keytab_flags(secure_hdfs)]
    env = {**os.environ, "KRB5_CONFIG": str(short), "KRB5CCNAME": f"FILE:{tmp_path}/none.cc"}
    started = time.time()
    with subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env) as server:
        try:
            assert server.stderr is not None
            first = server.stderr.readline()  # "sparklag: serving http://...:<port>/metrics ..."
            url = first.split("serving ", 1)[1].split()[0]
            refreshed_at = "sparklag_last_refresh_timestamp_seconds", None
            jobs.wait_until(
                lambda: _scrape(url).get(refreshed_at, 0) > started + 4.5,
                60,
                "a refresh after the ticket and the cookie expired",
            )
            samples = _scrape(url)
        finally:
            server.terminate()
            _, rest = server.communicate(timeout=30)
    _assert_no_credentials(first + rest, secure_hdfs)
    failures = [k for k, v in samples.items() if "errors_total" in k[0] and v]
    assert not failures and samples[("sparklag_job_up", None)] == 1, (failures, rest)
    committed = kerberized["committed"][kerberized["topic"]]
    for p in range(3):
        assert samples[("sparklag_partition_lag_records", str(p))] == AFTER[p]
        assert samples[("sparklag_partition_committed_offset", str(p))] == committed[p]
    assert samples[("sparklag_job_lag_records", None)] == sum(AFTER.values())


def test_wait_outlives_tickets_and_cookies_from_a_keytab(kerberized, secure_hdfs, kafka, tmp_path):
    """`sparklag wait` for 6 s with 2 s tickets and the cluster's 3 s hadoop.auth cookie: each
    poll reads the checkpoint again, logging in again from the keytab (renewed) when the
    cookie has expired."""
    short = tmp_path / "krb5.conf"
    short.write_text(Path(secure_hdfs.krb5_conf).read_text().replace("1h", "2s"))
    newest = max(kerberized["batches"])
    proc = _sparklag(
        secure_hdfs,
        "wait",
        "progress",
        kerberized["location"],
        "--after-batch-id",
        str(newest),  # the query has stopped: never met
        "--poll-interval",
        "1",
        "--max-wait",
        "6",
        "-b",
        kafka.bootstrap,
        *_keytab_flags(secure_hdfs),
        env={"KRB5_CONFIG": str(short), "KRB5CCNAME": f"FILE:{tmp_path}/none.cc"},
    )
    polls = proc.stderr.strip().splitlines()
    assert proc.returncode == 75, proc.stdout + proc.stderr  # gave up waiting, no auth error
    assert len(polls) >= 5 and all(f"batch {newest}" in line for line in polls[:-1]), polls


KILLED_AT = """
import os, signal, sys
from airflow_sparklag import cli, migration

step = sys.argv[1]
made = migration.Migration.__init__


def at_step(self, *args, **kwargs):
    made(self, *args, **kwargs)
    self.hit = lambda current: current == step and os.kill(os.getpid(), signal.SIGKILL)


migration.Migration.__init__ = at_step
sys.exit(cli.main(sys.argv[2:]))
"""


def _tree(storage: WebHDFSStorage, root: str) -> dict[str, bytes]:
    return {name: storage.read(f"{root}/{name}") for name in storage.walk(root)}


def test_migration_killed_mid_way_loses_no_checkpoint_or_snapshot(
    kerberized, secure_hdfs, kafka, monkeypatch
):
    """`sparklag migrate` from a snapshot `sparklag snapshot` wrote, kill -9'd by itself right
    after its snapshot step, then right after the archive's rename: after each kill the whole
    checkpoint is somewhere (its place or the archive) and the snapshot reads back verified; a
    third run completes. Nothing on the cluster is written as anyone but alice (her keytab)."""
    from airflow_sparklag.snapshot import load_snapshot

    monkeypatch.setenv("KRB5_CONFIG", secure_hdfs.krb5_conf)
    base = f"{secure_hdfs.namenode_uri}/checkpoints/mig-{uuid.uuid4().hex[:8]}"
    location, archive, snapshots = f"{base}/ck", f"{base}/archive", f"{base}/snapshots"
    original = _copy_in(secure_hdfs, kerberized["local"], location)
    flags = ["-b", kafka.bootstrap, *_keytab_flags(secure_hdfs)]
    taken = _sparklag(
        secure_hdfs, "snapshot", location, "--snapshot-root", snapshots, "--json", *flags
    )
    assert taken.returncode == 0, taken.stdout + taken.stderr
    snapshot = json.loads(taken.stdout)["results"][0]["path"]
    argv = ["migrate", location, "--archive-root", archive, "--snapshot", snapshot, *flags]
    argv += ["--quiet-period", "0", "--json"]
    alice = _alice(secure_hdfs)
    for step in ("snapshot", "archive:renamed"):
        killed = subprocess.run(
            [sys.executable, "-c", KILLED_AT, step, *argv],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "KRB5_CONFIG": secure_hdfs.krb5_conf},
        )
        assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
        (journal_name,) = [n for n in alice.walk(archive) if n.endswith("journal.json")]
        journal = json.loads(alice.read(f"{archive}/{journal_name}"))
        assert journal["steps"]["snapshot"]["path"] == snapshot
        archived = {
            name.split("/checkpoint/", 1)[1]: data
            for name, data in _tree(alice, archive).items()
            if "/checkpoint/" in name
        }
        whole = (original, {}) if step == "snapshot" else ({}, original)
        assert (_tree(alice, location), archived) == whole, f"after the kill at {step}"
        assert load_snapshot(alice, snapshot).committed.batch_id == max(kerberized["batches"])

    done = _sparklag(secure_hdfs, *argv)
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = json.loads(done.stdout)["results"]
    assert result["status"] == "completed" and result["snapshot_path"] == snapshot
    assert [a["method"] for a in result["archives"]] == ["resumed"]
    assert _tree(alice, location) == {}
    assert _tree(alice, result["archive_location"]) == original
    committed = kerberized["committed"][kerberized["topic"]]
    starting = result["starting_offsets"]["0"][kerberized["topic"]]
    assert {int(p): o for p, o in starting.items()} == committed
    # The snapshot root as a user lists it: the one snapshot, verified.
    assert [f"{snapshots}/{n}" for n in alice.walk(snapshots)] == [snapshot]


KERBEROS_DAG = """
from airflow.sdk import DAG

from airflow_sparklag.operators.snapshot import (
    CheckpointMigrationOperator,
    CheckpointSnapshotOperator,
)
from airflow_sparklag.operators.sparklag import SparkLagCheckOperator
from airflow_sparklag.sensors.sparklag import (
    SparkCheckpointProgressSensor,
    SparkKafkaCatchUpSensor,
)

keytab = {{"webhdfs_conn_id": "krb_keytab", "kafka_config_id": "krb_kafka"}}
bundle = {{"sparklag_conn_id": "krb_bundle"}}  # its webhdfs connection: Airflow's ticket cache
with DAG("sparklag_kerberos", schedule=None):
    SparkCheckpointProgressSensor(
        task_id="progress", location={location!r}, after_batch_id=-1, poke_interval=1,
        timeout=60, **keytab
    )
    SparkKafkaCatchUpSensor(
        task_id="caught_up", location={location!r}, target_time={between!r},
        poke_interval=1, timeout=60, **bundle
    )
    SparkCheckpointProgressSensor(  # defers: the checkpoint is copied in when it has
        task_id="appears", location={appearing!r}, after_batch_id=-1, deferrable=True,
        poke_interval=1, timeout=120, **bundle
    )
    SparkLagCheckOperator(task_id="check", location={location!r}, fail_on="DATA_LOSS", **bundle)
    CheckpointSnapshotOperator(
        task_id="snapshot", location={location!r}, snapshot_root={snapshots!r},
        **keytab
    )
    CheckpointMigrationOperator(
        task_id="migrate", location={moved!r}, archive_root={archive!r},
        quiet_period=0, **bundle
    )
"""


def _webhdfs_connection(secure_hdfs: Any, **extra: Any) -> str:
    return json.dumps(
        {
            "conn_type": "webhdfs",
            "host": "localhost",
            "port": int(secure_hdfs.webhdfs_url.rsplit(":", 1)[1]),
            "password": PASSWORD_CANARY,  # unused by WebHDFS: never printed either
            "extra": {"use_ssl": True, "verify": str(secure_hdfs.ca_bundle), **extra},
        }
    )


PASSWORD_CANARY = "canary-Pw-4f1d9"


def _dags_test_copying_in(env: dict[str, str], local: Path, location: str, secure_hdfs: Any) -> str:
    """`airflow dags test sparklag_kerberos`, copying the checkpoint in at `location` once a
    sensor has deferred waiting for it; the whole output, colors removed."""
    import threading

    from tests.airflow.test_dags import REPO

    started = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(
        [str(Path(sys.executable).parent / "airflow"), "dags", "test", "sparklag_kerberos"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
    ) as proc:
        watchdog = threading.Timer(300, proc.kill)  # a hung run ends the output: the test fails
        watchdog.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if "; deferring" in line and not any("; deferring" in seen for seen in lines):
                    _copy_in(secure_hdfs, local, location)
                lines.append(line)
        finally:
            watchdog.cancel()
            proc.kill()
    print(f"airflow dags test sparklag_kerberos: {time.monotonic() - started:.1f}s")
    return re.sub(r"\x1b\[[0-9;]*m", "", "".join(lines))


def test_sensors_and_operators_in_a_real_airflow_run(
    airflow_db, kerberized, secure_hdfs, kafka, tmp_path
):
    """`airflow dags test` with Airflow's `[core] security = kerberos` (the ticket cache
    `airflow kerberos` keeps: `[kerberos] ccache`) and a `webhdfs` connection whose extra
    carries a principal + keytab: sensors (one deferred), the check, a snapshot and a
    migration, all on the Kerberized cluster."""
    from airflow_sparklag.snapshot import load_snapshot
    from tests.airflow.conftest import airflow_env
    from tests.airflow.test_dags import run_state

    base = f"{secure_hdfs.namenode_uri}/checkpoints/af-{uuid.uuid4().hex[:8]}"
    moved, archive, snapshots = f"{base}/ck", f"{base}/archive", f"{base}/snapshots"
    appearing = f"{base}/appearing"
    original = _copy_in(secure_hdfs, kerberized["local"], moved)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "kerberos_dag.py").write_text(
        KERBEROS_DAG.format(
            location=kerberized["location"],
            between=kerberized["between"],
            snapshots=snapshots,
            appearing=appearing,
            moved=moved,
            archive=archive,
        )
    )
    cache = kerberized["dir"] / "airflow.cc"
    secure_hdfs.kinit("alice", cache)  # what `airflow kerberos` leaves in [kerberos] ccache
    env = airflow_env(tmp_path)
    env.update(
        {
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__SECURITY": "kerberos",
            "AIRFLOW__KERBEROS__CCACHE": f"FILE:{cache}",
            "AIRFLOW__KERBEROS__PRINCIPAL": secure_hdfs.principal("alice"),
            "AIRFLOW__KERBEROS__KEYTAB": str(secure_hdfs.keytab("alice")),
            "KRB5_CONFIG": secure_hdfs.krb5_conf,
            "AIRFLOW_CONN_KRB_KAFKA": json.dumps(
                {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka.bootstrap}}
            ),
            "AIRFLOW_CONN_KRB_KEYTAB": _webhdfs_connection(
                secure_hdfs,
                principal=secure_hdfs.principal("alice"),
                keytab=str(secure_hdfs.keytab("alice")),
            ),
            "AIRFLOW_CONN_KRB_CACHE": _webhdfs_connection(secure_hdfs),
            "AIRFLOW_CONN_KRB_BUNDLE": json.dumps(
                {
                    "conn_type": "sparklag",
                    "extra": {"kafka_config_id": "krb_kafka", "webhdfs_conn_id": "krb_cache"},
                }
            ),
        }
    )
    env.pop("KRB5CCNAME", None)
    output = _dags_test_copying_in(env, kerberized["local"], appearing, secure_hdfs)
    assert run_state(output) == "success", output[-6000:]
    # `appears` deferred; its trigger (the bundle: Airflow's ticket cache) saw the copy land.
    assert "appearing: no checkpoint yet; deferring" in output, output[-6000:]
    assert "[DAG TEST] Trigger completed" in output, output[-6000:]
    assert PASSWORD_CANARY not in output
    _assert_no_credentials(output, secure_hdfs)
    with _realm(secure_hdfs):
        alice = _alice(secure_hdfs)
        (written,) = alice.walk(snapshots)
        snapshot = load_snapshot(alice, f"{snapshots}/{written}")
        assert _tree(alice, moved) == {}
        archived = {
            name.split("/checkpoint/", 1)[1]
            for name in alice.walk(archive)
            if "/checkpoint/" in name
        }
    assert archived == set(original)
    committed = kerberized["committed"][kerberized["topic"]]
    (source,) = snapshot.committed.sources
    assert source.kafka is not None
    assert dict(source.kafka[kerberized["topic"]]) == committed


# -- only KRB5CCNAME and HADOOP_CONF_DIR: what a Hadoop client of the estate has ---------------


def _hadoop_conf(secure_hdfs: Any, where: Path, **hdfs_site: str) -> Path:
    """A client configuration directory as the cluster's own would be written: Kerberos, HTTPS
    only, the NameNode's HTTPS address, the default file system, the truststore of the HTTPS
    client (ssl-client.xml: a JKS file); ``hdfs_site`` added over it."""
    where.mkdir(parents=True, exist_ok=True)
    sites = {
        "core-site.xml": {
            "hadoop.security.authentication": "kerberos",
            "fs.defaultFS": secure_hdfs.namenode_uri,
        },
        "hdfs-site.xml": {
            "dfs.http.policy": "HTTPS_ONLY",
            "dfs.namenode.https-address": secure_hdfs.webhdfs_url.removeprefix("https://"),
            "dfs.namenode.kerberos.principal": f"hdfs/localhost@{secure_hdfs.realm}",
            "dfs.client.https.keystore.resource": "ssl-client.xml",
            **hdfs_site,
        },
    }
    for name, properties in sites.items():
        rows = "".join(
            f"  <property><name>{key}</name><value>{value}</value></property>\n"
            for key, value in properties.items()
        )
        (where / name).write_text(
            f'<?xml version="1.0"?>\n<configuration>\n{rows}</configuration>\n'
        )
    ssl_client = secure_hdfs.workdir / "tls" / "conf" / "ssl-client.xml"
    (where / "ssl-client.xml").write_text(ssl_client.read_text())
    return where


def _estate(secure_hdfs: Any, conf: Path, ccache: str) -> dict[str, str]:
    """The environment of a Hadoop client: the ticket cache and the Hadoop configuration, and
    nothing else (the KDC is named in KRB5_CONFIG, as /etc/krb5.conf would: `_sparklag` sets
    it). The host's CA bundles (REQUESTS_CA_BUNDLE, ... if set) do not hold the cluster's CA:
    the truststore of the configuration's ssl-client.xml is what trusts it."""
    ca = secure_hdfs.ca_bundle.read_text().strip()
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"):
        assert ca not in (Path(os.environ[name]).read_text() if os.environ.get(name) else "")
    return {"KRB5CCNAME": ccache, "HADOOP_CONF_DIR": str(conf)}


def _status_at_defaults(
    secure_hdfs: Any, kafka: Any, location: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return _sparklag(secure_hdfs, "status", location, "-b", kafka.bootstrap, "--json", env=env)


def test_status_with_only_the_ticket_cache_and_the_hadoop_configuration(
    kerberized, secure_hdfs, kafka
):
    """`sparklag status` with no HDFS flag at all: the NameNode's HTTPS address, HTTPS and
    Kerberos from HADOOP_CONF_DIR, the ticket from KRB5CCNAME; a bare `hdfs:///` path on
    `fs.defaultFS`. Exact offsets and lag (on the previous code: http://localhost:9870,
    refused)."""
    conf = _hadoop_conf(secure_hdfs, kerberized["dir"] / "conf-plain")
    cache = secure_hdfs.kinit("alice", kerberized["dir"] / "estate.cc")["KRB5CCNAME"]
    env = _estate(secure_hdfs, conf, cache)
    bare = "hdfs://" + kerberized["location"].removeprefix(secure_hdfs.namenode_uri)
    assert bare.startswith("hdfs:///checkpoints/")
    expected = (kerberized["committed"][kerberized["topic"]], AFTER)
    for location in (kerberized["location"], bare):
        proc = _status_at_defaults(secure_hdfs, kafka, location, env)
        assert proc.returncode in (0, 1, 2, 3), proc.stdout + proc.stderr
        assert _lags(proc) == expected, location


def test_status_on_an_ha_nameservice_of_the_hadoop_configuration(kerberized, secure_hdfs, kafka):
    """`hdfs://<nameservice>/...`: the NameNodes of `dfs.ha.namenodes.<ns>` at their
    `dfs.namenode.https-address.<ns>.<nn>` (HTTPS_ONLY); the first one does not answer, the
    second is the cluster's."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    ha = {
        "dfs.nameservices": "krbcluster",
        "dfs.ha.namenodes.krbcluster": "nn1,nn2",
        "dfs.namenode.https-address.krbcluster.nn1": f"localhost:{dead}",
        "dfs.namenode.https-address.krbcluster.nn2": secure_hdfs.webhdfs_url.removeprefix(
            "https://"
        ),
    }
    conf = _hadoop_conf(secure_hdfs, kerberized["dir"] / "conf-ha", **ha)
    cache = secure_hdfs.kinit("alice", kerberized["dir"] / "ha.cc")["KRB5CCNAME"]
    location = "hdfs://krbcluster" + kerberized["location"].removeprefix(secure_hdfs.namenode_uri)
    proc = _status_at_defaults(secure_hdfs, kafka, location, _estate(secure_hdfs, conf, cache))
    assert proc.returncode in (0, 1, 2, 3), proc.stdout + proc.stderr
    assert _lags(proc) == (kerberized["committed"][kerberized["topic"]], AFTER)


def test_no_ticket_or_an_expired_one_with_the_hadoop_configuration(kerberized, secure_hdfs, kafka):
    """Kerberos from the configuration, but no usable ticket: the message says where Kerberos
    came from, what is wrong with the ticket (and whose it was) and what to do."""
    conf = _hadoop_conf(secure_hdfs, kerberized["dir"] / "conf-noticket")
    said = f"HTTP 401: {conf / 'core-site.xml'} says hadoop.security.authentication=kerberos: "
    empty = f"FILE:{kerberized['dir']}/estate-empty.cc"
    proc = _status_at_defaults(
        secure_hdfs, kafka, kerberized["location"], _estate(secure_hdfs, conf, empty)
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"{said}no Kerberos ticket in {empty} (" in proc.stdout, proc.stdout
    expired = secure_hdfs.kinit("alice", kerberized["dir"] / "estate-short.cc", lifetime=1)
    time.sleep(2)
    env = _estate(secure_hdfs, conf, expired["KRB5CCNAME"])
    proc = _status_at_defaults(secure_hdfs, kafka, kerberized["location"], env)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    cache = expired["KRB5CCNAME"]
    assert f"{said}the Kerberos ticket of alice@EXAMPLE.TEST in {cache} has expired: run kinit" in (
        proc.stdout
    ), proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_webhdfs_connection_wins_over_the_hadoop_configuration(
    kerberized, secure_hdfs, kafka, monkeypatch
):
    """A `webhdfs` connection naming the NameNode and a principal + keytab is used as it is,
    whatever HADOOP_CONF_DIR says (here: a NameNode address where nothing answers)."""
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    conf = _hadoop_conf(
        secure_hdfs,
        kerberized["dir"] / "conf-dead",
        **{"dfs.namenode.https-address": f"localhost:{dead}"},
    )
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
    monkeypatch.setenv("KRB5_CONFIG", secure_hdfs.krb5_conf)
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka.bootstrap}}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_HDFS_KRB_CONF",
        _webhdfs_connection(
            secure_hdfs,
            principal=secure_hdfs.principal("alice"),
            keytab=str(secure_hdfs.keytab("alice")),
        ),
    )
    offsets = SparkLagHook(webhdfs_conn_id="hdfs_krb_conf").committed_offsets(
        kerberized["location"]
    )["offsets"]
    committed = kerberized["committed"][kerberized["topic"]]
    assert {int(p): o for ps in offsets.values() for p, o in ps[kerberized["topic"]].items()} == (
        committed
    )


# -- inside a YARN container: only a Hadoop token file ------------------------------------------


@pytest.fixture(scope="module")
def token_files(secure_hdfs, tmp_path_factory):  # type: ignore[no-untyped-def]
    """alice's token files as Hadoop's Credentials API writes them (one JVM run, ~5 s)."""
    out = tmp_path_factory.mktemp("tokens")
    return out, secure_hdfs.token_files("alice", out)


def _container(kerberized: dict, token_file: Path | None) -> dict[str, str]:
    """A YARN container's environment: the token file, an empty ticket cache, no keytab."""
    env = {"KRB5CCNAME": f"FILE:{kerberized['dir']}/container-empty.cc"}
    env["HADOOP_TOKEN_FILE_LOCATION"] = str(token_file or "")
    return env


def test_status_and_history_in_a_yarn_container_from_its_token_file(
    kerberized, secure_hdfs, kafka, token_files
):
    """`status` and `history` with nothing but HADOOP_TOKEN_FILE_LOCATION (the Writable file
    YARN writes): the committed offsets and lag of the checkpoint, no Kerberos flag."""
    out, _ = token_files
    env = _container(kerberized, out / "tokens-v0")
    proc = _status(kerberized, secure_hdfs, kafka, env)
    # read (UNKNOWN once the module has run a while: 3); 4 would be a failed read
    assert proc.returncode in (0, 1, 2, 3), proc.stdout + proc.stderr
    (source,) = json.loads(proc.stdout)["results"][0]["report"]["sources"]
    (topic,) = source["topics"]
    committed = kerberized["committed"][kerberized["topic"]]
    assert {p["partition"]: p["committed_offset"] for p in topic["partitions"]} == committed
    assert {p["partition"]: p["lag"] for p in topic["partitions"]} == AFTER
    argv = ["history", kerberized["location"], "-b", kafka.bootstrap, "--json"]
    history = _sparklag(secure_hdfs, *argv, *_https(secure_hdfs), env=env)
    assert history.returncode == 0, history.stdout + history.stderr
    points = json.loads(history.stdout)["results"][0]["points"]
    assert [p["batch_id"] for p in points] == [*kerberized["batches"], None]


def test_a_dtutil_token_file_given_with_the_flag(kerberized, secure_hdfs, kafka, token_files):
    """`--hdfs-token-file` with the protobuf file (`hadoop dtutil`'s) over an environment
    without one; both files give Java's own Token.encodeToUrlString."""
    from airflow_sparklag.storage.hadoop_tokens import pick_hdfs_token, read_token_file

    out, written = token_files
    for name in ("tokens-v0", "tokens-v1"):
        token = pick_hdfs_token(read_token_file(str(out / name)), kerberized["location"])
        assert token is not None and token.url_string() == written["tokens-v0"]["url"], name
    env = _container(kerberized, None)
    proc = _status(kerberized, secure_hdfs, kafka, env, "--hdfs-token-file", str(out / "tokens-v1"))
    assert proc.returncode in (0, 1, 2, 3), proc.stdout + proc.stderr
    (source,) = json.loads(proc.stdout)["results"][0]["report"]["sources"]
    committed = kerberized["committed"][kerberized["topic"]]
    assert {p["partition"]: p["committed_offset"] for p in source["topics"][0]["partitions"]} == (
        committed
    )


def test_a_cancelled_token_names_its_kind_service_and_the_way_out(
    kerberized, secure_hdfs, kafka, token_files
):
    out, written = token_files
    env = _container(kerberized, out / "cancelled")
    proc = _status(kerberized, secure_hdfs, kafka, env)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    service = written["cancelled"]["service"]
    assert f"refused the delegation token (HDFS_DELEGATION_TOKEN, service {service})" in (
        proc.stdout
    ), proc.stdout
    assert f"from {out / 'cancelled'}" in proc.stdout and "Resubmit the application" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_damaged_token_file_is_named(kerberized, secure_hdfs, kafka, token_files, tmp_path):
    out, _ = token_files
    damaged = tmp_path / "container_tokens"
    damaged.write_bytes((out / "tokens-v0").read_bytes()[:40])
    proc = _status(kerberized, secure_hdfs, kafka, _container(kerberized, damaged))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"Hadoop token file {damaged}: cut short or damaged at byte" in proc.stdout
