"""Lag of checkpoints written by Spark 3.5 (pyspark 3.5.7, spark-sql-kafka-0-10_2.12 3.5.7).

One Spark 3.5 driver process for the module (``testbed/spark35.py``, the venv of
``scripts/setup_spark35.sh``) runs, against the session's broker:

- ``stateful``: a windowed count with a watermark on the RocksDB state store provider, trigger
  every 500 ms, capped at 300 records per batch; stopped once it consumed everything, then more
  records arrive;
- ``scheduled``: a ``Trigger.AvailableNow`` job (150 records per batch) run twice, records
  arriving before, between and after the runs.

Every number of our reader (the Python API and ``sparklag status --json``) is compared, on every
partition, with truth taken without the package: the records the test produced and the rows
Spark says it read, the checkpoint files parsed by hand, Kafka's own ``GetOffsetShell`` and a
plain consumer counting the records from the committed offset to the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_lag_scenarios import _ids, disk_committed, merged, uid

from airflow_sparklag.model.verdict import Health
from airflow_sparklag.monitor import CheckResult, check_checkpoint
from testbed import jobs
from testbed.paths import classpath
from testbed.spark35 import PYSPARK_VERSION, Spark35

pytestmark = pytest.mark.testbed

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SPARKLAG = Path(sys.executable).parent / "sparklag"
# Records per partition, produced by the test: the truth the checkpoints must add up to.
STATEFUL_FIRST = {0: 900, 1: 600, 2: 300}
STATEFUL_AFTER = {0: 11, 1: 0, 2: 47}
SCHEDULED_RUN1 = {0: 300, 1: 200, 2: 100}
SCHEDULED_BETWEEN = {0: 50, 1: 0, 2: 120}
SCHEDULED_AFTER = {0: 0, 1: 70, 2: 30}
# The scheduled job is declared to run every 60 s: a pause over 30 s separates two runs. The
# pause between the runs is longer than that by construction (it starts before run 1's last
# batch ended); the batches of one run follow each other within seconds (a cold first batch
# took 9 s at load 9 on 2 cores).
RUNS_EVERY = 60.0
PAUSE_BETWEEN_RUNS = 32.0


def produce(kafka: Any, topic: str, counts: dict[int, int], start: int) -> None:
    for partition, n in counts.items():
        if n:
            kafka.produce(topic, n, partition=partition, start=start)


def plus(*counts: dict[int, int]) -> dict[int, int]:
    return {p: sum(c[p] for c in counts) for p in counts[0]}


def rows(progress: list[list[int]]) -> int:
    """Input rows Spark reported (a batch is reported once; idle reports have 0 rows)."""
    return sum(n for _batch, n in progress)


def get_offset_shell(kafka: Any, *topics: str) -> dict[str, dict[int, int]]:
    """Log end offsets as Kafka's own GetOffsetShell prints them (topic:partition:offset)."""
    java = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    shell = ["-cp", classpath("kafka"), "org.apache.kafka.tools.GetOffsetShell"]
    proc = subprocess.run(
        [*java, *shell, "--bootstrap-server", kafka.bootstrap, "--topic", "|".join(topics)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    ends: dict[str, dict[int, int]] = {t: {} for t in topics}
    for line in proc.stdout.split():
        topic, partition, offset = line.rsplit(":", 2)
        ends[topic][int(partition)] = int(offset)
    return ends


def committed_on_disk(ck: Path) -> dict[str, dict[int, int]]:
    return merged(disk_committed(ck)[1]) if _ids(ck / "commits") else {}


def start_stateful(driver: Spark35, kafka: Any, topic: str, ck: Path) -> None:
    query = {"topic": topic, "checkpoint": str(ck), "bootstrap": kafka.bootstrap}
    driver.call("stateful", name="windowed", max_offsets=300, **query)


def stop_stateful(driver: Spark35, topic: str, ck: Path) -> list[list[int]]:
    """Waits until the stateful query committed everything produced and reported every row,
    stops it; returns its progress."""
    target, total = {topic: STATEFUL_FIRST}, sum(STATEFUL_FIRST.values())

    def consumed_all() -> bool:
        status = driver.call("status", name="windowed")
        return committed_on_disk(ck) == target and rows(status["progress"]) == total

    jobs.wait_until(consumed_all, 240, f"the Spark 3.5 stateful query read all {total}")
    return list(driver.call("stop", name="windowed")["progress"])


def run_scheduled(driver: Spark35, kafka: Any, topic: str, ck: Path) -> list[list[int]]:
    query = {"topic": topic, "checkpoint": str(ck), "bootstrap": kafka.bootstrap}
    return list(driver.call("available_now", max_offsets=150, **query)["progress"])


@pytest.fixture(scope="module")
def spark35(kafka, tmp_path_factory):  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("spark35")
    stateful, scheduled = (kafka.create_topic(f"s35-{k}-{uid()}", 3) for k in ("st", "sc"))
    produce(kafka, stateful, STATEFUL_FIRST, 0)
    produce(kafka, scheduled, SCHEDULED_RUN1, 0)
    driver = Spark35(base / "driver").start()
    try:
        started = time.monotonic()
        start_stateful(driver, kafka, stateful, base / "stateful")
        run1 = run_scheduled(driver, kafka, scheduled, base / "scheduled")
        run1_ended = time.monotonic()
        produce(kafka, scheduled, SCHEDULED_BETWEEN, 1000)
        windowed = stop_stateful(driver, stateful, base / "stateful")
        time.sleep(max(0.0, run1_ended + PAUSE_BETWEEN_RUNS - time.monotonic()))
        run2 = run_scheduled(driver, kafka, scheduled, base / "scheduled")
        print(f"spark35: {driver.version}, queries ran {time.monotonic() - started:.1f}s")
    finally:
        driver.stop()
    at_run2_end = kafka.end_offsets(scheduled)
    produce(kafka, scheduled, SCHEDULED_AFTER, 2000)
    produce(kafka, stateful, STATEFUL_AFTER, 2000)
    return {
        "version": driver.version,
        "stateful": (stateful, base / "stateful", windowed),
        "scheduled": (scheduled, base / "scheduled", run1, run2, at_run2_end),
        "shell": get_offset_shell(kafka, stateful, scheduled),
    }


def assert_lag_is_truth(
    result: CheckResult, kafka: Any, ck: Path, topic: str, shell: dict[int, int]
) -> dict[int, int]:
    """Per partition, 0 difference: committed offset as on disk, log end as GetOffsetShell
    says, lag = that end - committed = the records a plain consumer reads from there."""
    assert result.report is not None and result.error is None, result
    committed = committed_on_disk(ck)
    counted = jobs.count_from(kafka.bootstrap, committed)
    parts = {(p.topic, p.partition): p for p in result.report.partitions()}
    assert set(parts) == {(topic, p) for p in shell}
    lags = {}
    for partition, end in shell.items():
        p = parts[(topic, partition)]
        assert p.committed_offset == committed[topic][partition], p
        assert p.log_end_offset == end, p
        assert p.lag == end - committed[topic][partition] == counted[(topic, partition)], p
        assert not (p.new_partition or p.data_loss or p.ahead_of_log), p
        lags[partition] = p.lag
    assert result.report.total_lag == sum(counted.values())
    return lags


def status_json(kafka: Any, ck: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [str(SPARKLAG), "status", str(ck), "-b", kafka.bootstrap, "--json", *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout, proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)["results"][0]


def json_lags(payload: dict[str, Any]) -> dict[int, tuple[int, int, int]]:
    """partition -> (committed, log end, lag) from a ``status --json`` report."""
    return {
        p["partition"]: (p["committed_offset"], p["log_end_offset"], p["lag"])
        for s in payload["report"]["sources"]
        for t in s["topics"]
        for p in t["partitions"]
    }


def test_driver_is_spark_35(spark35):
    assert spark35["version"] == PYSPARK_VERSION


def test_stateful_rocksdb_query_lag_is_exact(spark35, kafka):
    topic, ck, progress = spark35["stateful"]
    # What this checkpoint is: Spark 3.5's offsets log v1, RocksDB state, a windowed aggregate.
    lines = (ck / "offsets" / str(_ids(ck / "offsets")[-1])).read_text().split("\n")
    assert lines[0] == "v1"
    assert json.loads(lines[1])["conf"]["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB
    assert (ck / "state" / "0").is_dir()
    # Spark read exactly what was produced, and committed all of it.
    assert rows(progress) == sum(STATEFUL_FIRST.values())
    assert committed_on_disk(ck) == {topic: STATEFUL_FIRST}

    result = check_checkpoint(str(ck), kafka_config={"bootstrap.servers": kafka.bootstrap})
    lags = assert_lag_is_truth(result, kafka, ck, topic, spark35["shell"][topic])
    assert lags == STATEFUL_AFTER
    assert result.report.query_id == json.loads((ck / "metadata").read_text())["id"]
    assert result.report.committed_batch_id == _ids(ck / "commits")[-1]

    # Stopped with records waiting: OK now, STOPPED once they waited long enough (exit 0 or 2).
    code, payload = status_json(kafka, ck)
    assert code in (0, 2) and payload["error"] is None, payload
    shell = spark35["shell"][topic]
    assert json_lags(payload) == {
        p: (STATEFUL_FIRST[p], shell[p], STATEFUL_AFTER[p]) for p in STATEFUL_FIRST
    }


def test_available_now_runs_lag_is_exact_and_run_complete(spark35, kafka):
    topic, ck, run1, run2, at_run2_end = spark35["scheduled"]
    # Both runs read exactly what had been produced before them, in batches of <= 150.
    assert rows(run1) == sum(SCHEDULED_RUN1.values())
    assert rows(run2) == sum(SCHEDULED_BETWEEN.values())
    assert all(n <= 150 for _, n in run1 + run2)
    assert committed_on_disk(ck) == {topic: plus(SCHEDULED_RUN1, SCHEDULED_BETWEEN)}
    assert at_run2_end == plus(SCHEDULED_RUN1, SCHEDULED_BETWEEN)
    assert _ids(ck / "commits")[-1] == run2[-1][0] and _ids(ck / "offsets")[-1] == run2[-1][0]

    result = check_checkpoint(
        str(ck), kafka_config={"bootstrap.servers": kafka.bootstrap}, runs_every=RUNS_EVERY
    )
    assert assert_lag_is_truth(result, kafka, ck, topic, spark35["shell"][topic]) == (
        SCHEDULED_AFTER
    )
    # The declared scheduled job: two runs seen, the last one is run 2 and it was complete.
    assert result.verdict.health is Health.OK, result.verdict
    schedule = result.report.schedule
    # Two runs, or three when a loaded machine stretched a pause inside run 1 past the run gap
    # (half of runs_every: 30 s; seen once in a fresh-clone run beside five other sessions).
    assert schedule is not None and schedule.declared and schedule.runs_seen in (2, 3)
    run = schedule.last_run
    assert run is not None and not run.in_progress and run.start_known
    assert (run.first_batch_id, run.last_batch_id) == (run2[0][0], run2[-1][0])
    assert run.batches == len({batch for batch, _ in run2})
    assert (run.complete, run.records_left) == (True, 0)


def test_available_now_status_json_says_complete_not_stopped(spark35, kafka):
    topic, ck, _run1, run2, _ = spark35["scheduled"]
    shell = spark35["shell"][topic]
    expected = plus(SCHEDULED_RUN1, SCHEDULED_BETWEEN)
    for every in (f"{RUNS_EVERY:.0f}s", "1h"):
        code, payload = status_json(kafka, ck, "--runs-every", every)
        assert code == 0 and payload["verdict"]["health"] == "OK", (every, payload["verdict"])
        assert json_lags(payload) == {
            p: (expected[p], shell[p], SCHEDULED_AFTER[p]) for p in expected
        }
        last_run = payload["report"]["schedule"]["last_run"]
        assert last_run["complete"] is True and last_run["records_left"] == 0, last_run
        assert last_run["last_batch_id"] == run2[-1][0]
