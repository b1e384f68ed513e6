"""A check is a plan, a fetch and ONE judgment: ``compute_lag`` and ``evaluate`` run once per job
per check, whatever the job's shape (caught up, lagging, stopped, capped, rewound, in flight,
runs-shaped, declared scheduled) and the time-lag mode; and the evidence a result was judged on
says what was read and which rule asked for it.

Checkpoints are generated job shapes (test_check_requests_shapes: real Spark 3.5 checkpoint
files with Kafka offsets); a fake Kafka cluster answers. The counters wrap the two functions
wherever a module of the package has bound them, so the test counts the calls of any layout.
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag import health, judge, lag, positions
from airflow_sparklag.model.result import CheckResult
from airflow_sparklag.model.verdict import Thresholds
from airflow_sparklag.monitor import CheckOptions, check_many
from airflow_sparklag.session import Session
from tests.fakes import FakeKafka
from tests.unit.test_check_requests import (
    NOW,
    TOPIC,
    _write,
    checkpoint_files,
    cluster,
    steady,
)
from tests.unit.test_check_requests_shapes import shape


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[tuple[str, str]]:
    """(function, job location) -> calls, for ``compute_lag`` and ``evaluate``."""
    return _counted(monkeypatch, {"compute_lag": lag.compute_lag, "evaluate": health.evaluate})


def _counted(
    monkeypatch: pytest.MonkeyPatch, originals: dict[str, Any]
) -> collections.Counter[tuple[str, str]]:
    counted: collections.Counter[tuple[str, str]] = collections.Counter()

    def counting(name: str) -> Any:
        original = originals[name]

        def wrapper(subject: Any, *args: Any, **kwargs: Any) -> Any:
            counted[(name, subject.location)] += 1
            return original(subject, *args, **kwargs)

        return wrapper

    for module in [m for n, m in sys.modules.items() if n.startswith("airflow_sparklag")]:
        for name, original in originals.items():
            if getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counting(name))
    return counted


def _fleet(tmp_path: Path, seeds: range) -> tuple[list[str], dict[str, tuple]]:
    jobs = {}
    for seed in seeds:
        batches, committed, ends, starts, rate, options = shape(seed)
        location = _write(tmp_path / str(seed), checkpoint_files(batches, committed))
        jobs[location] = (ends, starts, rate, options)
    return list(jobs), jobs


@pytest.mark.parametrize(
    "options",
    [
        CheckOptions(),
        CheckOptions(exact_time_lag=True),
        CheckOptions(Thresholds(max_lag_seconds=30)),
        CheckOptions(runs_every=3600),
    ],
    ids=["defaults", "exact", "max_lag_seconds", "scheduled"],
)
def test_each_job_is_measured_and_judged_once(
    tmp_path: Path, calls: collections.Counter[tuple[str, str]], options: CheckOptions
) -> None:
    locations, jobs = _fleet(tmp_path, range(30))
    for location in locations:
        ends, starts, rate, _ = jobs[location]
        with Session(kafka_client=cluster(dict(ends), dict(starts), rate)) as session:
            [result] = check_many(session, [location], options, now=NOW)
        assert result.error is None
        assert calls[("compute_lag", location)] == 1, location
        assert calls[("evaluate", location)] == 1, location


def test_positions_are_measured_again_only_when_the_evidence_grew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``positions.measure`` (most of a check's CPU per job) runs once per evidence it is
    given: again after a read that changes it (older batches, record timestamps), not for the
    retention, Kafka's answers or the final report."""
    seen: list[tuple[Any, ...]] = []  # holds the states: no id is reused while it runs

    def measure(state: Any, snapshot: Any, **how: Any) -> Any:
        seen.append((state, repr(how["record_timestamps"]), how["estimate_ages"]))
        return positions.measure(state, snapshot, **how)

    for module in (judge, lag):
        monkeypatch.setattr(module, "measure", measure)
    locations, jobs = _fleet(tmp_path, range(30))
    for location in locations:
        ends, starts, rate, options = jobs[location]
        with Session(kafka_client=cluster(dict(ends), dict(starts), rate)) as session:
            check_many(session, [location], options, now=NOW)
    evidence = [(id(state), *rest) for state, *rest in seen]
    assert len(set(evidence)) == len(evidence) > len(locations)


