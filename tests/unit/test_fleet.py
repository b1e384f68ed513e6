"""fleet.py on the sample checkpoints (local storage): discovery, request budgets, reader reuse."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_sparklag import fleet
from airflow_sparklag.errors import InvalidParameter, StorageAccessDenied
from airflow_sparklag.fleet import FleetChecker, discover_checkpoints
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.monitor import check, check_checkpoint, check_many
from airflow_sparklag.session import Session
from airflow_sparklag.storage import Children
from airflow_sparklag.storage.local import LocalStorage

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
KAFKA = {"bootstrap.servers": "127.0.0.1:1"}  # never contacted: the samples have no Kafka source


def _copy(sample: str, target: Path) -> Path:
    shutil.copytree(DATA / sample, target)
    return target


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """team-a/{orders,clicks}, team-b/nested/payments, and directories that are not checkpoints."""
    _copy("cka4.1.4", tmp_path / "team-a" / "orders")
    _copy("ckm3.5.9", tmp_path / "team-a" / "clicks")
    _copy("ck43v2", tmp_path / "team-b" / "nested" / "payments")
    (tmp_path / "team-b" / "_spark_metadata" / "offsets").mkdir(parents=True)
    (tmp_path / "team-b" / ".hidden" / "commits").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "README").write_text("not a checkpoint")
    return tmp_path


def _record_listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    listed: list[str] = []
    original = LocalStorage.list_children

    def recording(storage: LocalStorage, path: str) -> Children:
        listed.append(path)
        return original(storage, path)

    monkeypatch.setattr(LocalStorage, "list_children", recording)
    return listed


def test_discover_finds_checkpoints_without_entering_them(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = _record_listings(monkeypatch)
    found = discover_checkpoints(str(tree))
    assert found == [
        str(tree / "team-a" / "clicks"),
        str(tree / "team-a" / "orders"),
        str(tree / "team-b" / "nested" / "payments"),
    ]
    # one listing per directory visited; nothing inside a checkpoint, no hidden/underscore dirs
    assert sorted(listed) == sorted(
        [
            str(tree),
            str(tree / "empty"),
            str(tree / "team-a"),
            str(tree / "team-b"),
            str(tree / "team-b" / "nested"),
            *found,
        ]
    )
    assert not any("state" in path or "_spark_metadata" in path for path in listed)


def test_discover_request_count_is_one_per_directory(tree: Path) -> None:
    storage = LocalStorage()
    discover_checkpoints(str(tree), storage=storage)
    assert storage.requests["list"] == 8 and storage.requests.total == 8


def test_discover_max_depth(tree: Path) -> None:
    assert discover_checkpoints(str(tree), max_depth=1) == []
    assert len(discover_checkpoints(str(tree), max_depth=2)) == 2
    assert len(discover_checkpoints(str(tree), max_depth=3)) == 3


def test_discover_root_is_a_checkpoint(tree: Path) -> None:
    root = tree / "team-a" / "orders"
    assert discover_checkpoints(str(root) + "/") == [str(root)]
    assert discover_checkpoints(f"file://{root}") == [f"file://{root}"]


def test_discover_metadata_only_checkpoint_and_missing_prefix(tmp_path: Path) -> None:
    job = tmp_path / "new-job"
    job.mkdir()
    (job / "metadata").write_text('{"id":"q"}')
    assert discover_checkpoints(str(tmp_path)) == [str(job)]
    assert discover_checkpoints(str(tmp_path / "missing")) == []


def test_one_bad_directory_does_not_end_the_scan(
    tree: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Was: "StorageError: <dir>: list directory failed: Too many levels of symbolic links" (or
    # permission denied: lost+found, another team's directory) for the whole scan, so
    # `status --prefix` checked nothing and `serve --prefix` exported no job, ever.
    (tree / "team-a" / "loop").symlink_to("loop")  # a symlink loop beside the jobs
    looped = _copy("ckm3.5.9", tree / "team-b" / "looped")
    shutil.rmtree(looped / "offsets")
    (looped / "offsets").symlink_to("offsets")  # ... and inside one: that job's own error
    denied = tree / "team-b" / "nested"  # root reads any mode: PermissionError made by hand
    original = LocalStorage.list_children

    def refusing(storage: LocalStorage, path: str) -> Children:
        if path == str(denied):
            raise PermissionError(13, "Permission denied", path)
        return original(storage, path)

    monkeypatch.setattr(LocalStorage, "list_children", _os_mapped(refusing))
    with caplog.at_level("WARNING", logger="airflow_sparklag.fleet"):
        found = discover_checkpoints(str(tree))
    assert found == [
        str(tree / "team-a" / "clicks"),
        str(tree / "team-a" / "orders"),
        str(tree / "team-b" / "looped"),
    ]
    assert f"{denied}: permission denied (list directory)" in caplog.text
    with pytest.raises(StorageAccessDenied):  # the prefix itself is still an error
        discover_checkpoints(str(denied))


def _os_mapped(method):  # type: ignore[no-untyped-def]
    """``method`` with its OSError mapped as LocalStorage.list_children maps it."""
    from airflow_sparklag.storage.local import _os_errors

    def mapped(storage: LocalStorage, path: str) -> Children:
        with _os_errors(path, "list directory"):
            return method(storage, path)

    return mapped


def test_locations_are_paths_or_text_else_a_typed_error(tmp_path: Path) -> None:
    # A pathlib.Path was "TypeError: argument of type 'PosixPath' is not iterable"; None, 5,
    # bytes and a NUL were TypeErrors and ValueErrors of the standard library.
    job = _copy("ckm3.5.9", tmp_path / "job")
    assert check_checkpoint(job, kafka_config=KAFKA).report.committed_batch_id is not None
    with Session(kafka_config=KAFKA) as session:
        assert [r.location for r in check_many(session, [job])] == [str(job)]
        for bad in (None, 5, b"/ck", f"{job}\x00x", ""):
            with pytest.raises(InvalidParameter, match=r"^location"):
                check(session, bad)  # type: ignore[arg-type]
            if bad != "":  # every other read goes through the session's storage
                with pytest.raises(InvalidParameter, match=r"^location"):
                    session.storage(bad)  # type: ignore[arg-type]


def test_session_shares_one_backend_per_scheme_and_host() -> None:
    session = Session(s3_options={"region_name": "us-east-1"})
    assert session.storage("s3a://b/ck/a") is session.storage("s3://other/ck/b")
    assert session.storage("/tmp/a") is session.storage("file:///tmp/b")
    assert session.storage("hdfs://nn1:8020/a") is not session.storage("hdfs://nn2:8020/a")
    assert len(session.backends) == 4


def _add_batch(root: Path, batch_id: int) -> None:
    """What Spark does for a new batch: offsets/N first, then commits/N (contents copied)."""
    offsets = sorted((p for p in (root / "offsets").iterdir() if p.name.isdigit()), key=_num)
    commits = sorted((p for p in (root / "commits").iterdir() if p.name.isdigit()), key=_num)
    shutil.copy(offsets[-1], root / "offsets" / str(batch_id))
    shutil.copy(commits[-1], root / "commits" / str(batch_id))


def _num(path: Path) -> int:
    return int(path.name)


def test_checker_request_budget_first_and_repeated_polls(tree: Path) -> None:
    with FleetChecker(prefix=str(tree), kafka_config=KAFKA, history=1) as checker:
        results = checker.check()
        assert [r.location for r in results] == checker.locations
        assert all(r.error is None and r.report is not None for r in results)
        discovery = 8
        # first poll: LIST commits/, LIST offsets/, GET offsets/C, GET commits/C (a local
        # listing has no content hash) per checkpoint (no metadata)
        assert checker.storage_requests == discovery + 3 * 4
        assert {r.report.query_id for r in results if r.report} == {None}
        before = checker.storage_requests
        checker.check()
        # nothing new: the two listings only
        assert checker.storage_requests - before == 3 * 2
        orders = tree / "team-a" / "orders"
        _add_batch(orders, 8)
        before = checker.storage_requests
        results = checker.check()
        # two listings in a row agreed: the quiet jobs cost one stat each (their offsets/C+1);
        # orders' offsets/8 is there: stat + its two listings + GET offsets/8, commits/8
        assert checker.storage_requests - before == 2 * 1 + (1 + 2 + 2)
        by_location = {r.location: r for r in results}
        assert by_location[str(orders)].report.committed_batch_id == 8  # type: ignore[union-attr]
        before = checker.storage_requests
        checker.check()  # orders lists once more (its listing changed), the others stat
        assert checker.storage_requests - before == 2 * 1 + 2
        before = checker.storage_requests
        checker.check()
        assert checker.storage_requests - before == 3 * 1  # one point read per job
        assert checker.polls == 5


def test_history_costs_no_extra_read_when_no_rule_needs_it(tmp_path: Path) -> None:
    """The window is read lazily (health.reads_needed): this job has no Kafka source, so
    nothing depends on its older batches; a lagging job's window is read once
    (tests/unit/test_fleet_lazy_history.py)."""
    root = _copy("cka4.1.4", tmp_path / "job")
    with FleetChecker([str(root)], kafka_config=KAFKA, history=5) as checker:
        (result,) = checker.check()
        assert result.report is not None and result.error is None
        assert checker.storage_requests == 4  # the history=1 budget: no older batch read
        before = checker.storage_requests
        checker.check()
        assert checker.storage_requests - before == 2


def test_query_ids_cost_one_read_once(tmp_path: Path) -> None:
    root = _copy("cka4.1.4", tmp_path / "job")
    expected = json.loads((root / "metadata").read_text())["id"]
    with FleetChecker([str(root)], kafka_config=KAFKA, history=1, query_ids=True) as checker:
        (result,) = checker.check()
        assert result.report is not None and result.report.query_id == expected
        assert checker.storage_requests == 4 + 1  # + GET metadata
        before = checker.storage_requests
        (again,) = checker.check()
        assert again.report is not None and again.report.query_id == expected
        assert checker.storage_requests - before == 2  # the two listings; metadata kept


def test_reader_cache_stays_bounded_over_many_batches(tmp_path: Path) -> None:
    root = _copy("cka4.1.4", tmp_path / "job")
    with FleetChecker([str(root)], kafka_config=KAFKA, history=3) as checker:
        for batch_id in range(8, 40):
            _add_batch(root, batch_id)
            checker.check()
        reader = checker.session.reader(str(root), query_id=False)
        assert sorted(reader._offsets_cache) == [37, 38, 39]


def test_unreadable_checkpoint_gives_unknown_result_and_others_still_checked(
    tmp_path: Path,
) -> None:
    good = _copy("ckm3.5.9", tmp_path / "good")
    broken = _copy("ckr3.5.9", tmp_path / "broken")  # commits ahead of offsets
    missing = tmp_path / "missing"
    locations = [str(broken), str(good), str(missing)]
    with FleetChecker(locations, kafka_config=KAFKA) as checker:
        results = checker.check()
    assert [r.location for r in results] == locations
    assert results[0].error is not None and results[0].error.startswith("CheckpointCorrupt")
    assert results[0].verdict.health is Health.UNKNOWN and results[0].report is None
    assert results[1].error is None and results[1].report is not None
    assert results[2].error is not None and results[2].error.startswith("CheckpointNotFound")


def test_progress_called_once_per_checkpoint(tree: Path) -> None:
    seen: list[tuple[int, int]] = []
    fleet.check_fleet(
        prefix=str(tree), kafka_config=KAFKA, progress=lambda d, t: seen.append((d, t))
    )
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_a_discovering_poll_reads_checkpoints_while_discovery_still_lists(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """team-a's checkpoints are found one level above team-b/nested/payments: they are read
    while team-b/nested is still being listed, and the results keep location order."""
    import threading
    import time

    from airflow_sparklag.checkpoint import CheckpointReader

    events: list[str] = []
    lock = threading.Lock()
    list_children = LocalStorage.list_children
    read = CheckpointReader.read

    def slow_listing(storage: LocalStorage, path: str) -> Children:
        if path.endswith("nested"):
            time.sleep(0.5)  # the deepest level answers slowly
            with lock:
                events.append("listed nested")
        return list_children(storage, path)

    def reading(reader: CheckpointReader, *args: object, **kwargs: object) -> object:
        with lock:
            events.append(f"read {Path(reader.location).name}")
        return read(reader, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalStorage, "list_children", slow_listing)
    monkeypatch.setattr(CheckpointReader, "read", reading)
    results = fleet.check_fleet(prefix=str(tree), kafka_config=KAFKA)
    assert [Path(r.location).name for r in results] == ["clicks", "orders", "payments"]
    assert events.index("read clicks") < events.index("listed nested")
    assert events.index("read orders") < events.index("listed nested")
    assert events.index("listed nested") < events.index("read payments")


def test_rediscovery_picks_up_new_and_drops_deleted_jobs(tree: Path) -> None:
    with FleetChecker(prefix=str(tree), kafka_config=KAFKA, rediscover_seconds=0) as checker:
        assert len(checker.check()) == 3
        _copy("ckn4.3.0", tree / "team-c" / "new")
        shutil.rmtree(tree / "team-a" / "clicks")
        locations = [r.location for r in checker.check()]
        assert str(tree / "team-c" / "new") in locations
        assert str(tree / "team-a" / "clicks") not in locations
        assert str(tree / "team-a" / "clicks") not in {k[0] for k in checker.session._readers}


def test_needs_locations_or_prefix() -> None:
    with pytest.raises(ValueError, match="locations or a prefix"):
        FleetChecker(kafka_config=KAFKA)


def test_a_bare_scheme_stays_a_url_in_a_fleet() -> None:
    """'s3a://' is not trimmed to 's3a:' (a local directory): its check fails naming it."""
    checker = FleetChecker(["s3a://", "s3a://b/ck/"], kafka_config={"bootstrap.servers": "x:1"})
    assert checker.locations == ["s3a://", "s3a://b/ck"]
    checker = FleetChecker(["s3a://"], kafka_config={"bootstrap.servers": "x:1"})
    states, failures = checker.read_states()
    assert "s3a://" not in states
    assert "names no bucket or container" in str(failures["s3a://"].error)


def test_discovery_under_a_bare_scheme_is_refused_naming_it() -> None:
    from airflow_sparklag.errors import UnsupportedStorageURL

    with pytest.raises(UnsupportedStorageURL, match="'gs://' names no bucket"):
        discover_checkpoints("gs://")
