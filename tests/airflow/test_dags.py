"""The example DAGs: integrity and parse time, import cost, and real runs with `airflow dags test`.

Each `airflow dags test` costs ~15-20 s, so each run here checks one behaviour a deployment
relies on; the migration run covers the deferred path (its sensor defers, and `dags test` runs
the trigger inline). tests/airflow/test_airflow_smoke.py runs a DAG in a real deployment.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.triggers.events import airflow_version
from tests.airflow.conftest import airflow_env

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
HEAVY = ("pyspark", "boto3", "botocore", "confluent_kafka", "hdfs", "fsspec", "requests")


@functools.cache
def dag_bag() -> Any:
    """The example DAGs parsed once per session (Airflow's DagBag)."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow < 3.1
        from airflow.models.dagbag import DagBag
    return DagBag(str(DAGS))


@pytest.mark.airflow_compat
def test_dag_integrity():
    bag = dag_bag()
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {
        "sparklag_sla_check",
        "sparklag_gated_deploy",
        "sparklag_checkpoint_migration",
        "sparklag_fleet_scan",
    } | ({"sparklag_remediation"} if airflow_version() >= (3, 0) else set())
    for dag in bag.dags.values():
        # DagBag refuses cycles; check the ordering explicitly anyway.
        assert len(dag.topological_sort()) == len(dag.tasks)
        assert dag.tags and "sparklag" in dag.tags


def test_dag_parse_time():
    """Measured in the main venv only: the compatibility runs share a loaded machine.

    Each file parses in 0.3-0.8 s here, and 1.1 s when the 2 cores are shared with other runs;
    the bound is far below Airflow's 30 s dagbag_import_timeout yet catches a DAG file that
    builds clients or reads storage at parse time (test_dag_modules_import_nothing_heavy
    checks the imports themselves)."""
    for stat in dag_bag().dagbag_stats:
        assert stat.duration.total_seconds() < 5.0, stat


def test_dag_modules_import_nothing_heavy():
    """DAG files import these modules; the heavy clients must wait until a task runs."""
    code = f"""
import sys, json
import airflow.sdk  # Airflow's own imports (it pulls fsspec itself) are the baseline
baseline = set(sys.modules)
import airflow_sparklag.hooks.sparklag, airflow_sparklag.sensors.sparklag
import airflow_sparklag.operators.sparklag, airflow_sparklag.triggers.sparklag
import airflow_sparklag.operators.fleet, airflow_sparklag.operators.snapshot
import airflow_sparklag.monitor
new = set(sys.modules) - baseline
heavy = {HEAVY!r}
print(json.dumps({{
    "new_heavy": sorted(m for m in new if m.split(".")[0] in heavy),
    "loaded": sorted(m for m in heavy[:5] if m in sys.modules and m != "botocore"),
}}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["new_heavy"] == []
    assert result["loaded"] == [], result


def dags_test(dag_id: str, conf: dict, env: dict, timeout: float = 600) -> str:
    airflow = Path(sys.executable).parent / "airflow"
    started = time.monotonic()
    out = subprocess.run(
        [str(airflow), "dags", "test", dag_id, "--conf", json.dumps(conf)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )
    # Airflow 3.0 prints task errors as colored rich tracebacks: the text without the colors
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    print(f"airflow dags test {dag_id}: {time.monotonic() - started:.1f}s rc={out.returncode}")
    return text


def run_state(output: str) -> str | None:
    """The DAG run's final state, from the 'DagRun Finished: ... state=<s>,' log line."""
    match = re.search(r"DagRun Finished: dag_id=.*? state=(\w+),", output)
    return match.group(1) if match else None


def _last_batch(location: str) -> int:
    return max(int(p.name) for p in (Path(location) / "commits").iterdir() if p.name.isdigit())


@pytest.mark.testbed
def test_checkpoint_migration_dag(airflow_db, kafka, kafka_conn, spark, topic, tmp_path):
    """A real job v1 (parquet) runs with a backlog; the DAG stops it, snapshots, archives its
    checkpoint and starts v2 on a fresh one from the snapshot's offsets: nothing is lost."""
    from airflow_sparklag.hooks.sparklag import SparkLagHook
    from airflow_sparklag.snapshot import load_snapshot
    from airflow_sparklag.storage import open_storage
    from testbed.paths import jars

    sys.path.insert(0, str(DAGS))
    try:
        from jobs.process_control import start_job, stop_job
    finally:
        sys.path.remove(str(DAGS))

    run_dir, old_ck, new_ck = (
        str(tmp_path / "run"),
        str(tmp_path / "ck-v1"),
        str(tmp_path / "ck-v2"),
    )
    out_v1, out_v2 = str(tmp_path / "out-v1"), str(tmp_path / "out-v2")
    snapshots, archive = tmp_path / "snapshots", tmp_path / "archive"
    classpath = ":".join(jars("spark-kafka"))
    kafka.produce(topic, 60)
    produced = {f"r-{i}" for i in range(60)}
    args = ["--bootstrap", kafka.bootstrap, "--topics", topic, "--classpath", classpath]
    v1_args = ["--checkpoint", old_ck, "--sink", "parquet", "--output", out_v1]
    # Throttled, so v1 still has a backlog when the DAG stops it.
    start_job(
        run_dir,
        "orders",
        "v1",
        [*args, *v1_args, "--max-offsets-per-trigger", "3", "--trigger-seconds", "2"],
    )

    def produce_after_stop() -> None:  # records only v2 can read
        log_v1 = Path(run_dir) / "orders-v1.log"
        deadline = time.monotonic() + 300
        while "QUERY_STOPPED" not in log_v1.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        kafka.produce(topic, 30, start=2000)

    late = threading.Thread(target=produce_after_stop, daemon=True)
    hook = SparkLagHook(kafka_conn)
    try:
        deadline = time.monotonic() + 180
        while not (Path(old_ck) / "commits" / "0").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert (Path(old_ck) / "commits" / "0").exists(), "job v1 committed nothing"
        kafka.produce(topic, 60, start=1000)
        produced |= {f"r-{i}" for i in range(1000, 1060)} | {f"r-{i}" for i in range(2000, 2030)}
        late.start()
        output = dags_test(
            "sparklag_checkpoint_migration",
            {
                "checkpoint": old_ck,
                "new_checkpoint": new_ck,
                "snapshot_root": str(snapshots),
                "archive_root": str(archive),
                "output_path": out_v2,
                "topics": topic,
                "run_dir": run_dir,
                "old_job_name": "orders",
                "job_name": "orders",
                "new_version": "v2",
                "spark_classpath": classpath,
                "kafka_config_id": kafka_conn,
            },
            airflow_env(tmp_path),
        )
        assert run_state(output) == "success", output[-6000:]
        # v2 needs seconds for its first batch: the sensor's first probe finds none and defers.
        assert "no batch committed yet; deferring" in output, output[-6000:]
        late.join(timeout=60)
        ends = {str(p): o for p, o in kafka.end_offsets(topic).items()}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # v2 reads the records produced after the stop too
            offsets = hook.committed_offsets(new_ck)["offsets"]
            if [ps.get(topic) for ps in offsets.values()] == [ends]:
                break
            time.sleep(1)
        assert [ps.get(topic) for ps in offsets.values()] == [ends], offsets
    finally:
        hook.close()
        stop_job(run_dir, "orders", timeout=60)
    assert "QUERY_STOPPED" in (Path(run_dir) / "orders-v1.log").read_text()

    # The snapshot exists and verifies (checksum, format); it is what the migration used.
    (snap_path,) = [str(p) for p in snapshots.rglob("*.json")]
    snap = load_snapshot(open_storage(snap_path), snap_path)
    ((source, snap_offsets),) = snap.committed.kafka_sources().items()
    snap_offsets = {p: o for p, o in snap_offsets[topic].items()}
    (journal_path,) = archive.glob("*/journal.json")
    result = json.loads(journal_path.read_text())["steps"]["completed"]["result"]
    assert result["status"] == "completed" and result["snapshot_path"] == snap_path
    assert result["committed_batch_id"] == snap.committed.batch_id

    # The old checkpoint is archived: the original is gone, the archive matches its manifest.
    assert not Path(old_ck).exists()
    archived = Path(result["archive_location"])
    manifest = json.loads((archived.parent / "checkpoint.manifest.json").read_text())
    assert manifest["objects"], manifest
    for entry in manifest["objects"]:
        data = (archived / entry["path"]).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["size"], entry["sha256"])
    assert _last_batch(str(archived)) == snap.committed.batch_id

    # v2's first committed batch ends at or past the snapshot, and started exactly there.
    first = json.loads((Path(new_ck) / "offsets" / "0").read_text().splitlines()[2])
    assert all(first[topic][str(p)] >= o for p, o in snap_offsets.items()), (first, snap_offsets)
    rows_v1 = spark.read.parquet(out_v1).select("partition", "offset", "value").collect()
    rows_v2 = spark.read.parquet(out_v2).select("partition", "offset", "value").collect()
    for partition, start in snap_offsets.items():
        offsets_v2 = [r.offset for r in rows_v2 if r.partition == partition]
        assert min(offsets_v2) == start, (partition, start)  # every partition got more records

    # Nothing lost: every produced value is in v1's or v2's output. Read twice at most: the
    # in-flight batch v1 may have written to its sink without committing it.
    assert produced <= {r.value for r in rows_v1} | {r.value for r in rows_v2}
    replay = result["replay_ranges"].get(source, {}).get(topic, {})
    both = {(r.partition, r.offset) for r in rows_v1} & {(r.partition, r.offset) for r in rows_v2}
    for partition, offset in both:
        span = replay.get(str(partition), {"from": 0, "to": 0})
        assert span["from"] <= offset < span["to"], (partition, offset, replay)
    print(
        f"v1 rows {len(rows_v1)}, v2 rows {len(rows_v2)}, read twice {len(both)}, "
        f"snapshot batch {snap.committed.batch_id}, deferred: {'deferring' in output}"
    )


