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

Cost (2 cores shared, load 10-12): the driver's start 28-30 s, the query 22 s, status + scan
21-29 s; the file 114-120 s with the secure HDFS (13-23 s) and Kafka started for it alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
    result = json.loads(status.stdout)
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
