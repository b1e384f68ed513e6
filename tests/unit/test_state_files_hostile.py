"""The files our own operations write and read back (migration journal, archive manifest,
snapshot): a damaged or hostile one is a typed error naming it, never a bare traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_sparklag.archive import _read_manifest
from airflow_sparklag.errors import ArchiveError, SnapshotCorrupt, SparkLagError
from airflow_sparklag.migration import _Journal
from airflow_sparklag.snapshot import Snapshot
from airflow_sparklag.storage.local import LocalStorage

HOSTILE = [
    ("empty", b""),
    ("not utf-8", b"\xff\xfe\x00"),
    ("json array", b"[1, 2, 3]"),
    ("json string", b'"sparklag-migration-journal"'),
    ("nested deep", b"[" * 100_000 + b"]" * 100_000),
    ("5,000 digits", b'{"format": ' + b"9" * 5000 + b"}"),
    ("truncated", b'{"format": "sparklag-'),
    ("null", b"null"),
]
IDS = [case for case, _ in HOSTILE]


@pytest.mark.parametrize(("case", "data"), HOSTILE, ids=IDS)
def test_damaged_journal_is_named(tmp_path: Path, case: str, data: bytes) -> None:
    path = tmp_path / "journal.json"
    path.write_bytes(data)
    with pytest.raises(SparkLagError) as raised:
        _Journal.load(LocalStorage(), str(path))
    assert str(path) in str(raised.value) and "not a migration journal" in str(raised.value)


@pytest.mark.parametrize(
    ("case", "data"),
    [
        *HOSTILE,
        ("no objects", b'{"format": "sparklag-archive-manifest"}'),
        ("objects not a list", b'{"format": "sparklag-archive-manifest", "objects": 5}'),
        (
            "entry lacks size",
            b'{"format": "sparklag-archive-manifest", "objects": [{"path": "a"}]}',
        ),
    ],
)
def test_damaged_manifest_is_named(case: str, data: bytes) -> None:
    with pytest.raises(ArchiveError) as raised:
        _read_manifest(data, "s3a://b/archive/manifest.json")
    assert "s3a://b/archive/manifest.json: not an archive manifest" in str(raised.value)


@pytest.mark.parametrize(("case", "data"), HOSTILE, ids=IDS)
def test_damaged_snapshot_is_named(case: str, data: bytes) -> None:
    with pytest.raises(SnapshotCorrupt) as raised:
        Snapshot.from_json(data, where="s3a://b/snapshots/orders.json")
    assert "s3a://b/snapshots/orders.json" in str(raised.value)
    assert len(str(raised.value)) < 400