@pytest.mark.testbed
@pytest.mark.airflow_compat
def test_sla_check_dag_fails_the_breaching_job_only(
    airflow_db, kafka, kafka_conn, aws_conn, consume, topic, tmp_path
):
    kafka.produce(topic, 30)
    healthy = consume(topic, f"s3a://checkpoints/sla-{uuid.uuid4().hex[:8]}")
    other = kafka.create_topic(f"sla-lag-{uuid.uuid4().hex[:6]}", partitions=3)
    kafka.produce(other, 30)
    lagging = consume(other, str(tmp_path / "lagging"))
    kafka.produce(other, 300)
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(
        json.dumps(
            {
                "kafka_config_id": kafka_conn,
                "jobs": [
                    {
                        "name": "healthy-s3",
                        "location": healthy.location,
                        "aws_conn_id": aws_conn,
                        "thresholds": {"max_lag_records_total": 100},
                    },
                    {
                        "name": "lagging-local",
                        "location": lagging.location,
                        "thresholds": {"max_lag_records_total": 100},
                    },
                ],
            }
        )
    )
    alerts = tmp_path / "alerts.jsonl"
    output = dags_test(
        "sparklag_sla_check",
        {"jobs_file": str(jobs_file), "alert_file": str(alerts)},
        airflow_env(tmp_path),
    )
    assert run_state(output) == "failed", output[-4000:]
    assert "1 of 2 job(s) breach their SLA: lagging-local LAGGING" in output
    assert alerts.exists(), output[-4000:]
    (alert,) = [json.loads(line) for line in alerts.read_text().splitlines()]
    # The alert names the job by its name; the location and the verdict come with it.
    assert (alert["job"], alert["location"]) == ("lagging-local", lagging.location)
    assert alert["health"] == "LAGGING"
    assert alert["total_lag"] == 300
    assert "SLA breach: job lagging-local is LAGGING" in output
    # Summary lines: times as ISO-8601, durations in whole seconds, "unknown" and never None.
    summary = [
        line for line in output.splitlines() if "healthy-s3: OK, total lag 0 records" in line
    ]
    assert summary, output[-4000:]
    assert re.search(r"max lag (\d+ s|unknown), last commit \d{4}-\d\d-\d\dT[\d:.]+Z", summary[0])
    assert "None" not in summary[0] and not re.search(r"\d{9,}\.\d", summary[0]), summary[0]
    # Airflow 3.0's task supervisor debug-logs each value it is asked to mask ("Sending request
    # msg=MaskSecret(value=...)"): Airflow's own line, not the provider's output.
    ours = "\n".join(line for line in output.splitlines() if "msg=MaskSecret(" not in line)
    assert "testbed-secret-key" not in ours


