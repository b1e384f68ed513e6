"""A location is text parsed once, where it enters; the backends are one table of options types.

The parse-once checks count ``Location.parse`` across real checks of checkpoints on local disk
(written from a real Spark 3.5 checkpoint's files) against the shared in-memory Kafka cluster
(``test_check_requests.cluster``).
"""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag import params
from airflow_sparklag.errors import InvalidParameter, UnsupportedStorageURL
from airflow_sparklag.fleet import FleetChecker
from airflow_sparklag.location import Location
from airflow_sparklag.monitor import CheckOptions, check, check_many
from airflow_sparklag.session import Session
from airflow_sparklag.storage import BACKENDS, StorageOptions, options_type
from tests.unit.test_check_requests import NOW, _write, checkpoint_files, cluster, steady

# -- parsing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "text", "scheme", "authority", "path", "kind"),
    [
        (" s3a://lake/ck/orders/ ", "s3a://lake/ck/orders", "s3a", "lake", "/ck/orders", "s3"),
        ("hdfs://nn:8020/ck//", "hdfs://nn:8020/ck", "hdfs", "nn:8020", "/ck", "hdfs"),
        ("hdfs:///ck", "hdfs:///ck", "hdfs", "", "/ck", "hdfs"),
        ("gs://b/my ck ?x #1", "gs://b/my ck ?x #1", "gs", "b", "/my ck ?x #1", "gs"),
        ("/data/ck/", "/data/ck", "", "", "/data/ck", "local"),
        ("file:///data/ck", "file:///data/ck", "file", "", "/data/ck", "local"),
        (Path("/data/ck"), "/data/ck", "", "", "/data/ck", "local"),
    ],
)
def test_a_location_is_parsed_into_its_parts(
    given: Any, text: str, scheme: str, authority: str, path: str, kind: str
) -> None:
    where = Location.parse(given)
    assert (str(where), where.scheme, where.authority, where.path, where.kind) == (
        text,
        scheme,
        authority,
        path,
        kind,
    )
    assert where.join("offsets", "12") == f"{text}/offsets/12"
    assert where.child("offsets") == Location.parse(f"{text}/offsets")
    assert Location.of(where) is where


@pytest.mark.parametrize(
    ("given", "error", "problem"),
    [
        (None, InvalidParameter, "must be a checkpoint path or URL"),
        (b"/ck", InvalidParameter, "must be a checkpoint path or URL"),
        ("  ", InvalidParameter, "must be a checkpoint path or URL"),
        ("/ck\x00x", InvalidParameter, "(a NUL)"),
        (["/a", "/b"], InvalidParameter, "must be one location, got a list of 2"),
        ("s3a://AKIA:se/cret@b/ck", UnsupportedStorageURL, "holds credentials"),
        ("s3a://", UnsupportedStorageURL, "names no bucket or container"),
        ("gs:///ck", UnsupportedStorageURL, "names no bucket or container"),
    ],
)
def test_what_names_no_store_is_refused_naming_the_parameter(
    given: Any, error: type[Exception], problem: str
) -> None:
    with pytest.raises(error, match=problem) as raised:
        Location.parse(given, "checkpoints")
    assert "se/cret" not in str(raised.value)
    # the rendered-text edge: every refusal is an invalid parameter named as given
    with pytest.raises(InvalidParameter, match=r"^location: ") as read:
        params.location("location", given)
    assert "se/cret" not in str(read.value)


def test_a_bare_scheme_names_a_store_but_no_checkpoint() -> None:
    store = Location.parse("s3a://", bucket=False)
    assert store.store == ("s3", "")
    with pytest.raises(UnsupportedStorageURL, match="names no bucket"):
        Location.of(store)


