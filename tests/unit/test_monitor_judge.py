"""monitor: CheckOptions (scheduled jobs), judge_states' Kafka follow-ups, HealthCondition's
fail-fast. The in-memory cluster of tests/fakes.py stands in for Kafka; the real one is in
tests/integration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag import conditions
from airflow_sparklag.checkpoint_files import BatchOffsets, CheckpointState, SourceOffset
from airflow_sparklag.conditions import DEFAULT_FAIL_FAST, HealthCondition
from airflow_sparklag.model.report import Schedule
from airflow_sparklag.model.verdict import Health, HealthVerdict, Thresholds
from airflow_sparklag.monitor import CheckOptions, CheckResult, judge_states
from airflow_sparklag.session import Session
from tests.fakes import FakeKafka, written_in_stretches

NOW = 1_700_000_000.0

# -- CheckOptions ---------------------------------------------------------------------------------


def test_runs_every_survives_to_dict_and_from_dict() -> None:
    options = CheckOptions(Thresholds(max_lag_seconds=7200), runs_every=3600, run_grace=60)
    data = json.loads(json.dumps(options.to_dict()))
    assert data["runs_every"] == 3600 and data["run_grace"] == 60
    assert CheckOptions.from_dict(data) == options
    assert CheckOptions.from_dict({}) == CheckOptions()


def test_grace_defaults_and_history_grows_for_scheduled_jobs() -> None:
    assert CheckOptions().grace is None
    assert CheckOptions(runs_every=3600).grace == 900
    assert CheckOptions(runs_every=60).grace == 300
    assert CheckOptions(runs_every=3600, run_grace=0).grace == 0
    assert CheckOptions(history=5).history_to_read == 5
    assert CheckOptions(history=5, runs_every=3600).history_to_read == 100


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"runs_every": 0}, ValueError),
        ({"runs_every": -1}, ValueError),
        ({"runs_every": float("inf")}, ValueError),
        ({"runs_every": "1h"}, TypeError),  # text is read by params.py
        ({"runs_every": True}, TypeError),
        ({"runs_every": 60, "run_grace": -1}, ValueError),
        ({"run_grace": 60}, ValueError),  # a grace without a period
    ],
)
def test_bad_schedules_are_refused(values: dict, error: type[Exception]) -> None:
    with pytest.raises(error):
        CheckOptions(**values)


# -- judge_states with a fake cluster ---------------------------------------------------------


def cluster(ends: dict[int, int], writes: dict[int, float] | None = None) -> FakeKafka:
    """One topic "t" of the in-memory cluster; its records written in stretches: ``writes``
    maps the first offset of each stretch to the time (epoch s) its records were written."""
    return FakeKafka({"t": ends}, written_in_stretches(writes or {}), now=NOW)


def batch(batch_id: int, offsets: dict[int, int], at: float) -> BatchOffsets:
    kafka = {"t": offsets}
    source = SourceOffset("0", "kafka", kafka, json.dumps(kafka))
    return BatchOffsets(batch_id, 1, int(at * 1000), 0, {}, (source,), at)


def state(
    history: list[BatchOffsets], in_flight: BatchOffsets | None = None, location: str = "/ck"
) -> CheckpointState:
    committed = history[-1] if history else None
    return CheckpointState(
        location=location,
        query_id="q",
        committed_batch_id=committed.batch_id if committed else None,
        committed=committed,
        commit_modified=committed.modified if committed else None,
        in_flight=in_flight,
        history=tuple(history),
        offsets_ids=tuple(b.batch_id for b in history),
        commit_ids=tuple(b.batch_id for b in history),
        continuous=False,
    )


def judge(kafka: FakeKafka, st: CheckpointState, **options: Any) -> CheckResult:
    with Session(kafka_client=kafka) as session:
        return judge_states(session, {st.location: st}, CheckOptions(**options))[st.location]


def bursts(*starts: float, size: int = 3, per_batch: int = 200) -> list[BatchOffsets]:
    """Bursts of ``size`` batches 1 s apart starting at each of ``starts`` (seconds before
    NOW); each batch reads ``per_batch`` records of partition 0."""
    out = []
    for start in starts:
        for i in range(size):
            out.append(batch(len(out), {0: (len(out) + 1) * per_batch}, NOW - start + i))
    return out


def end_of(history: list[BatchOffsets], index: int = -1) -> int:
    kafka = history[index].sources[0].kafka
    assert kafka is not None
    return kafka["t"][0]


def test_a_stopped_job_is_judged_by_record_timestamps() -> None:
    # Bursty streaming job: each burst read records written just before it. Stopped 100 s ago
    # with 3000 records waiting, written 95 s ago: the estimate cannot date them (an idle
    # gap), so the check reads their time.
    history = bursts(4000, 2000, 102)
    end = end_of(history)
    writes = {0: NOW - 4000.5, 600: NOW - 2000.5, 1200: NOW - 102.5, end: NOW - 95}
    kafka = cluster({0: end + 3000}, writes)
    result = judge(kafka, state(history))
    assert kafka.asked("record_timestamps")
    assert result.report is not None and result.report.time_lag_mode == "exact"
    assert result.verdict.health is Health.STOPPED and result.verdict.rule == "stopped_idle"
    # The newest run's first batch read records written moments before it: not scheduled.
    assert result.report.schedule is None
    assert "looks scheduled" not in result.verdict.reason


def test_records_that_just_arrived_after_a_quiet_spell_are_not_stopped() -> None:
    history = bursts(4000, 2000, 102)
    end = end_of(history)
    kafka = cluster({0: end + 1}, {0: NOW - 4000.5, end: NOW - 0.2})
    result = judge(kafka, state(history))
    assert result.verdict.health is Health.OK, result.verdict


def test_an_undeclared_scheduled_job_between_its_runs_is_not_stopped() -> None:
    # Two runs 7,200 s apart; the records the second run read were written long before it
    # started. 98 s after it, with 300 records waiting: between runs, as an hourly
    # AvailableNow job is most of every hour.
    history = bursts(7300, 100)
    end = end_of(history)
    kafka = cluster({0: end + 300}, {0: NOW - 7300.5, 600: NOW - 5000, end: NOW - 95})
    result = judge(kafka, state(history))
    assert result.verdict.health is Health.OK, result.verdict
    assert result.report is not None and result.report.schedule is not None
    assert result.report.schedule.looks_scheduled and not result.report.schedule.declared


def test_an_undeclared_scheduled_job_that_missed_its_runs_is_stopped_with_a_hint() -> None:
    # Runs 200 s apart, then nothing for 7,000 s (> 200 s + the 300 s default grace) while
    # records wait: STOPPED, and the reason says how to declare the schedule.
    history = bursts(7400, 7200)
    end = end_of(history)
    writes = {0: NOW - 7400.5, 600: NOW - 7350, end: NOW - 7000}
    kafka = cluster({0: end + 300}, writes)
    result = judge(kafka, state(history))
    assert result.verdict.health is Health.STOPPED, result.verdict
    reason = result.verdict.reason
    assert "looks scheduled" in reason and "--runs-every" in reason
    assert "at most 200 s apart" in reason
    assert result.report is not None and result.report.schedule is not None
    assert result.report.schedule.looks_scheduled and not result.report.schedule.declared


def test_declared_job_between_runs_is_not_stopped_and_its_run_is_checked() -> None:
    history = bursts(7300, 100)
    end = end_of(history)
    # 300 records arrived after the last run started (written 60 s ago).
    kafka = cluster({0: end + 300}, {0: NOW - 7300.5, 600: NOW - 5000, end: NOW - 60})
    result = judge(kafka, state(history), runs_every=3600)
    assert result.verdict.health is Health.OK, result.verdict
    schedule = result.report.schedule if result.report else None
    assert schedule is not None and schedule.declared and schedule.runs_seen == 2
    run = schedule.last_run
    assert run is not None and (run.first_batch_id, run.batches) == (3, 3)
    assert (run.complete, run.records_left) == (True, 0)
    assert f"{NOW - 100:.0f}" in [
        f"{c.timestamp_ms / 1000:.0f}" for c in kafka.asked("offsets_for_time")
    ]


def test_declared_job_whose_run_left_records_behind() -> None:
    history = bursts(7300, 100)
    end = end_of(history)
    # 50 records written 200 s ago, before the last run started (100 s ago), still unread.
    kafka = cluster({0: end + 50}, {0: NOW - 7300.5, 600: NOW - 5000, end: NOW - 200})
    result = judge(kafka, state(history), runs_every=3600)
    run = result.report.schedule.last_run  # type: ignore[union-attr]
    assert run is not None and (run.complete, run.records_left) == (False, 50)


def test_declared_job_that_missed_its_runs_is_stopped() -> None:
    history = bursts(9000, 5400)
    end = end_of(history)
    kafka = cluster({0: end + 50}, {0: NOW - 9000.5, 600: NOW - 5401, end: NOW - 5000})
    result = judge(kafka, state(history), runs_every=3600)
    assert result.verdict.health is Health.STOPPED
    assert result.verdict.rule == "stopped_schedule"


def test_first_batch_in_flight_reads_the_starting_offsets(tmp_path: Path) -> None:
    (tmp_path / "sources" / "0").mkdir(parents=True)
    (tmp_path / "sources" / "0" / "0").write_bytes(b'\x00v1\n{"t":{"0":100}}')
    kafka = cluster({0: 4100})
    in_flight = state([], in_flight=batch(0, {0: 4100}, NOW - 3), location=str(tmp_path))
    result = judge(kafka, in_flight)
    assert result.report is not None and result.report.total_lag == 4000
    assert result.verdict.health is Health.UNKNOWN
    assert "has not committed a batch yet" in result.verdict.reason
    with_limit = judge(kafka, in_flight, thresholds=Thresholds(max_lag_records_total=10))
    assert with_limit.verdict.health is Health.LAGGING


def test_one_instant_is_the_snapshot_time() -> None:
    history = bursts(10, size=3)
    end = end_of(history)
    kafka = cluster({0: end + 5}, {0: NOW - 10.5, end: NOW - 4})
    result = judge(kafka, state(history), exact_time_lag=True)
    assert result.report is not None and result.report.generated_at == NOW
    assert result.report.max_lag_seconds == pytest.approx(4.0)


# -- HealthCondition: fail fast on STOPPED, except between runs ---------------------------------


def _result(health: Health, schedule: Schedule | None) -> CheckResult:
    fields = {"schedule": schedule, "total_lag": 0, "max_lag_seconds": None}
    report = type("R", (), {**fields, "to_dict": lambda self: {}})()
    result = CheckResult(report, HealthVerdict(health, "why", "rule"), "/ck")  # type: ignore[arg-type]
    return result


@pytest.mark.parametrize(
    ("case", "health", "options", "schedule", "failed"),
    [
        ("data loss", Health.DATA_LOSS, {}, None, True),
        ("stopped streaming job", Health.STOPPED, {}, None, True),
        ("stopped, declared scheduled", Health.STOPPED, {"runs_every": 3600}, None, False),
        ("stopped, looks scheduled", Health.STOPPED, {}, Schedule(None, None, True, 2, None),
         False),
        ("lagging", Health.LAGGING, {}, None, False),
    ],
)  # fmt: skip
def test_fail_fast(
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    health: Health,
    options: dict,
    schedule: Schedule | None,
    failed: bool,
) -> None:
    monkeypatch.setattr(conditions, "breach_message", lambda result: "breach")
    monkeypatch.setattr(conditions, "check", lambda *a, **k: _result(health, schedule))
    probe = HealthCondition("/ck", CheckOptions(**options)).probe(None)  # type: ignore[arg-type]
    assert (probe.failed, probe.done) == (failed, False)


def test_default_fail_fast() -> None:
    assert DEFAULT_FAIL_FAST == (Health.DATA_LOSS, Health.STOPPED)
