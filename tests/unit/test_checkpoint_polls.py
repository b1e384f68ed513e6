"""A reader that polls: one point read per quiet poll, a listing whenever that cannot settle it.

Real sample checkpoints on local storage; a "fresh" reader (a new session's) is the truth every
poll is compared with. The same rules on S3 and HDFS, with a real Spark query, are in
tests/integration/test_polls.py.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from airflow_sparklag.checkpoint import FULL_LISTING_SECONDS, CheckpointReader
from airflow_sparklag.checkpoint_files import CheckpointState
from airflow_sparklag.errors import CheckpointNotFound
from airflow_sparklag.storage.local import LocalStorage

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"


def _copy(sample: str, tmp_path: Path) -> Path:
    target = tmp_path / sample
    shutil.copytree(DATA / sample, target)
    return target


def _settled(location: Path, **options: float) -> tuple[CheckpointReader, LocalStorage]:
    """A reader after the two agreeing listings that let it poll with a point read."""
    storage = LocalStorage()
    reader = CheckpointReader(storage, str(location), **options)  # type: ignore[arg-type]
    reader.read()
    reader.read()
    storage.requests.reset()
    return reader, storage


def _fresh(location: Path) -> CheckpointState:
    return CheckpointReader(LocalStorage(), str(location)).read()


def _poll(reader: CheckpointReader, storage: LocalStorage, **options: object) -> dict[str, int]:
    storage.requests.reset()
    reader.read(**options)  # type: ignore[arg-type]
    return dict(storage.requests.by_operation)


@pytest.mark.parametrize(
    "sample",
    [
        "ckm3.5.9",
        "ckc35",  # continuous mode: epochs are batches, offsets/C+1 comes next
        "ck43v2",  # purged: batches 12-15 left
        "ckn4.3.0",  # offsets v2, named sources
        "cka4.1.4",
    ],
)
def test_quiet_poll_is_one_stat_of_the_next_offsets_file(tmp_path: Path, sample: str) -> None:
    location = _copy(sample, tmp_path)
    reader, storage = _settled(location)
    for _ in range(3):
        state = reader.read()
        assert state == _fresh(location)
    assert storage.requests.by_operation == {"stat": 3}


def test_two_listings_must_agree_before_a_point_read(tmp_path: Path) -> None:
    location = _copy("ckm3.5.9", tmp_path)
    storage = LocalStorage()
    reader = CheckpointReader(storage, str(location))
    reader.read()
    assert _poll(reader, storage) == {"list": 2}  # nothing to compare the first listing with
    assert _poll(reader, storage) == {"stat": 1}


def test_new_batch_is_seen_on_the_next_poll(tmp_path: Path) -> None:
    location = _copy("ckm3.5.9", tmp_path)
    reader, storage = _settled(location)
    # What Spark does: offsets/7 when it plans batch 7 ...
    shutil.copy(location / "offsets" / "6", location / "offsets" / "7")
    assert _poll(reader, storage) == {"stat": 1, "list": 2, "read": 1}
    assert reader.read() == _fresh(location)  # the listing changed: listed once more
    storage.requests.reset()
    state = reader.read()
    assert state.in_flight is not None and state.in_flight.batch_id == 7
    assert storage.requests.by_operation == {"stat": 1}  # of commits/7, the file due next
    # ... then commits/7 when it is done.
    shutil.copy(location / "commits" / "6", location / "commits" / "7")
    assert _poll(reader, storage) == {"stat": 1, "list": 2, "read": 1}
    state = reader.read()
    assert state.committed_batch_id == 7 and state.in_flight is None
    assert state == _fresh(location)


@pytest.mark.parametrize(
    ("sample", "why"),
    [
        ("cka", "async progress tracking: ids 0 3 6, the next one is unknown"),
        ("ck43", "one commit: too little to know the log is regular"),
    ],
)
def test_irregular_logs_are_always_listed(tmp_path: Path, sample: str, why: str) -> None:
    location = _copy(sample, tmp_path)
    reader, storage = _settled(location)
    assert _poll(reader, storage) == {"list": 2}, why
    assert reader.read() == _fresh(location)


def test_offsets_written_ahead_of_commits_are_always_listed(tmp_path: Path) -> None:
    """Async progress tracking can write offsets several batches ahead of the commits."""
    location = _copy("ckm3.5.9", tmp_path)
    for batch_id in (7, 8):
        shutil.copy(location / "offsets" / "6", location / "offsets" / str(batch_id))
    reader, storage = _settled(location)
    assert _poll(reader, storage) == {"list": 2}


def test_reset_purge_and_deletion_are_noticed_at_the_full_listing_bound(tmp_path: Path) -> None:
    location = _copy("ckm3.5.9", tmp_path)
    reader, storage = _settled(location)
    start = time.time()
    # A purge (Spark deletes batches below N - minBatchesToRetain): no point read shows it.
    for name in ("offsets/0", "commits/0"):
        (location / name).unlink()
    assert reader.read(now=start + 1) != _fresh(location)  # documented staleness
    assert reader.read(now=start + FULL_LISTING_SECONDS) == _fresh(location)
    # A reset: the checkpoint deleted and the query restarted on a new one (fewer batches).
    reader.read(now=start + FULL_LISTING_SECONDS + 1)  # settles the purged listing
    shutil.rmtree(location)
    shutil.copytree(DATA / "ckn4.3.0", location)
    assert _poll(reader, storage, now=start + FULL_LISTING_SECONDS + 2) == {"stat": 1}
    later = start + 2 * FULL_LISTING_SECONDS + 1
    assert reader.read(now=later) == _fresh(location)
    # Deleted for good.
    reader.read(now=later + 1)
    shutil.rmtree(location)
    with pytest.raises(CheckpointNotFound):
        reader.read(now=later + 1 + FULL_LISTING_SECONDS)


def test_a_verdict_change_time_passed_since_the_last_listing_is_confirmed_by_one(
    tmp_path: Path,
) -> None:
    location = _copy("ckm3.5.9", tmp_path)
    reader, storage = _settled(location)
    now = time.time()
    change = [now + 30]  # e.g. commits/C's time + max_commit_age_seconds
    assert _poll(reader, storage, now=now + 10, confirm_at=change) == {"stat": 1}
    assert _poll(reader, storage, now=now + 31, confirm_at=change) == {"list": 2}
    # confirmed once: later polls past that time are point reads again
    assert _poll(reader, storage, now=now + 60, confirm_at=change) == {"stat": 1}


def test_full_listing_every_read_when_asked(tmp_path: Path) -> None:
    location = _copy("ckm3.5.9", tmp_path)
    reader, storage = _settled(location, full_listing_seconds=0)
    assert _poll(reader, storage) == {"list": 2}


def test_a_lazy_quiet_poll_returns_the_window_its_reader_holds(tmp_path: Path) -> None:
    """The checks read lazily (monitor): a fresh reader leaves the window's older batches
    unread; a quiet poll of a reader that holds them returns them (they cost nothing), as an
    eager read of the same listing would, for one point read."""
    location = _copy("ckm3.5.9", tmp_path)
    storage = LocalStorage()
    reader = CheckpointReader(storage, str(location))
    for _ in range(2):
        reader.read_history(reader.read(history=5, lazy_history=True))
    storage.requests.reset()
    state = reader.read(history=5, lazy_history=True)
    fresh = CheckpointReader(LocalStorage(), str(location))
    lazy = fresh.read(history=5, lazy_history=True)
    assert len(lazy.unread_history) == 4 and not state.unread_history
    assert state == fresh.read_history(lazy) == fresh.read(history=5)
    assert storage.requests.by_operation == {"stat": 1}