@pytest.mark.testbed
def test_sla_check_dag_with_the_shipped_sample_config_is_not_failed(airflow_db, tmp_path):
    """Unpaused before anyone configured it, the DAG skips its runs and says how to configure
    it: the sample file points at s3a://lake/... and would fail every 15 minutes."""
    assert json.loads((DAGS / "config" / "sla_jobs.json").read_text())["example"] is True
    output = dags_test("sparklag_sla_check", {}, airflow_env(tmp_path))
    assert run_state(output) == "success", output[-4000:]
    assert "shipped sample configuration" in output, output[-4000:]
    assert "Variable sparklag_sla_jobs" in output and "jobs_file" in output
    assert "CHECK_FAILED" not in output and "breach their SLA" not in output


@pytest.mark.testbed
def test_fleet_scan_dag_fails_when_it_finds_no_checkpoint(airflow_db, tmp_path):
    """An empty prefix is a wrong prefix or missing access, not a healthy empty fleet: the
    run fails with a message naming the prefix, and quickly (the scan looks for jobs before
    starting Spark), with spark-submit's output in the task log."""
    empty = tmp_path / "no-checkpoints-here"
    (empty / "team-a" / "not-a-checkpoint").mkdir(parents=True)
    started = time.monotonic()
    output = dags_test(
        "sparklag_fleet_scan",
        {
            "prefix": str(empty),
            "bootstrap_servers": "127.0.0.1:9",  # no topics to look up: Kafka is never asked
            "output": str(tmp_path / "scan"),
            "master": "local[1]",
        },
        airflow_env(tmp_path),
        timeout=300,
    )
    elapsed = time.monotonic() - started
    assert run_state(output) == "failed", output[-4000:]
    assert f"no checkpoint found under {empty}" in output, output[-4000:]
    assert any("spark-submit: " in line for line in output.splitlines()), output[-4000:]
    print(f"fleet scan of an empty prefix failed after {elapsed:.1f}s")


