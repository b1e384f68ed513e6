"""End to end: a real PySpark job v1 is stopped (crashed mid-batch, or stopped gracefully),
migrated, and job v2 (changed code, new checkpoint) starts from the snapshot's offsets while the
producer keeps writing. Every record produced must be in the union of the outputs; duplicates
may only come from the in-flight batch the migration reports.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.errors import JobStillRunning, SinkLogConflict
from airflow_sparklag.migration import migrate_checkpoint
from airflow_sparklag.session import Session
from airflow_sparklag.storage import open_storage
from testbed import jobs

pytestmark = pytest.mark.testbed


class Producer:
    """Writes `batch` records every `pause` seconds to `topic` until stopped."""

    def __init__(self, kafka, topic: str, batch: int = 15, pause: float = 0.3) -> None:
        self.kafka, self.topic, self.batch, self.pause = kafka, topic, batch, pause
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sent += self.kafka.produce(self.topic, self.batch, prefix="e2e", start=self.sent)
            time.sleep(self.pause)

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _produced_keys(kafka, topic: str) -> set[tuple[int, int]]:
    return {(p, o) for p, end in kafka.end_offsets(topic).items() for o in range(end)}


def _replayed_keys(result) -> set[tuple[int, int]]:
    keys = set()
    for topics in result.replay_ranges.values():
        for parts in topics.values():
            for p, span in parts.items():
                keys.update((int(p), o) for o in range(span["from"], span["to"]))
    return keys


def _wait_caught_up(kafka, topic: str, location: str, storage_options: dict, query) -> None:
    """Until v2's last committed offsets equal Kafka's log end on every partition."""
    reader = CheckpointReader(Session(**storage_options).storage(location), location)

    def caught_up() -> bool:
        if query.exception() is not None:
            raise RuntimeError(f"v2 failed: {query.exception()}")
        try:
            state = reader.read(history=1)
        except Exception:
            return False
        if state.committed is None:
            return False
        offsets = state.committed.sources[0].kafka or {}
        return {p: o for p, o in offsets.get(topic, {}).items()} == kafka.end_offsets(topic)

    jobs.wait_until(caught_up, 240, "v2 caught up with the producer")


def _start_v2(spark, kafka, topic, starting: str, checkpoint: str, output: str):
    from pyspark.sql import functions as F

    df = jobs.select_value(
        jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic], starting=starting)
    ).withColumn("job_version", F.lit("v2"))  # the changed code
    return jobs.start_query(df, checkpoint, sink="parquet", path=output)


def _keys(rows) -> list[tuple[int, int]]:
    return [(int(r["partition"]), int(r["offset"])) for r in rows]


def test_crash_mid_batch_on_local_disk_then_v2_from_snapshot(spark, kafka, topic, tmp_path):
    """v1 (foreachBatch) writes a batch's rows, then dies before committing it."""
    out1, out2 = str(tmp_path / "out-v1"), str(tmp_path / "out-v2")
    ck1, ck2 = str(tmp_path / "ck-v1"), str(tmp_path / "ck-v2")
    crash = tmp_path / "crash-now"

    def write_then_maybe_crash(batch_df, batch_id):  # runs in the driver
        batch_df.select("partition", "offset", "value").write.mode("append").parquet(out1)
        if crash.exists():
            raise RuntimeError(f"simulated crash in batch {batch_id} after its output")

    v1 = v2 = None
    with Producer(kafka, topic) as producer:
        try:
            df = jobs.select_value(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]))
            v1 = jobs.start_query(
                df, ck1, sink="foreachBatch", foreach_batch=write_then_maybe_crash
            )
            jobs.wait_for_batches(v1, 3)
            with pytest.raises(JobStillRunning, match="looks alive"):
                migrate_checkpoint(
                    ck1,
                    str(tmp_path / "archive"),
                    kafka_config={"bootstrap.servers": kafka.bootstrap},
                )
            crash.touch()
            jobs.wait_until(lambda: not v1.isActive, 120, "v1 crashed")
            assert "simulated crash" in str(v1.exception())
            state = CheckpointReader(open_storage(ck1), ck1).read(history=1)
            assert state.in_flight is not None, "the crash left no batch in flight"

            time.sleep(2)
            result = migrate_checkpoint(
                ck1,
                str(tmp_path / "archive"),
                kafka_config={"bootstrap.servers": kafka.bootstrap},
                quiet_period=2,
            )
            assert result.status == "completed"
            assert result.in_flight_batch_id == state.in_flight.batch_id
            assert result.replay_ranges, "the in-flight batch's range must be reported"
            assert not Path(ck1).exists() and Path(result.archive_location, "offsets").exists()

            v2 = _start_v2(spark, kafka, topic, result.starting_offsets_json(), ck2, out2)
            jobs.wait_for_batches(v2, 1)
        finally:
            jobs.stop_quietly(v1)
    try:
        _wait_caught_up(kafka, topic, ck2, {}, v2)
    finally:
        jobs.stop_quietly(v2)

    produced = _produced_keys(kafka, topic)
    assert len(produced) == producer.sent
    v1_keys = _keys(spark.read.parquet(out1).collect())
    v2_rows = spark.read.parquet(out2).collect()
    assert {r["job_version"] for r in v2_rows} == {"v2"}
    v2_keys = _keys(v2_rows)
    assert len(set(v1_keys)) == len(v1_keys) and len(set(v2_keys)) == len(v2_keys)
    assert set(v1_keys) | set(v2_keys) == produced, "records lost"
    duplicates = set(v1_keys) & set(v2_keys)
    # v1 wrote the whole in-flight batch before dying: exactly that range is read twice.
    assert duplicates == _replayed_keys(result)


