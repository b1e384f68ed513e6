"""Snapshot and migration through a caller's Session, against the real Kafka broker.

The use cases build no client of their own: every store, checkpoint read and Kafka request goes
through the session they are given, which they leave open (it is the caller's).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.migration import Migration, migrate_checkpoint
from airflow_sparklag.session import Session
from airflow_sparklag.snapshot import load_snapshot, snapshot_checkpoint

pytestmark = pytest.mark.testbed

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "checkpoints" / "ck35"


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    shutil.copytree(SAMPLE, tmp_path / "ck")
    return str(tmp_path / "ck")


def test_snapshot_through_a_session_leaves_it_open(
    kafka: Any, checkpoint: str, tmp_path: Path
) -> None:
    root = str(tmp_path / "snaps")
    with Session(kafka_config={"bootstrap.servers": kafka.bootstrap}) as session:
        result = snapshot_checkpoint(checkpoint, root, session=session)
        assert not session.closed
        assert len(session.backends) == 1  # local disk: one backend for checkpoint and root
        assert result.path is not None
        assert load_snapshot(session.storage(result.path), result.path) == result.snapshot
        assert result.kafka is not None and result.snapshot.kafka_cluster_id
        with pytest.raises(TypeError, match="not both"):
            snapshot_checkpoint(checkpoint, root, session=session, kafka_config={})
    plan = snapshot_checkpoint(checkpoint, root, write=False)  # no session, no Kafka
    assert plan.path is None and plan.kafka is None
    assert plan.snapshot.committed == result.snapshot.committed


def test_migration_through_a_session_leaves_it_open(
    kafka: Any, checkpoint: str, tmp_path: Path
) -> None:
    archive = str(tmp_path / "archive")
    with Session(kafka_config={"bootstrap.servers": kafka.bootstrap}) as session:
        migration = Migration(session, checkpoint, archive, quiet_period=0)
        plan = Migration(session, checkpoint, archive, quiet_period=0, dry_run=True).run()
        assert plan.status == "planned" and plan.steps_done == []
        assert not Path(archive).exists()
        result = migration.run()
        assert not session.closed
        assert result.status == "completed"
        assert result.steps_done == [
            "preflight",
            "snapshot",
            "validated",
            "archiving",
            "archived",
            "completed",
        ]
        with pytest.raises(TypeError, match="not both"):
            migrate_checkpoint(checkpoint, archive, session=session, kafka_config={})
    again = migrate_checkpoint(checkpoint, archive)  # the recorded result needs no Kafka
    assert again.status == "already-completed" and again.archives == result.archives


def test_migration_without_kafka_is_refused_before_writing(checkpoint: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kafka_config"):
        migrate_checkpoint(checkpoint, str(tmp_path / "archive"), quiet_period=0)
    assert not (tmp_path / "archive").exists()
