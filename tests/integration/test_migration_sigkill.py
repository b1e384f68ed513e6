"""Migration after `kill -9` in the middle of a batch.

Job v1 (dags/jobs/kafka_stream_job.py, parquet file sink) runs as its own process while a producer
keeps writing; each of its batches is slowed down (``--batch-sleep``) so that the test can SIGKILL
the whole process group (Python driver and JVM) while a batch is planned (offsets/L) but not
committed (no commits/L). The checkpoint is then migrated and v2 starts on a new checkpoint and a
new output path from the migration's offsets. Every produced record must be in the union of the
two outputs; a record may be there twice only inside the replay range the migration reports.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.migration import migrate_checkpoint
from airflow_sparklag.storage import open_storage
from testbed import jobs
from testbed.paths import jars

pytestmark = pytest.mark.testbed

PROCESS_CONTROL = Path(__file__).resolve().parents[2] / "dags" / "jobs" / "process_control.py"
PAUSE = 1.5  # seconds each task of a v1 batch sleeps (3 partitions, local[1]: >= 4.5 s a batch)
KILL_AFTER = 2.0  # seconds after the in-flight batch is first seen: mid-way through its tasks


def _process_control():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("sigkill_process_control", PROCESS_CONTROL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Producer:
    """A thread writing `batch` records (values sk-0, sk-1, ...) every `pause` seconds."""

    def __init__(self, kafka, topic: str, batch: int = 12, pause: float = 0.3) -> None:
        self.kafka, self.topic, self.batch, self.pause = kafka, topic, batch, pause
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.sent += self.kafka.produce(
                    self.topic, self.batch, prefix="sk", start=self.sent
                )
                self._stop.wait(self.pause)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)
        if self.error is not None:
            raise RuntimeError(f"producer failed: {self.error!r}") from self.error


def _batch_ids(directory: Path) -> list[int]:
    try:
        return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return []


def _processes() -> dict[int, tuple[str, int, int]]:
    """pid -> (state, ppid, pgid) of every process on the machine."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        found[int(entry.name)] = (fields[0], int(fields[1]), int(fields[2]))
    return found


def _descendants(pid: int) -> dict[int, int]:
    """pid -> pgid of `pid` and every process below it."""
    table = _processes()
    found, todo = {}, [pid]
    while todo:
        current = todo.pop()
        if current in table and current not in found:
            found[current] = table[current][2]
            todo.extend(p for p, (_, ppid, _) in table.items() if ppid == current)
    return found


def _running(pids) -> list[int]:  # type: ignore[no-untyped-def]
    table = _processes()
    return [p for p in pids if p in table and table[p][0] != "Z"]


def _keys(rows) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    return [(int(r["partition"]), int(r["offset"])) for r in rows]


def _span(start: dict[int, int], end: dict[int, int]) -> set[tuple[int, int]]:
    return {(p, o) for p, stop in end.items() for o in range(start.get(p, 0), stop)}