# -- parsed once ---------------------------------------------------------------------------------


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text ``Location.parse`` is given, in order."""
    seen: list[str] = []
    real = Location.parse.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Location], value: Any, *args: Any, **kwargs: Any) -> Location:
        seen.append(str(value))
        return real(cls, value, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Location, "parse", classmethod(counting))
    return seen


def _jobs(root: Path, count: int) -> list[str]:
    """Lagging jobs: their checks read the older batches of the window too."""
    jobs = []
    for n in range(count):
        (root / f"job{n}").mkdir()
        jobs.append(_write(root / f"job{n}", checkpoint_files(steady(lag=300))) + "/")
    return jobs


def test_a_check_parses_its_location_once(tmp_path: Path, parsed: list[str]) -> None:
    (job,) = _jobs(tmp_path, 1)
    with Session(kafka_client=cluster({0: 1200, 1: 1200})) as session:
        where = params.location("location", job)  # an operator's field, after templating
        result = check(session, where, CheckOptions(), now=NOW)
        assert result.report is not None and result.report.history  # the window was read
        assert parsed == [job]
        parsed.clear()
        check(session, job, CheckOptions(), now=NOW)  # a script's text: parsed at the top
    assert parsed == [job]
    assert result.location == job.rstrip("/")


def test_many_checks_and_fleet_polls_parse_each_location_once(
    tmp_path: Path, parsed: list[str]
) -> None:
    jobs = _jobs(tmp_path, 3)
    kafka = cluster({0: 1200, 1: 1200})
    with Session(kafka_client=kafka) as session:
        results = check_many(session, jobs, CheckOptions(), now=NOW)
        assert [r.location for r in results] == [j.rstrip("/") for j in jobs]
        assert all(r.report is not None and r.report.history for r in results)
    assert parsed == jobs
    parsed.clear()
    with FleetChecker(jobs, kafka_client=kafka) as fleet:
        for _ in range(3):
            assert [r.error for r in fleet.check(now=NOW)] == [None] * 3
    assert parsed == jobs  # when the fleet is made; never again in its polls
    parsed.clear()
    with FleetChecker(prefix=str(tmp_path), kafka_client=kafka) as fleet:
        assert len(fleet.check(now=NOW)) == 3
        fleet.discover()
        assert len(fleet.check(now=NOW)) == 3
    assert parsed == [str(tmp_path)]  # the prefix; discovery yields Locations


# -- backends: one table, one options type each ----------------------------------------------


@pytest.mark.parametrize("scheme", sorted({*BACKENDS, "gs", "abfs"}))
def test_each_options_type_takes_its_backends_keywords(scheme: str) -> None:
    """An options type is what its backend takes, and the backend takes nothing else: a setting
    added to a backend is its options' field (else it could never be given)."""
    from airflow_sparklag.storage.s3 import S3Options, S3Storage
    from airflow_sparklag.storage.webhdfs import WebHDFSOptions, WebHDFSStorage

    kind = options_type(scheme)
    backends: dict[type, Any] = {S3Options: S3Storage, WebHDFSOptions: WebHDFSStorage}
    if kind not in backends:  # local (no options) and fsspec (the filesystem's own)
        assert [f.name for f in fields(kind)] in ([], ["values"])
        return
    # the backend takes the options value itself, and no keyword besides
    parameters = inspect.signature(backends[kind]).parameters.values()
    assert "options" in [p.name for p in parameters]
    assert not [p for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]


def test_storage_options_read_mappings_once_and_never_print_them() -> None:
    from airflow_sparklag.storage.s3 import S3Options
    from airflow_sparklag.storage.webhdfs import WebHDFSOptions

    options = StorageOptions(
        s3={"aws_secret_access_key": "s3-SECRET", "region_name": "eu-west-1"},
        webhdfs={"url": "http://nn:9870", "keytab": "/k/SECRET.keytab"},
    )
    assert isinstance(options.s3, S3Options) and options.s3.region_name == "eu-west-1"
    assert isinstance(options.webhdfs, WebHDFSOptions)
    assert options.options_for(S3Options) is options.s3
    assert "SECRET" not in repr(options) + repr(options.s3) + repr(options.webhdfs)
    with pytest.raises(InvalidParameter, match=r"^webhdfs_options: unknown option\(s\) 'usr'"):
        StorageOptions(webhdfs={"usr": "me"})
    with pytest.raises(InvalidParameter, match=r"^s3_options: unknown option\(s\) 'read_timout'"):
        Session(s3_options={"read_timout": 5})


def test_the_s3_options_function_is_called_by_an_s3_backend_only(tmp_path: Path) -> None:
    """The hook hands a function that builds its S3 client: opening a local (or HDFS) store
    must not build it (it did: any first backend called it)."""
    from airflow_sparklag.storage.local import LocalStorage
    from airflow_sparklag.storage.s3 import S3Options

    calls: list[int] = []
    lazy = StorageOptions(s3=lambda: calls.append(1) or {"region_name": "eu-west-1"})
    assert isinstance(lazy.open(Location.parse(tmp_path)), LocalStorage)
    assert calls == []
    s3 = lazy.options_for(S3Options)
    assert isinstance(s3, S3Options) and s3.region_name == "eu-west-1" and calls == [1]
