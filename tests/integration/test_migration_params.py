"""A migration refuses a parameter it cannot trust before it reads or writes anything.

``bool("False")`` is True and ``now - t < nan`` is always False: a template that renders
``dry_run="False"`` or ``quiet_period="nan"`` must never decide whether a checkpoint is
archived. Each case runs against a real checkpoint (a copy of a sample one on local disk) and
the real Kafka broker, with every other parameter set so that the call WOULD migrate
(``quiet_period=0``): the refusal must leave every byte of the checkpoint as it was, and write
no journal, snapshot or archive. The last test shows the same call with valid values does
move the checkpoint, so these assertions can fail.
"""

from __future__ import annotations

import hashlib
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.errors import InvalidParameter
from airflow_sparklag.migration import Migration, migrate_checkpoint
from airflow_sparklag.session import Session
from airflow_sparklag.snapshot import snapshot_checkpoint

pytestmark = pytest.mark.testbed

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "checkpoints" / "ck35"

BAD_VALUES = [
    ("dry_run", "Ture"),
    ("dry_run", ""),
    ("dry_run", "False"),  # bool("False") is True: text is never taken as a flag
    ("dry_run", 0),
    ("dry_run", None),
    ("force", "Ture"),
    ("force", ""),
    ("force", "true"),
    ("allow_data_loss", "Ture"),
    ("allow_data_loss", ""),
    ("allow_data_loss", 1),
    ("move_sink_log", "Ture"),
    ("move_sink_log", ""),
    ("quiet_period", math.nan),
    ("quiet_period", -60),
    ("quiet_period", "60"),
    ("quiet_period", math.inf),
    ("quiet_period", True),
    ("quiet_period", None),
    ("file_sink_paths", "/data/out/orders"),  # a string would be read as one path per letter
    ("now", math.nan),
]


def _tree(root: Path) -> dict[str, str | None]:
    """Every path under ``root`` (directories and hidden files too) -> sha256 of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else None
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    location = tmp_path / "ck"
    shutil.copytree(SAMPLE, location)
    return location


def _config(kafka: Any) -> dict[str, str]:
    return {"bootstrap.servers": kafka.bootstrap}


@pytest.mark.parametrize("entry", ["migrate_checkpoint", "Migration"])
@pytest.mark.parametrize(("name", "value"), BAD_VALUES, ids=[f"{n}={v!r}" for n, v in BAD_VALUES])
def test_bad_parameter_refused_before_anything_is_touched(
    kafka: Any, checkpoint: Path, tmp_path: Path, entry: str, name: str, value: Any
) -> None:
    archive = tmp_path / "archive"
    before, around = _tree(checkpoint), sorted(p.name for p in tmp_path.iterdir())
    kwargs: dict[str, Any] = {"quiet_period": 0, name: value}
    with pytest.raises(InvalidParameter) as refused:
        if entry == "migrate_checkpoint":
            migrate_checkpoint(str(checkpoint), str(archive), kafka_config=_config(kafka), **kwargs)
        else:
            with Session(kafka_config=_config(kafka)) as session:
                try:
                    Migration(session, str(checkpoint), str(archive), **kwargs).run()
                finally:
                    assert session.backends == [], "a storage backend was opened"
    assert refused.value.parameter == name
    assert str(refused.value).startswith(f"{name}: ")
    assert _tree(checkpoint) == before
    assert not archive.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == around


def test_same_call_with_valid_values_migrates(kafka: Any, checkpoint: Path, tmp_path: Path) -> None:
    before = _tree(checkpoint)
    archive = tmp_path / "archive"
    result = migrate_checkpoint(
        str(checkpoint),
        str(archive),
        kafka_config=_config(kafka),
        quiet_period=0,
        dry_run=False,
        force=False,
        allow_data_loss=False,
        move_sink_log=False,
    )
    assert result.status == "completed"
    assert not checkpoint.exists()
    assert _tree(Path(result.archive_location)) == before
    assert Path(result.journal_path).is_file()
    again = migrate_checkpoint(
        str(checkpoint), str(archive), kafka_config=_config(kafka), quiet_period=0
    )
    assert again.status == "already-completed"
    assert again.to_dict() == {**result.to_dict(), "status": "already-completed"}


INSIDE = [
    ("archive_root", "archive"),  # the run's journal, snapshot and manifest went in first
    ("archive_root", "."),
    ("archive_root", "offsets/../offsets"),  # a directory among offsets/N
    ("snapshot_root", "snapshots"),
]


@pytest.mark.parametrize(("name", "below"), INSIDE, ids=[f"{n}={b}" for n, b in INSIDE])
def test_a_root_inside_the_checkpoint_is_refused_before_anything_is_written(
    kafka: Any, checkpoint: Path, tmp_path: Path, name: str, below: str
) -> None:
    # Before: the migration wrote its journal, snapshot and manifest into the checkpoint, then
    # failed (ArchiveError: "changed since its manifest"), leaving them there.
    before = _tree(checkpoint)
    root = str(checkpoint / below)
    archive, kwargs = (root, {}) if name == "archive_root" else (str(tmp_path / "a"), {name: root})
    with pytest.raises(InvalidParameter, match="is inside the checkpoint") as refused:
        migrate_checkpoint(
            str(checkpoint), archive, kafka_config=_config(kafka), quiet_period=0, **kwargs
        )
    assert refused.value.parameter == name
    with pytest.raises(InvalidParameter, match="is inside the checkpoint"):
        snapshot_checkpoint(str(tmp_path / "x" / ".." / "ck"), root, kafka_config=_config(kafka))
    assert _tree(checkpoint) == before