def test_sigkill_mid_batch_then_migrate_and_v2_loses_nothing(spark, kafka, topic, tmp_path):
    control = _process_control()
    run_dir = str(tmp_path / "run")
    ck1, ck2 = tmp_path / "ck-v1", tmp_path / "ck-v2"
    out1, out2 = tmp_path / "out-v1", tmp_path / "out-v2"
    classpath = ":".join(jars("spark-kafka"))
    kafka_config = {"bootstrap.servers": kafka.bootstrap}
    producer = Producer(kafka, topic)
    pid: int | None = None
    tree: dict[int, int] = {}
    v2 = None
    try:
        producer.start()
        pid = control.start_job(
            run_dir,
            "sigkill",
            "v1",
            [
                *("--bootstrap", kafka.bootstrap, "--topics", topic),
                *("--checkpoint", str(ck1), "--sink", "parquet", "--output", str(out1)),
                *("--classpath", classpath, "--batch-sleep", str(PAUSE)),
            ],
        )
        jobs.wait_until(
            lambda: len(_batch_ids(ck1 / "commits")) >= 3, 180, "v1 committed 3 batches"
        )

        # Wait for a batch in flight, let its tasks get going, then kill -9 the whole group.
        seen: tuple[int, float] | None = None
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, "no batch in flight long enough to kill v1 in"
            offsets, commits = _batch_ids(ck1 / "offsets"), _batch_ids(ck1 / "commits")
            latest = offsets[-1] if offsets else -1
            if latest > (commits[-1] if commits else -1):
                if seen is None or seen[0] != latest:
                    seen = (latest, time.monotonic())
                elif time.monotonic() - seen[1] >= KILL_AFTER:
                    tree = _descendants(pid)
                    os.killpg(pid, signal.SIGKILL)
                    break
            else:
                seen = None
            time.sleep(0.1)
        killed_at = time.monotonic()
        jobs.wait_until(
            lambda: not _running([p for p, g in tree.items() if g == pid]),
            30,
            "v1's process group (driver and JVM) gone",
        )
        others = _running([p for p, g in tree.items() if g != pid])
        print(f"\nafter the kill, still running outside v1's group: {others}")
        assert "QUERY_STOPPED" not in Path(control.log_file(run_dir, "sigkill", "v1")).read_text()

        # The checkpoint really has an uncommitted batch in flight.
        state = CheckpointReader(open_storage(str(ck1)), str(ck1)).read(history=1)
        assert state.in_flight is not None, "the kill left no batch in flight"
        assert state.in_flight.batch_id == seen[0] > state.committed_batch_id >= 2
        assert not (ck1 / "commits" / str(seen[0])).exists()
        ((committed_source,), (planned_source,)) = (
            state.committed.sources,
            state.in_flight.sources,
        )
        committed = dict(committed_source.kafka[topic])
        planned = dict(planned_source.kafka[topic])
        expected_replay = {
            committed_source.source_id: {
                topic: {
                    str(p): {"from": committed.get(p, 0), "to": end}
                    for p, end in sorted(planned.items())
                    if end > committed.get(p, 0)
                }
            }
        }
        replay_keys = _span(committed, planned)
        assert replay_keys, "the killed batch planned to read nothing"
        sink_batches = _batch_ids(out1 / "_spark_metadata")
        logged = "".join(
            (out1 / "_spark_metadata" / str(b)).read_text(errors="replace") for b in sink_batches
        )
        orphans = sorted(p.name for p in out1.glob("part-*") if p.name not in logged)
        print(
            f"killed v1 in batch {seen[0]} (committed {state.committed_batch_id}); sink log "
            f"batches {sink_batches}; data files outside the sink log: {orphans}"
        )

        # The old output path still has its sink log: reusing it would skip v2's first batches.
        plan = migrate_checkpoint(
            str(ck1),
            str(tmp_path / "archive"),
            kafka_config=kafka_config,
            quiet_period=0,
            file_sink_paths=[str(out1)],
            dry_run=True,
        )
        assert any(r.startswith("SinkLogConflict") for r in plan.refusals), plan.refusals

        result = migrate_checkpoint(
            str(ck1),
            str(tmp_path / "archive"),
            kafka_config=kafka_config,
            quiet_period=0,
            snapshot_root=str(tmp_path / "snapshots"),
            file_sink_paths=[str(out2)],
        )
        assert result.status == "completed"
        assert result.committed_batch_id == state.committed_batch_id
        assert result.in_flight_batch_id == seen[0]
        assert result.replay_ranges == expected_replay
        assert result.sink_logs[0]["latest_batch_id"] is None
        starting = {
            int(p): o for p, o in result.starting_offsets[committed_source.source_id][topic].items()
        }
        assert starting == {p: committed.get(p, 0) for p in kafka.end_offsets(topic)}
        assert not ck1.exists() and (Path(result.archive_location) / "offsets").is_dir()

        df = jobs.select_value(
            jobs.kafka_stream(
                spark, kafka.bootstrap, topics=[topic], starting=result.starting_offsets_json()
            )
        )
        v2 = jobs.start_query(df, str(ck2), sink="parquet", path=str(out2))
        jobs.wait_for_batches(v2, 1, timeout=120)
        producer.stop()
        ends = kafka.end_offsets(topic)
        reader = CheckpointReader(open_storage(str(ck2)), str(ck2))

        def caught_up() -> bool:
            if v2.exception() is not None:
                raise RuntimeError(f"v2 failed: {v2.exception()}")
            latest = reader.read(history=1).committed
            return latest is not None and dict(latest.sources[0].kafka.get(topic, {})) == ends

        jobs.wait_until(caught_up, 120, "v2 caught up with the log end")
        v2.stop()
        print(f"kill to v2 caught up: {time.monotonic() - killed_at:.1f}s")
    finally:
        with contextlib.suppress(RuntimeError):
            producer.stop()
        jobs.stop_quietly(v2)
        pid_path = control.pid_file(run_dir, "sigkill")
        if pid is None and pid_path.exists():  # start_job gave up waiting for the query
            pid = int(pid_path.read_text())
        if pid is not None:
            tree = tree or _descendants(pid)
            tree.setdefault(pid, pid)
        # v1's group, and any group below it (PySpark's worker daemon makes its own), while
        # one of the processes recorded in it still runs.
        for group in sorted(set(tree.values())):
            if _running([p for p, g in tree.items() if g == group]):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)

    # Count with Spark: the parquet reads go through each sink's _spark_metadata log.
    produced = {f"sk-{i}" for i in range(producer.sent)}
    assert sum(ends.values()) == producer.sent
    v1_rows = spark.read.parquet(str(out1)).select("partition", "offset", "value").collect()
    v2_rows = spark.read.parquet(str(out2)).select("partition", "offset", "value").collect()
    v1_keys, v2_keys = _keys(v1_rows), _keys(v2_rows)
    assert not [k for k, n in Counter(v1_keys).items() if n > 1], "v1 wrote a record twice"
    assert not [k for k, n in Counter(v2_keys).items() if n > 1], "v2 wrote a record twice"
    values = {r["value"] for r in v1_rows} | {r["value"] for r in v2_rows}
    assert values == produced, f"lost: {sorted(produced - values)[:20]}"
    assert set(v2_keys) == _span(committed, ends)
    duplicates = set(v1_keys) & set(v2_keys)
    assert duplicates <= replay_keys
    # The file sink commits a batch to its log all at once (before commits/N): either the killed
    # batch is in v1's readable output as a whole, or not at all.
    if seen[0] in sink_batches:
        assert duplicates == replay_keys and set(v1_keys) == _span({}, planned)
    else:
        assert not duplicates and set(v1_keys) == _span({}, committed)
    print(
        f"produced {producer.sent}; v1 {len(v1_keys)} rows, v2 {len(v2_keys)} rows, "
        f"read twice {len(duplicates)} (replay range {len(replay_keys)})"
    )