def test_graceful_stop_on_s3_with_file_sink_trap(spark, kafka, topic, s3):
    base = f"s3a://checkpoints/e2e-{uuid.uuid4().hex[:8]}"
    ck1, ck2, output = f"{base}/ck-v1", f"{base}/ck-v2", f"{base}/out"
    archive = f"{base}/archive"
    common = {
        "kafka_config": {"bootstrap.servers": kafka.bootstrap},
        "s3_options": s3.options,
    }
    v1 = v2 = None
    with Producer(kafka, topic) as producer:
        try:
            df = jobs.select_value(jobs.kafka_stream(spark, kafka.bootstrap, topics=[topic]))
            v1 = jobs.start_query(df, ck1, sink="parquet", path=output)
            jobs.wait_for_batches(v1, 2)
            plan = migrate_checkpoint(ck1, archive, dry_run=True, **common)
            assert plan.refusals and plan.refusals[0].startswith("JobStillRunning")
            v1.stop()  # graceful
            time.sleep(2)
            # Same output path for v2: its sink log would make v2 skip batches 0..N.
            with pytest.raises(SinkLogConflict, match="SKIP"):
                migrate_checkpoint(ck1, archive, quiet_period=2, file_sink_paths=[output], **common)
            result = migrate_checkpoint(
                ck1,
                archive,
                quiet_period=2,
                file_sink_paths=[output],
                move_sink_log=True,
                **common,
            )
            assert result.status == "completed"
            assert [a["method"] for a in result.archives] == ["copy", "copy"]
            v2 = _start_v2(spark, kafka, topic, result.starting_offsets_json(), ck2, output)
            jobs.wait_for_batches(v2, 1)
        finally:
            jobs.stop_quietly(v1)
    try:
        _wait_caught_up(kafka, topic, ck2, {"s3_options": s3.options}, v2)
    finally:
        jobs.stop_quietly(v2)

    produced = _produced_keys(kafka, topic)
    assert len(produced) == producer.sent
    # Every data file, old and new (the glob bypasses the sink log on purpose).
    rows = (
        spark.read.option("mergeSchema", "true")
        .parquet(f"{output}/part-*.parquet")
        .select("partition", "offset")
        .collect()
    )
    keys = _keys(rows)
    assert set(keys) == produced, "records lost"
    duplicates = {k for k, n in Counter(keys).items() if n > 1}
    assert duplicates <= _replayed_keys(result)