def test_a_fleet_is_measured_and_judged_once_per_job(
    tmp_path: Path, calls: collections.Counter[tuple[str, str]]
) -> None:
    """Many jobs in one check: one report and one verdict each."""
    ends = {0: 1300, 1: 1300}
    locations = [
        _write(tmp_path / name, checkpoint_files(batches))
        for name, batches in {
            "caught-up": steady(end=1300),
            "lagging": steady(end=1300, lag=100),
            "stopped": steady(end=1300, lag=100, every=10.0)[:6],
        }.items()
    ]
    with Session(kafka_client=cluster(dict(ends))) as session:
        results = check_many(session, locations, CheckOptions(), now=NOW)
    assert [r.error for r in results] == [None, None, None]
    assert set(calls.values()) == {1} and len(calls) == 2 * len(locations)


def test_the_evidence_names_what_was_read_and_who_asked(tmp_path: Path) -> None:
    """A caught-up job is judged on its newest batch; a lagging one reads offsets/C-1 because
    the rules that judge a trend asked for it; both say so in ``evidence`` and ``explain()``."""
    ends = {0: 1300, 1: 1300}
    caught_up = _write(tmp_path / "ok", checkpoint_files(steady(end=1300)))
    lagging = _write(tmp_path / "lag", checkpoint_files(steady(end=1300, lag=10)))
    with Session(kafka_client=cluster(dict(ends))) as session:
        ok, behind = check_many(session, [caught_up, lagging], CheckOptions(), now=NOW)
    assert [read.what for read in ok.evidence] == ["listing, offsets/C, Kafka end offsets"]
    assert ok.to_dict()["evidence"] == [
        {"read": "listing, offsets/C, Kafka end offsets", "asked_by": []}
    ]
    asked = {read.what: read.asked_by for read in behind.evidence}
    assert "lagging" in asked["offsets/C-1"] and "time lag" in asked["offsets/C-1"]
    assert "topic retention (time_to_data_loss)" in behind.explain()


def test_a_quiet_poll_lists_again_once_the_verdict_may_change_by_time(tmp_path: Path) -> None:
    """A kept reader polls a quiet checkpoint with one point read, until the moment the last
    verdict may change with nothing written (here: the commit age passing
    max_commit_age_seconds): that poll lists the checkpoint again before judging STOPPED."""
    start = time.time()
    batches = [(start - 2 - (11 - i) * 10, {0: 100 * (i + 1), 1: 100 * (i + 1)}) for i in range(12)]
    location = _write(tmp_path / "ck", checkpoint_files(batches))
    limit = 4.0
    options = CheckOptions(Thresholds(max_commit_age_seconds=limit))
    kafka = FakeKafka({TOPIC: {0: 1300, 1: 1300}}, now=start)

    def poll() -> CheckResult:
        kafka.now = time.time()  # the cluster answers on the real clock, as the reader reads
        return check_many(session, [location], options)[0]

    with Session(kafka_client=kafka) as session:
        storage = session.storage(location)
        first = poll()
        poll()  # the second listing agrees: settled
        reader = session.reader(location)
        assert first.report is not None and first.report.committed_at is not None
        assert reader.confirm_at and min(reader.confirm_at) == first.report.committed_at + limit
        storage.requests.reset()
        quiet = poll()
        assert dict(storage.requests.by_operation) == {"stat": 1}, storage.requests.by_operation
        assert quiet.verdict.health.value != "STOPPED"
        time.sleep(max(0.0, first.report.committed_at + limit - time.time()) + 0.2)
        storage.requests.reset()
        stopped = poll()
        assert storage.requests.by_operation.get("list", 0) >= 1, storage.requests.by_operation
        assert stopped.verdict.health.value == "STOPPED", stopped.verdict


def test_a_location_holding_credentials_fails_its_own_job_only_and_is_never_read(
    tmp_path: Path,
) -> None:
    """In a list of jobs, ``s3a://KEY:SECRET@bucket/ck`` is refused where it is parsed: its own
    result is a failed check naming it without the secret, the other jobs are judged, and no
    request is sent for it (not even with the environment's credentials)."""
    from airflow_sparklag.fleet import FleetChecker

    good = _write(tmp_path / "ok", checkpoint_files(steady(end=1300)))
    secret = "s3a://AKIAEXAMPLE:hunter2@nobucket/ck"
    with Session(kafka_client=cluster({0: 1300, 1: 1300})) as session:
        results = check_many(session, [secret, good], CheckOptions(), now=NOW)
        fleet = FleetChecker([good, secret], session=session).check(now=NOW)
        built = set(session._backends)  # the stores a backend was opened for
    for listed in (results, fleet):
        by_error = {r.error is None: r for r in listed}
        assert by_error[True].location == good and by_error[True].verdict.health.value == "OK"
        refused = by_error[False]
        assert "holds credentials" in (refused.error or "")
        assert "hunter2" not in str(refused.to_dict()) and "AKIAEXAMPLE" not in str(
            refused.to_dict()
        )
    assert built == {("", "")}, built  # local disk only: no S3 client for the refused job