@pytest.mark.testbed
def test_fleet_scan_dag_unpaused_before_it_is_configured_skips(airflow_db, tmp_path):
    """Hourly, with no Variable sparklag_fleet_scan and no conf: the run is skipped and says
    how to configure it, instead of failing on the default prefix every hour."""
    output = dags_test("sparklag_fleet_scan", {}, airflow_env(tmp_path), timeout=300)
    assert run_state(output) == "success", output[-4000:]
    assert "not configured: set the Variable sparklag_fleet_scan" in output, output[-4000:]
    assert "spark-submit: " not in output  # Spark never started


@pytest.mark.testbed
def test_gated_deploy_takes_its_abort_branch_when_the_job_is_not_there(
    airflow_db, kafka_conn, tmp_path
):
    """Triggered for a checkpoint that does not exist: check_health branches to abort (the
    deploy is refused naming why) instead of failing, and nothing is stopped or started."""
    missing = tmp_path / "no-such-checkpoint"
    output = dags_test(
        "sparklag_gated_deploy",
        {
            "checkpoint": str(missing),
            "run_dir": str(tmp_path / "run"),
            "kafka_config_id": kafka_conn,
        },
        airflow_env(tmp_path),
        timeout=300,
    )
    assert run_state(output) == "failed", output[-4000:]
    assert "deploy aborted: the running job is CHECK_FAILED" in output, output[-4000:]
    assert "CheckpointNotFound" in output and str(missing) in output
    assert not (tmp_path / "run").exists()  # stop_old_job / start_new_job never ran


