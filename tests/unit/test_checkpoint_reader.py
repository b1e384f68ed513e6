"""CheckpointReader on the real sample checkpoints (local storage), plus damaged copies."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.errors import CheckpointCorrupt, CheckpointNotFound
from airflow_sparklag.storage import ObjectInfo
from airflow_sparklag.storage.local import LocalStorage

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"


def _reader(location: Path | str) -> tuple[CheckpointReader, LocalStorage]:
    storage = LocalStorage()
    return CheckpointReader(storage, str(location)), storage


def _copy(sample: str, tmp_path: Path) -> Path:
    target = tmp_path / sample
    shutil.copytree(DATA / sample, target)
    return target


# (sample, query id prefix, committed C, in flight L, offsets ids, commit ids, continuous, sources)
SAMPLES = [
    ("ck35", "a983b337", 6, None, range(7), range(7), False, ["0", "1"]),
    ("ck43", "e4ef413e", 0, 1, range(2), range(1), False, ["0", "1"]),
    ("ck43v2", "ad639ab9", 15, None, range(12, 16), range(12, 16), False, ["0", "1"]),
    ("cka", "53be5ff2", 6, None, [0, 3, 6], [0, 3, 6], False, ["0"]),
    ("cka4.0.5", "45ba50e9", 4, None, range(5), range(5), False, ["0", "1"]),
    ("cka4.1.4", "2dad65a6", 7, None, range(8), range(8), False, ["0", "1"]),
    ("ckc35", "5eea12d0", 8, None, range(9), range(9), True, ["0"]),
    ("ckm3.5.9", "d7397ef0", 6, None, range(7), range(7), False, ["0"]),
    ("ckm4.3.0", None, 3, None, range(4), range(4), False, ["0"]),  # no metadata file
    ("ckn4.2.1", "e892574b", 4, 5, range(6), range(5), False, ["alpha", "beta_1"]),
    ("ckn4.3.0", "079b68f0", 4, None, range(5), range(5), False, ["alpha", "beta_1"]),
]


@pytest.mark.parametrize(
    (
        "sample",
        "query",
        "committed",
        "in_flight",
        "offsets_ids",
        "commit_ids",
        "continuous",
        "sources",
    ),
    SAMPLES,
    ids=[s[0] for s in SAMPLES],
)
def test_sample_state(
    sample: str,
    query: str | None,
    committed: int,
    in_flight: int | None,
    offsets_ids: range | list[int],
    commit_ids: range | list[int],
    continuous: bool,
    sources: list[str],
) -> None:
    reader, _ = _reader(DATA / sample)
    state = reader.read(history=3)
    assert (state.query_id or "").startswith(query or "") and (state.query_id is None) == (
        query is None
    )
    assert state.committed_batch_id == committed
    assert state.committed is not None and state.committed.batch_id == committed
    assert (state.in_flight.batch_id if state.in_flight else None) == in_flight
    assert state.offsets_ids == tuple(offsets_ids)
    assert state.commit_ids == tuple(commit_ids)
    assert state.continuous is continuous
    assert [s.source_id for s in state.committed.sources] == sources
    assert state.location == str(DATA / sample)
    committed_file = DATA / sample / "commits" / str(committed)
    assert state.commit_modified == pytest.approx(committed_file.stat().st_mtime)
    assert state.committed.modified == pytest.approx(
        (DATA / sample / "offsets" / str(committed)).stat().st_mtime
    )


def test_in_flight_batch_is_planned_not_committed() -> None:
    state = _reader(DATA / "ck43")[0].read()
    assert state.committed is not None and state.in_flight is not None
    assert [s.raw for s in state.committed.sources] == ["0", "0"]
    assert [s.raw for s in state.in_flight.sources] == ["7", "6"]


def test_history_is_oldest_first_ends_with_committed_and_is_bounded() -> None:
    reader, _ = _reader(DATA / "ck35")
    assert [b.batch_id for b in reader.read(history=3).history] == [4, 5, 6]
    assert [b.batch_id for b in reader.read(history=100).history] == list(range(7))
    assert [b.batch_id for b in reader.read(history=1).history] == [6]
    assert reader.read(history=0).history == ()


def test_history_follows_gaps_async_progress_tracking() -> None:
    state = _reader(DATA / "cka")[0].read(history=10)
    assert [b.batch_id for b in state.history] == [0, 3, 6]


def test_history_of_purged_checkpoint_starts_at_oldest_retained() -> None:
    state = _reader(DATA / "ck43v2")[0].read(history=10)
    assert [b.batch_id for b in state.history] == [12, 13, 14, 15]
    assert all(b.version == 2 for b in state.history)


def test_ids_compare_numerically_not_as_text(tmp_path: Path) -> None:
    location = _copy("ckm3.5.9", tmp_path)
    for name in ("offsets", "commits"):
        # 10 < 9 as text: the reader must pick 10.
        shutil.copy(location / name / "6", location / name / "10")
        shutil.copy(location / name / "6", location / name / "9")
    state = _reader(location)[0].read(history=3)
    assert state.committed_batch_id == 10
    assert [b.batch_id for b in state.history] == [6, 9, 10]


def test_crc_tmp_hidden_and_non_numeric_files_are_ignored(tmp_path: Path) -> None:
    location = _copy("cka4.1.4", tmp_path)
    offsets = location / "offsets"
    for junk in ("8.crc", ".8.crc", ".9.1f2e.TID3.tmp", "9.tmp", "latest", "-1", "_SUCCESS"):
        (offsets / junk).write_bytes(b"garbage")
    (offsets / "99").mkdir()  # a directory, not a file
    state = _reader(location)[0].read(history=1)
    assert state.offsets_ids == tuple(range(8))
    assert state.in_flight is None


# -- request budget and caching --------------------------------------------------------------


def test_first_check_request_budget() -> None:
    reader, storage = _reader(DATA / "ck35")
    reader.read(history=1)
    # LIST commits/, LIST offsets/, GET metadata, GET offsets/6, GET commits/6 (a local
    # listing has no content hash); nothing under state/.
    assert storage.requests.by_operation == {"list": 2, "read": 3}


def test_first_check_with_in_flight_batch_adds_one_get() -> None:
    reader, storage = _reader(DATA / "ck43")
    reader.read(history=1)
    assert storage.requests.by_operation == {"list": 2, "read": 4}


def test_history_costs_one_get_per_batch_once() -> None:
    reader, storage = _reader(DATA / "ck35")
    reader.read(history=4)
    assert storage.requests.by_operation == {"list": 2, "read": 1 + 4 + 1}  # + commits/C
    storage.requests.reset()
    reader.read(history=4)
    assert storage.requests.by_operation == {"list": 2}


def test_repeated_reads_only_fetch_new_batches(tmp_path: Path) -> None:
    location = _copy("ckm3.5.9", tmp_path)
    reader, storage = _reader(location)
    reader.read(history=1)
    storage.requests.reset()
    # The job plans batch 7, then commits it.
    shutil.copy(location / "offsets" / "6", location / "offsets" / "7")
    state = reader.read(history=1)
    assert state.in_flight is not None and state.in_flight.batch_id == 7
    assert storage.requests.by_operation == {"list": 2, "read": 1}
    storage.requests.reset()
    shutil.copy(location / "commits" / "6", location / "commits" / "7")
    state = reader.read(history=1)
    assert state.committed_batch_id == 7 and state.in_flight is None
    # offsets/7 came from the cache; the new commits/7 is checked once
    assert storage.requests.by_operation == {"list": 2, "read": 1}
    storage.requests.reset()
    reader.read(history=1)
    assert storage.requests.by_operation == {"list": 2}


def test_replaced_file_is_read_again(tmp_path: Path) -> None:
    location = _copy("ckm3.5.9", tmp_path)
    reader, _ = _reader(location)
    before = reader.read(history=1)
    assert before.committed is not None
    # Checkpoint deleted and recreated under the same path: same id, different content.
    offsets_6 = location / "offsets" / "6"
    offsets_6.write_bytes(offsets_6.read_bytes().replace(b"\n12", b"\n99"))
    os.utime(offsets_6, (1_000_000, 1_000_000))
    after = reader.read(history=1)
    assert after.committed is not None and after.committed.sources[0].raw == "99"


# -- purge and damage ------------------------------------------------------------------------


class PurgingStorage(LocalStorage):
    """Deletes files right after a listing: what Spark's async purge can do to a reader."""

    def __init__(self, purge: list[Path]) -> None:
        super().__init__()
        self.purge = purge

    def list_dir(self, path: str) -> list[ObjectInfo]:
        listed = super().list_dir(path)
        if path.endswith("offsets"):
            for victim in self.purge:
                victim.unlink(missing_ok=True)
            self.purge = []
        return listed


