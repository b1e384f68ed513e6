"""`sparklag status --prefix`: discovery, JSON for every checkpoint found, usage errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_sparklag import cli
from airflow_sparklag.model.verdict import EXIT_CHECK_FAILED, EXIT_USAGE, Health

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
KAFKA = ["--bootstrap-servers", "127.0.0.1:1"]  # never contacted: no Kafka source in the samples


def test_status_prefix_checks_every_checkpoint_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(12):
        shutil.copytree(DATA / "ckm3.5.9", tmp_path / f"team-{i % 3}" / f"job-{i:02d}")
    code = cli.main(["status", "--prefix", str(tmp_path), "--json", *KAFKA])
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    results = document["results"]
    assert len(results) == 12 and document["summary"]["jobs"] == 12
    assert document["summary"]["health"] == {"UNKNOWN": 12}
    assert [r["location"] for r in results] == sorted(r["location"] for r in results)
    assert code == Health.UNKNOWN.exit_code  # no Kafka source: UNKNOWN, not a failure
    # stderr is not a terminal here: no progress line (it would clutter logs and pipes)
    assert "checkpoints" not in captured.err


def test_status_no_progress_and_nothing_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["status", "--prefix", str(tmp_path), "--no-progress", *KAFKA])
    assert code == EXIT_CHECK_FAILED
    assert "no checkpoint found under" in capsys.readouterr().err


def test_status_needs_locations_or_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["status", *KAFKA]) == EXIT_USAGE == 64
    assert "give checkpoint locations or --prefix" in capsys.readouterr().err


def test_several_jobs_compact_view_in_natural_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("job10", "job2", "job1"):
        shutil.copytree(DATA / "ckm3.5.9", tmp_path / name)
    code = cli.main(["status", "--prefix", str(tmp_path), *KAFKA])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == Health.UNKNOWN.exit_code
    assert lines[0].split()[:2] == ["JOB", "HEALTH"]
    assert [line.split()[0].rsplit("/", 1)[-1] for line in lines[1:4]] == ["job1", "job2", "job10"]
    assert lines[4].startswith("3 jobs (3 UNKNOWN); total lag 0 records")
