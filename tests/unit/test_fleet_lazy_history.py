"""A fleet check reads a job's older batches only when its verdict or numbers need them.

The same job shapes as ``test_check_requests.py`` (written from a real Spark 3.5 checkpoint's
files, a fake Kafka cluster answering), each checked by a ``FleetChecker`` beside a caught-up
job on the same topic: the lagging job's result equals the eager way's (the whole window read,
then judged at the same instant), and the caught-up one reads no older batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_sparklag.errors import CheckpointCorrupt
from airflow_sparklag.fleet import FleetChecker
from airflow_sparklag.model.verdict import Health
from airflow_sparklag.monitor import CheckOptions, CheckResult
from airflow_sparklag.session import Session
from tests.fakes import FakeKafka
from tests.unit.test_check_requests import (
    CASES,
    HEALTHY,
    NOW,
    _growing,
    _without_window,
    _write,
    checkpoint_files,
    cluster,
    eager,
    judged,
    limits,
    steady,
)


def _caught_up(ends: dict[int, int]) -> list:
    """12 batches, 10 s apart, the last one at the log end of every partition."""
    return [
        (NOW - 2 - (11 - i) * 10, {p: end * (i + 1) // 12 for p, end in ends.items()})
        for i in range(12)
    ]


def _fleet(
    locations: list[str], kafka: FakeKafka, options: CheckOptions
) -> tuple[list[CheckResult], Session]:
    session = Session(kafka_client=kafka)
    checker = FleetChecker(locations, session=session, options=options, query_ids=True)
    return checker.check(now=NOW), session


def _reads(session: Session, location: str) -> int:
    """GETs of offsets files older than offsets/C sent for ``location``."""
    reader = session.reader(location, query_id=True)
    return len(reader._offsets_cache)


@pytest.mark.parametrize("name", list(CASES))
def test_a_fleet_reads_the_window_of_the_jobs_that_need_it_and_judges_them_as_before(
    tmp_path: Path, name: str
) -> None:
    batches, committed, ends, starts, options, expected, reads = CASES[name]
    starts = dict(starts)
    rate = starts.pop("rate", 1.0)
    job = _write(tmp_path / "job", checkpoint_files(batches, committed))
    healthy = _write(tmp_path / "healthy", checkpoint_files(_caught_up(dict(ends))))

    def kafka() -> FakeKafka:
        return cluster(dict(ends), dict(starts), rate)

    (result, calm), session = _fleet([job, healthy], kafka(), options)
    with session:
        before = eager(job, kafka(), options)
        assert result.verdict.health is expected, result.verdict
        assert result.verdict == before.verdict
        if reads == "window":
            assert judged(result) == judged(before)
        else:  # offsets/C-1 settled it: all but what is measured over the batches read
            assert _without_window(result) == _without_window(before)
        # The caught-up job is judged as before on offsets/C alone: no older batch read.
        calm_before = eager(healthy, kafka(), options)
        assert calm.verdict == calm_before.verdict
        if options.runs_every is None:
            assert calm.verdict.health is Health.OK
            assert _without_window(calm) == _without_window(calm_before)
            assert _reads(session, healthy) == 1
        window = 2 if reads == "C-1" else len(before.report.history)  # type: ignore[union-attr]
        assert _reads(session, job) == window + (committed is not None)  # + offsets/L


@pytest.mark.parametrize("name", list(HEALTHY))
def test_a_fleet_of_caught_up_jobs_reads_no_older_batch(tmp_path: Path, name: str) -> None:
    batches, committed, options = HEALTHY[name]
    locations = [
        _write(tmp_path / f"job-{i}", checkpoint_files(batches, committed)) for i in range(3)
    ]
    ends = {0: 1200, 1: 1200}
    results, session = _fleet(locations, cluster(dict(ends)), options)
    with session:
        for location, result in zip(locations, results, strict=True):
            before = eager(location, cluster(dict(ends)), options)
            assert result.verdict == before.verdict and result.verdict.health is Health.OK
            assert _without_window(result) == _without_window(before)
            assert result.report is not None and [h.batch_id for h in result.report.history] == [11]
            assert _reads(session, location) == 1 + (committed is not None)


def test_a_damaged_older_batch_fails_only_the_job_that_needs_it(tmp_path: Path) -> None:
    files = checkpoint_files(_growing())
    files["offsets/5"] = b"v1\n{not json"
    lagging = _write(tmp_path / "lagging", files)
    ends = {p: o + 200 for p, o in _growing()[-1][1].items()}
    calm = _write(tmp_path / "calm", {**files, **checkpoint_files(_caught_up(ends))})
    options = limits(max_lag_records_total=50)
    kafka = cluster(ends)
    (failed, fine), session = _fleet([lagging, calm], kafka, options)
    with session:
        assert failed.report is None and failed.verdict.health is Health.UNKNOWN
        assert failed.error is not None and failed.error.startswith(CheckpointCorrupt.__name__)
        assert "offsets/5" in failed.error
        # offsets/5 of the caught-up job is damaged too, but it never needs it.
        assert fine.verdict.health is Health.OK and fine.error is None


def test_a_fleet_poll_reads_each_older_batch_once(tmp_path: Path) -> None:
    """A lagging job's window is cached by its reader: the next poll re-reads nothing."""
    location = _write(tmp_path / "job", checkpoint_files(steady(lag=40)))
    session = Session(kafka_client=cluster({0: 1200, 1: 1200}))
    with session:
        checker = FleetChecker([location], session=session, query_ids=True)
        first = checker.check(now=NOW)
        requests = session.storage_requests
        second = checker.check(now=NOW)
        assert second[0].to_dict() == first[0].to_dict()
        # local disk: LIST commits/ and offsets/, nothing read again (commits/C checked once)
        assert session.storage_requests - requests == 2