@pytest.mark.parametrize("output_path", ["", "/data/out/orders-v2"])
def test_migration_dag_guards_a_file_sink_only_when_output_path_is_given(output_path):
    """``output_path`` is optional (empty: a noop sink). The migrate task's file_sink_paths,
    rendered as the DAG renders it, is read as no path or that one path; it was ``[""]``,
    which failed every run without an output_path ("every item must be a non-empty string")
    after its old job had been stopped."""
    from airflow_sparklag import params
    from airflow_sparklag.migration import MigrationOptions

    dag = dag_bag().dags["sparklag_checkpoint_migration"]
    migrate = dag.get_task("migrate")
    rendered = migrate.render_template(
        migrate.file_sink_paths, {"params": {"output_path": output_path}}, dag.get_template_env()
    )
    options = params.options(MigrationOptions, {"file_sink_paths": rendered})
    assert options.file_sink_paths == ((output_path,) if output_path else ())


def test_migration_dag_reads_its_inputs_before_it_stops_the_job():
    """``check_inputs`` runs before ``stop_old_job``: an archive root inside the checkpoint or a
    value ``migrate`` cannot read fails the run while the old job still runs; the defaults
    pass."""
    from airflow.providers.common.compat.sdk import AirflowFailException

    dag = dag_bag().dags["sparklag_checkpoint_migration"]
    check = dag.get_task("check_inputs")
    assert "check_inputs" in dag.get_task("stop_old_job").upstream_task_ids
    defaults = {name: param.value for name, param in dag.params.items()}
    check.python_callable(params=defaults)
    inside = {**defaults, "archive_root": defaults["checkpoint"] + "/archive"}
    with pytest.raises(AirflowFailException, match=r"archive_root.*inside the checkpoint"):
        check.python_callable(params=inside)
    with pytest.raises(AirflowFailException, match="quiet_period"):
        check.python_callable(params={**defaults, "quiet_period": -1})


def test_fleet_scan_streams_spark_submit_output_line_by_line():
    """The fleet scan's runner logs each line of the process's output as it comes, not at
    its end: a command printing a line every 0.3 s gives log records spread over its run."""
    sys.path.insert(0, str(DAGS))
    try:
        import sparklag_fleet_scan as fleet_scan_dag
    finally:
        sys.path.remove(str(DAGS))
    import logging

    script = "import time\nfor i in range(6):\n    print(i, flush=True); time.sleep(0.3)"
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    handler = Keep(level=logging.INFO)
    fleet_scan_dag.log.addHandler(handler)
    fleet_scan_dag.log.setLevel(logging.INFO)
    try:
        code, tail = fleet_scan_dag.run_streaming_output([sys.executable, "-c", script], {})
    finally:
        fleet_scan_dag.log.removeHandler(handler)
    assert code == 0 and tail == [str(i) for i in range(6)]
    records = [r for r in seen if r.getMessage().startswith("spark-submit: ")]
    assert len(records) == 6
    assert records[-1].created - records[0].created > 1.0, "lines were logged all at once"


def _log_time(line: str) -> float | None:
    """Epoch seconds of a log line's leading ISO timestamp (``airflow dags test`` output)."""
    import datetime

    match = re.match(r"\W*(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)", line)
    if not match:
        return None
    moment = datetime.datetime.fromisoformat(match.group(1))
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