def test_history_file_purged_between_list_and_read_is_skipped(tmp_path: Path) -> None:
    location = _copy("ck35", tmp_path)
    storage = PurgingStorage([location / "offsets" / "1", location / "offsets" / "2"])
    state = CheckpointReader(storage, str(location)).read(history=10)
    assert [b.batch_id for b in state.history] == [0, 3, 4, 5, 6]
    assert state.committed_batch_id == 6


def test_committed_file_vanishing_once_is_settled_by_a_fresh_listing(tmp_path: Path) -> None:
    location = _copy("ck35", tmp_path)
    storage = PurgingStorage([location / "offsets" / "6"])
    with pytest.raises(CheckpointCorrupt, match=r"offsets/6: missing although commits/6 exists"):
        CheckpointReader(storage, str(location)).read(history=1)


def test_file_vanishing_on_every_read_is_reported(tmp_path: Path) -> None:
    location = _copy("ck35", tmp_path)

    class AlwaysVanishing(LocalStorage):
        def read(self, path: str) -> bytes:
            if path.endswith("offsets/6"):
                from airflow_sparklag.errors import StorageNotFound

                raise StorageNotFound(f"{path}: gone")
            return super().read(path)

    with pytest.raises(CheckpointCorrupt, match=r"offsets/6: listed but gone when read, twice"):
        CheckpointReader(AlwaysVanishing(), str(location)).read(history=1)


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        ("ckr3.5.9", "offsets/3: missing although commits/3 exists (newest is offsets/0)"),
        ("ckr4.3.0", "offsets/2: missing although commits/2 exists (it is empty)"),
    ],
)
def test_commits_ahead_of_offsets_is_corrupt(sample: str, message: str) -> None:
    with pytest.raises(CheckpointCorrupt) as raised:
        _reader(DATA / sample)[0].read()
    assert str(DATA / sample) in str(raised.value)
    assert message in str(raised.value)
    assert "restore offsets/" in str(raised.value)


