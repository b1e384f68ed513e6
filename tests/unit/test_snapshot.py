"""Snapshot documents, starting offsets, migration validation rules and the archive procedure.

States are built from the reader's own dataclasses (no hand-made checkpoint files); Kafka views
are KafkaSnapshot values. The real components are exercised in tests/integration.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_sparklag.archive import archive_tree
from airflow_sparklag.checkpoint_files import BatchOffsets, CheckpointState, SourceOffset
from airflow_sparklag.errors import (
    ArchiveError,
    DataLossRefused,
    NothingCommitted,
    SinkLogConflict,
    SnapshotCorrupt,
    StorageAlreadyExists,
    TopicGone,
)
from airflow_sparklag.kafka import KafkaSnapshot, PartitionOffsets
from airflow_sparklag.migration import Migration, MigrationOptions, _Run, _validate
from airflow_sparklag.session import Session
from airflow_sparklag.snapshot import (
    Snapshot,
    build_snapshot,
    load_snapshot,
    save_snapshot,
    snapshot_path,
)
from airflow_sparklag.storage.local import LocalStorage

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def _batch(batch_id: int, offsets: dict[str, dict[int, int]], modified: float) -> BatchOffsets:
    raw = json.dumps({t: {str(p): o for p, o in ps.items()} for t, ps in offsets.items()})
    return BatchOffsets(
        batch_id=batch_id,
        version=1,
        batch_timestamp_ms=int(modified * 1000),
        watermark_ms=0,
        conf={},
        sources=(SourceOffset("0", "kafka", offsets, raw),),
        modified=modified,
    )


def _state(in_flight: bool = True) -> CheckpointState:
    committed = _batch(7, {"orders": {0: 100, 1: 90}}, NOW - 30)
    planned = _batch(8, {"orders": {0: 120, 1: 90}}, NOW - 20) if in_flight else None
    return CheckpointState(
        location="s3a://AKIA:secret@bucket/ck/orders",
        query_id="q-1",
        committed_batch_id=7,
        committed=committed,
        commit_modified=NOW - 25,
        in_flight=planned,
        history=(committed,),
        offsets_ids=(7, 8) if in_flight else (7,),
        commit_ids=(7,),
        continuous=False,
    )


def _kafka(parts: dict[int, tuple[int, int]], topic: str = "orders") -> KafkaSnapshot:
    return KafkaSnapshot(
        partitions={topic: {p: PartitionOffsets(s, e, None) for p, (s, e) in parts.items()}},
        missing_topics=frozenset(),
        fetched_at=NOW,
        cluster_id="cluster-a",
    )


def test_snapshot_records_committed_not_in_flight_and_no_secrets():
    snap = build_snapshot(_state(), cluster_id="cluster-a", now=NOW)
    document = snap.to_dict()
    assert document["committed_batch"]["batch_id"] == 7
    assert document["committed_batch"]["sources"][0]["offsets"] == {"orders": {"0": 100, "1": 90}}
    assert document["in_flight_batch"]["batch_id"] == 8
    assert document["checkpoint_location"] == "s3a://bucket/ck/orders"
    assert "secret" not in json.dumps(document)
    assert document["snapshot_time"] == "2026-01-01T00:00:00.000000Z"
    assert document["checksum"]["algorithm"] == "sha256"
    assert snap.starting_offsets() == {"orders": {"0": 100, "1": 90}}
    assert snap.replay_ranges() == {"0": {"orders": {"0": {"from": 100, "to": 120}}}}


def test_round_trip_and_tamper_detection():
    snap = build_snapshot(_state(), cluster_id="c", now=NOW)
    assert Snapshot.from_json(snap.to_json()) == snap
    tampered = json.loads(snap.to_json())
    tampered["committed_batch"]["sources"][0]["offsets"]["orders"]["0"] = 101
    with pytest.raises(SnapshotCorrupt, match="checksum mismatch"):
        Snapshot.from_dict(tampered)
    with pytest.raises(SnapshotCorrupt, match="not a JSON"):
        Snapshot.from_json(b"{trunc")


def test_nothing_committed_is_refused():
    state = _state()
    empty = CheckpointState(**{**state.__dict__, "committed": None, "committed_batch_id": None})
    with pytest.raises(NothingCommitted, match="batch 8 is planned but not committed"):
        build_snapshot(empty, now=NOW)


def test_starting_offsets_name_every_partition_and_timestamps():
    timestamps = {("orders", 0): 1_700_000_000_000, ("orders", 1): None}
    snap = build_snapshot(
        _state(), record_timestamps={"0": timestamps}, kafka_fetched_at=NOW, now=NOW
    )
    assert snap.starting_offsets(_kafka({0: (0, 130), 1: (0, 90), 2: (0, 5)})) == {
        "orders": {"0": 100, "1": 90, "2": -2}
    }
    assert snap.starting_offsets_by_timestamp() == {
        "orders": {"0": 1_700_000_000_000, "1": int(NOW * 1000)}
    }


def test_saved_once_read_back_and_never_overwritten(tmp_path: Path):
    storage = LocalStorage()
    snap = build_snapshot(_state(), now=NOW)
    path = snapshot_path(str(tmp_path), snap)
    assert path == f"{tmp_path}/q-1/7-20260101T000000.000000Z.json"
    save_snapshot(snap, storage, path)
    assert load_snapshot(storage, path) == snap
    with pytest.raises(StorageAlreadyExists):
        save_snapshot(snap, storage, path)


# -- migration validation rules ---------------------------------------------------------------


def _validate_with(
    kafka: KafkaSnapshot, *, allow_data_loss: bool = False, dry_run=False, clusters=None
):
    snap = build_snapshot(_state(), cluster_id="cluster-a", now=NOW, clusters=clusters)
    run = _Run(None, dry_run)  # no journal: _validate uses only the refusals
    outcome = _validate(snap, {"0": kafka}, MigrationOptions(allow_data_loss=allow_data_loss), run)
    return outcome, run


def test_validate_refuses_a_source_snapshotted_on_another_cluster():
    kafka = _kafka({0: (0, 130), 1: (0, 95)})  # cluster-a
    # recorded per source (cluster-b), it outranks the document's main cluster id
    with pytest.raises(TopicGone, match=r"source 0: snapshot was taken on Kafka cluster "
                       r"cluster-b \(b:9092\), the configured cluster is cluster-a"):  # fmt: skip
        _validate_with(kafka, clusters={"0": ("b:9092", "cluster-b")})
    (starting, _, _), _ = _validate_with(kafka, clusters={"0": ("a:9092", "cluster-a")})
    assert starting == {"0": {"orders": {"0": 100, "1": 90}}}
    # an older snapshot (no per-source cluster): the document's cluster id decides
    other = KafkaSnapshot(kafka.partitions, frozenset(), NOW, "cluster-z")
    with pytest.raises(TopicGone, match="source 0: snapshot was taken on Kafka cluster cluster-a,"):
        _validate_with(other)


def test_each_source_records_its_cluster_and_older_documents_still_read():
    snap = build_snapshot(_state(), cluster_id="c", now=NOW, clusters={"0": ("b:9092", "cb")})
    document = snap.to_dict()
    assert document["committed_batch"]["sources"][0]["bootstrap_servers"] == "b:9092"
    assert document["committed_batch"]["sources"][0]["cluster_id"] == "cb"
    assert Snapshot.from_json(snap.to_json()).committed.source("0").cluster_id == "cb"
    # A document written before sources recorded their cluster: same checksum, still valid.
    older = build_snapshot(_state(), cluster_id="c", now=NOW).to_dict()
    assert "cluster_id" not in older["committed_batch"]["sources"][0]
    read = Snapshot.from_dict(older)
    assert read.committed.source("0").cluster_id is None and read.kafka_cluster_id == "c"


def test_validate_partitions_added_start_from_earliest():
    (starting, added, lost), _ = _validate_with(_kafka({0: (0, 130), 1: (0, 95), 2: (0, 4)}))
    assert starting == {"0": {"orders": {"0": 100, "1": 90, "2": -2}}}
    assert added == {"orders": [2]} and lost == {}


def test_validate_data_loss_refused_or_accepted_from_log_start():
    kafka = _kafka({0: (110, 130), 1: (0, 95)})
    with pytest.raises(DataLossRefused, match=r"orders\[0\]: 10 records"):
        _validate_with(kafka)
    (starting, _, lost), _ = _validate_with(kafka, allow_data_loss=True)
    assert starting["0"]["orders"]["0"] == 110 and lost == {"orders": {"0": 10}}


def test_validate_topic_gone_and_recreated():
    gone = KafkaSnapshot({}, frozenset({"orders"}), NOW, "cluster-a")
    with pytest.raises(TopicGone, match="no longer exists"):
        _validate_with(gone)
    with pytest.raises(TopicGone, match="re-created"):
        _validate_with(_kafka({0: (0, 5), 1: (0, 5)}))
    _, run = _validate_with(gone, dry_run=True)
    assert run.refusals and run.refusals[0].startswith("TopicGone")


def test_sink_log_detection(tmp_path: Path):
    sink = tmp_path / "out"
    (sink / "_spark_metadata").mkdir(parents=True)
    for name in ("0", "1", "9.compact", "10", ".10.crc"):
        (sink / "_spark_metadata" / name).write_text("v1")
    paths = [str(sink), str(tmp_path / "new")]
    with Session() as session:
        for move, action in ((False, "refused"), (True, "move aside to ")):
            migration = Migration(
                session, str(tmp_path / "ck"), str(tmp_path / "a"), file_sink_paths=paths,
                move_sink_log=move,
            )  # fmt: skip
            run = _Run(migration._new_journal(), dry_run=True)
            found = migration._checked_sink_logs(run)
            assert [f["latest_batch_id"] for f in found] == [10, None]
            assert found[0]["action"].startswith(action)
            assert found[1]["action"] == "none (empty log)"
            assert [r.split(":")[0] for r in run.refusals] == ["SinkLogConflict"] * (not move)
    assert SinkLogConflict.__mro__[1].__name__ == "MigrationRefused"


# -- archive ---------------------------------------------------------------------------------


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _make_checkpoint(root: Path) -> dict[str, bytes]:
    files = {"metadata": b'{"id":"q"}', "offsets/0": b"v1\n{}\n{}", "offsets/.0.crc": b"x"}
    files["state/0/1/1.delta"] = b"\x00" * 300
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return _tree(root)


def test_archive_rename_on_local_disk(tmp_path: Path):
    source, target = tmp_path / "ck", tmp_path / "archive" / "ck"
    before = _make_checkpoint(source)
    report = archive_tree(
        LocalStorage(), str(source), str(target), manifest_path=str(tmp_path / "m.json")
    )
    assert report.method == "rename" and report.objects == 4
    assert not source.exists() and _tree(target) == before


def test_archive_of_a_symlinked_checkpoint_moves_its_directory(tmp_path: Path):
    # Was: the link alone was renamed into the archive (dangling there: "link -> ck"), the
    # verification failed ("commits/0: missing from the archive") and the location was gone.
    before = _make_checkpoint(tmp_path / "ck")
    (tmp_path / "link").symlink_to("ck")
    target = tmp_path / "archive" / "ck"
    report = archive_tree(
        LocalStorage(), str(tmp_path / "link"), str(target), manifest_path=str(tmp_path / "m")
    )
    assert report.method == "rename" and not target.is_symlink() and _tree(target) == before
    assert not (tmp_path / "ck").exists()


def test_archive_copy_resumes_after_a_crash_and_never_deletes_unverified(tmp_path: Path):
    source, target = tmp_path / "ck", tmp_path / "other" / "ck"
    before = _make_checkpoint(source)
    manifest = str(tmp_path / "m.json")
    # Different Storage objects: no rename, copy + verify + delete.
    src_store, dst_store = LocalStorage(), LocalStorage()

    class Crash(Exception):
        pass

    deleted = []

    def crash_after_one_delete(step: str) -> None:
        if step == "archive:deleted-one":
            deleted.append(step)
            raise Crash

    with pytest.raises(Crash):
        archive_tree(
            src_store,
            str(source),
            str(target),
            manifest_path=manifest,
            target=dst_store,
            fault=crash_after_one_delete,
        )
    assert len(src_store.walk(str(source))) == 3 and _tree(target) == before
    # A copy damaged meanwhile is caught before anything else is deleted.
    (target / "metadata").write_bytes(b"garbage")
    with pytest.raises(ArchiveError, match="differs"):
        archive_tree(src_store, str(source), str(target), manifest_path=manifest, target=dst_store)
    assert len(src_store.walk(str(source))) == 3
    (target / "metadata").write_bytes(before["metadata"])
    report = archive_tree(
        src_store, str(source), str(target), manifest_path=manifest, target=dst_store
    )
    assert report.method == "copy" and not source.exists() and _tree(target) == before


def test_archive_refuses_a_source_that_changed(tmp_path: Path):
    source = tmp_path / "ck"
    _make_checkpoint(source)
    manifest = str(tmp_path / "m.json")
    store = LocalStorage()

    def grow(step: str) -> None:
        (source / "offsets" / "1").write_text("v1")

    with pytest.raises(ArchiveError, match="job running again"):
        archive_tree(store, str(source), str(tmp_path / "a"), manifest_path=manifest, fault=grow)
    assert (source / "metadata").exists()