@pytest.mark.testbed
@pytest.mark.parametrize("traffic", ["live", "quiet"])
def test_gated_deploy_dag_restarts_the_job(airflow_db, kafka, kafka_conn, topic, tmp_path, traffic):
    """live: records keep arriving, v2 must process what v1 left behind. quiet: nothing arrives
    after v1 caught up, so v2 commits no batch at all; a healthy deploy must still pass at once
    (the gate is "started and caught up", not "a new batch")."""
    from airflow_sparklag.errors import CheckpointNotFound
    from airflow_sparklag.hooks.sparklag import SparkLagHook
    from testbed.paths import jars

    sys.path.insert(0, str(DAGS))
    try:
        from jobs.process_control import start_job, stop_job
    finally:
        sys.path.remove(str(DAGS))

    run_dir = str(tmp_path / "run")
    checkpoint = str(tmp_path / "ck")
    classpath = ":".join(jars("spark-kafka"))
    kafka.produce(topic, 60)
    stop_producing = threading.Event()

    def produce_continuously() -> None:  # a live topic: the new version has data to process
        i = 0
        while not stop_producing.is_set():
            kafka.produce(topic, 6, start=10_000 + i)
            i += 6
            stop_producing.wait(0.5)

    producer = threading.Thread(target=produce_continuously, daemon=True)
    args = ["--bootstrap", kafka.bootstrap, "--topics", topic, "--checkpoint", checkpoint]
    start_job(run_dir, "orders", "v1", [*args, "--classpath", classpath])
    hook = SparkLagHook(kafka_conn)
    try:
        ends = kafka.end_offsets(topic)
        committed: dict[int, int] = {}
        deadline = time.monotonic() + 120
        while committed != ends and time.monotonic() < deadline:  # v1 caught up with all 60
            time.sleep(1)
            with contextlib.suppress(CheckpointNotFound):
                offsets = hook.committed_offsets(checkpoint)["offsets"]
                committed = {int(p): o for ps in offsets.values() for p, o in ps[topic].items()}
        assert committed == ends, (committed, ends)
        if traffic == "live":
            producer.start()
        before = _last_batch(checkpoint)
        started = time.monotonic()
        output = dags_test(
            "sparklag_gated_deploy",
            {
                "checkpoint": checkpoint,
                "topics": topic,
                "job_name": "orders",
                "new_version": "v2",
                "run_dir": run_dir,
                "spark_classpath": classpath,
                "kafka_config_id": kafka_conn,
                "thresholds": {"max_lag_records_total": 100000},
            },
            airflow_env(tmp_path),
        )
        elapsed = time.monotonic() - started
        assert run_state(output) == "success", output[-6000:]
        assert "caught up with everything before" in output, output[-6000:]
        log_v2 = Path(run_dir) / "orders-v2.log"
        assert "QUERY_STARTED" in log_v2.read_text()
        assert "QUERY_STOPPED" in (Path(run_dir) / "orders-v1.log").read_text()
        if traffic == "quiet":  # v2 runs and had nothing to do: no batch, and no waiting
            assert _last_batch(checkpoint) == before
            assert "gave up at the deadline" not in output
        after = _last_batch(checkpoint)
        print(f"gated deploy ({traffic}): {elapsed:.1f}s, batches {before} -> {after}")
    finally:
        stop_producing.set()
        hook.close()
        stop_job(run_dir, "orders", timeout=60)


@pytest.mark.airflow_compat
def test_provider_info_lists_importable_modules():
    import importlib

    from airflow_sparklag.airflow.provider_info import get_provider_info

    info = get_provider_info()
    for kind in ("hooks", "triggers", "sensors", "operators"):
        modules = [m for entry in info[kind] for m in entry["python-modules"]]
        assert modules, kind
        for module in modules:
            importlib.import_module(module)


@pytest.mark.parametrize("page", sorted((REPO / "docs" / "operators").glob("*.md")), ids=str)
def test_doc_examples_define_valid_dags(page):
    """Every complete example in the operator pages builds its DAG (needs no running service)."""
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    for code in blocks:
        if "with DAG(" not in code or "providers.apache.spark" in code:
            continue  # fragments, and the SparkSubmitOperator form (provider not installed)
        namespace: dict = {}
        exec(compile(code, str(page), "exec"), namespace)
        assert namespace, page