def test_corrupt_committed_offsets_file_names_the_file(tmp_path: Path) -> None:
    location = _copy("ck35", tmp_path)
    (location / "offsets" / "6").write_bytes(b"v1\n{trunc")
    with pytest.raises(
        CheckpointCorrupt, match=r"ck35/offsets/6: offsets metadata is not valid JSON"
    ):
        _reader(location)[0].read(history=1)


def test_corrupt_metadata_file_names_the_file(tmp_path: Path) -> None:
    location = _copy("ck35", tmp_path)
    (location / "metadata").write_bytes(b"")
    with pytest.raises(CheckpointCorrupt, match=r"ck35/metadata: empty file"):
        _reader(location)[0].read(history=1)


# -- not found / empty -----------------------------------------------------------------------


def test_missing_location_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFound, match=str(tmp_path / "nope")):
        _reader(tmp_path / "nope")[0].read()


def test_directory_without_checkpoint_is_not_found(tmp_path: Path) -> None:
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "part-0000.parquet").write_bytes(b"x")
    with pytest.raises(CheckpointNotFound, match="no offsets/, commits/ or metadata"):
        _reader(tmp_path / "output")[0].read()


def test_started_query_without_batches_has_no_committed_batch(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    state = _reader(tmp_path)[0].read()
    assert state.committed is None and state.committed_batch_id is None
    assert state.in_flight is None and state.history == ()
    assert state.offsets_ids == () and state.commit_ids == ()
    assert state.continuous is False


def test_metadata_only_checkpoint_is_empty_not_missing(tmp_path: Path) -> None:
    # Object stores have no directories: metadata is all a fresh query leaves.
    shutil.copy(DATA / "ck35" / "metadata", tmp_path / "metadata")
    state = _reader(tmp_path)[0].read()
    assert state.query_id == "a983b337-7405-45bc-aa6b-99679b3f6081"
    assert state.committed is None


def test_first_batch_in_flight_without_any_commit(tmp_path: Path) -> None:
    location = _copy("ck43", tmp_path)
    shutil.rmtree(location / "commits")
    state = _reader(location)[0].read()
    assert state.committed is None and state.commit_modified is None
    assert state.in_flight is not None and state.in_flight.batch_id == 1
    assert state.history == ()


def test_file_url_location_works() -> None:
    state = _reader((DATA / "cka").as_uri())[0].read()
    assert state.committed_batch_id == 6
    assert state.location == (DATA / "cka").as_uri()


def test_reader_cache_keeps_only_the_window(tmp_path: Path) -> None:
    """A reader that polls for days holds the current window, not every batch it ever saw."""
    root = tmp_path / "ck35"
    shutil.copytree(DATA / "ck35", root)
    reader = CheckpointReader(LocalStorage(), str(root))
    state = reader.read(history=7)
    assert [b.batch_id for b in state.history] == [0, 1, 2, 3, 4, 5, 6]
    state = reader.read(history=2)
    assert [b.batch_id for b in state.history] == [5, 6]
    assert sorted(reader._offsets_cache) == [5, 6]
    # Asking for a longer window again re-reads what was dropped, with the same result.
    assert [b.batch_id for b in reader.read(history=7).history] == [0, 1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("sample", [s[0] for s in SAMPLES])
def test_a_copied_checkpoint_is_not_taken_for_real_time_mode(sample: str, tmp_path: Path) -> None:
    """A copy (`cp -r`, `aws s3 sync`, `distcp`, a git checkout of these samples) writes every
    file at copy time: each offsets file long after its batch time and its commit right after
    it, the shape real-time mode leaves. None of these queries ran in real-time mode, and what
    was written before their newest batch (the previous offsets file or ``metadata``) is dated
    after that batch began, which no real-time interval is."""
    from airflow_sparklag.checkpoint import real_time_interval

    copy = _copy(sample, tmp_path)
    later = os.stat(copy / "offsets").st_mtime + 86_400  # copied a day after the run
    for path in copy.rglob("*"):
        os.utime(path, (later, later))
    state = _reader(copy)[0].read()
    newest = state.in_flight or state.committed
    assert newest is not None
    if newest.batch_timestamp_ms is not None:  # continuous mode has no batch time
        assert state.written_before is not None and state.written_before > later - 1
    assert real_time_interval(state) is None
