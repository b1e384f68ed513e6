"""forecast.py: when each lag threshold is crossed at the report's rates (one table), why it
is not forecast, and the rule time_to_breach (one table)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from test_health_support import NOW, part, report

from airflow_sparklag.forecast import (
    breach_text,
    reads_time_to_breach,
    rule_time_to_breach,
    time_to_breach,
)
from airflow_sparklag.health import evaluate
from airflow_sparklag.model.report import LagReport, Reads
from airflow_sparklag.model.verdict import Health, Thresholds


def lagging(
    lag: int = 400,
    *,
    produced: float | None = 100.0,
    consumed: float | None = 50.0,
    age: float | None = 30.0,
    batches: int = 3,
) -> LagReport:
    """A job with ``lag`` records waiting (two partitions: ``lag`` and ``lag // 4``), the
    oldest ``age`` s old, at these rates."""
    parts = (part(lag, lag_seconds=age), part(lag // 4, partition=1, lag_seconds=age))
    made = report(*parts, batch_ages=tuple(float(10 * i) for i in range(batches, 0, -1)))
    return dataclasses.replace(
        made,
        consumption_rate=consumed,
        production_rate=produced,
        max_lag_seconds=age,
    )


# name: (report, thresholds, expected [(threshold, seconds, unknown starts with)])
CASES: dict[str, tuple[LagReport, dict[str, Any], list[tuple[str, float | None, str | None]]]] = {
    "no thresholds: nothing": (lagging(), {}, []),
    "total: (1000 - 500) / 50 records/s": (
        lagging(),
        {"max_lag_records_total": 1000},
        [("max_lag_records_total", 10.0, None)],
    ),
    "per partition: (1000 - 400) / 50, the earliest": (
        lagging(),
        {"max_lag_records_per_partition": 1000},
        [("max_lag_records_per_partition", 12.0, None)],
    ),
    "seconds: (600 - 30) / (50 / 100) s a second": (
        lagging(),
        {"max_lag_seconds": 600},
        [("max_lag_seconds", 1140.0, None)],
    ),
    "crossed already: 0": (
        lagging(2000),
        {"max_lag_records_total": 1000, "max_lag_seconds": 10},
        [("max_lag_records_total", 0.0, None), ("max_lag_seconds", 0.0, None)],
    ),
    "rates unknown: not forecast, says why": (
        lagging(consumed=None, produced=None, batches=1),
        {"max_lag_records_total": 1000},
        [("max_lag_records_total", None, "rates unknown (1 batch")],
    ),
    "backlog shrinks: never, says why": (
        lagging(consumed=120.0),
        {"max_lag_records_total": 1000},
        [("max_lag_records_total", math.inf, "the backlog does not grow")],
    ),
    "growth within noise (5 % of production): never": (
        lagging(consumed=96.0),
        {"max_lag_records_total": 1000},
        [("max_lag_records_total", math.inf, "the backlog does not grow")],
    ),
    "age unknown: not forecast, says why": (
        lagging(age=None),
        {"max_lag_seconds": 600},
        [("max_lag_seconds", None, "the waiting records' age is unknown")],
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_time_to_breach(name: str) -> None:
    made, limits, expected = CASES[name]
    found = time_to_breach(made, Thresholds(**limits))
    got = [(b.threshold, b.seconds, b.unknown) for b in found]
    assert [(t, s) for t, s, _ in got] == [(t, s) for t, s, _ in expected]
    for (_, _, unknown), (_, _, why) in zip(got, expected, strict=True):
        assert (unknown is None) == (why is None)
        assert unknown is None or why is None or unknown.startswith(why)


def test_no_committed_batch_or_no_kafka_source_no_forecast() -> None:
    limits = Thresholds(max_lag_records_total=10)
    assert time_to_breach(dataclasses.replace(lagging(), committed_batch_id=None), limits) == ()
    assert time_to_breach(report(part(5), kafka=False), limits) == ()
    assert time_to_breach(lagging(), None) == ()


def test_breach_text() -> None:
    found = time_to_breach(lagging(), Thresholds(max_lag_records_total=1000, max_lag_seconds=600))
    assert [breach_text(b) for b in found] == [
        "max_lag_records_total 1000 crossed in 10 s at +50.0 records/s",
        "max_lag_seconds 600 crossed in 19.0 min at +50.0 records/s",
    ]
    unknown = time_to_breach(lagging(age=None), Thresholds(max_lag_seconds=600))
    assert breach_text(unknown[0]) == (
        "max_lag_seconds 600 not forecast: the waiting records' age is unknown"
    )


def _with_forecast(made: LagReport, limits: Thresholds) -> LagReport:
    return dataclasses.replace(made, time_to_breach=time_to_breach(made, limits))


# name: (report, thresholds, fires)
RULE_CASES: dict[str, tuple[LagReport, dict[str, Any], bool]] = {
    "sooner than the bound: fires": (
        lagging(),
        {"max_lag_records_total": 1000, "min_time_to_breach_seconds": 60},
        True,
    ),
    "later than the bound: silent": (
        lagging(),
        {"max_lag_records_total": 1000, "min_time_to_breach_seconds": 5},
        False,
    ),
    "no bound: silent": (lagging(), {"max_lag_records_total": 1000}, False),
    "crossed already: the lagging rule's, not this one's": (
        lagging(2000),
        {"max_lag_records_total": 1000, "min_time_to_breach_seconds": 60},
        False,
    ),
    "rates unknown: silent": (
        lagging(consumed=None, produced=None, batches=1),
        {"max_lag_records_total": 1000, "min_time_to_breach_seconds": 3600},
        False,
    ),
    "backlog shrinks: silent": (
        lagging(consumed=120.0),
        {"max_lag_records_total": 1000, "min_time_to_breach_seconds": 3600},
        False,
    ),
}


@pytest.mark.parametrize("name", RULE_CASES)
def test_rule_time_to_breach(name: str) -> None:
    made, limits, fires = RULE_CASES[name]
    thresholds = Thresholds(**limits)
    found = rule_time_to_breach(_with_forecast(made, thresholds), thresholds, NOW)
    assert (found is not None) == fires
    if found is not None:
        assert found.health is Health.LAGGING and found.rule == "time_to_breach"
        assert "max_lag_records_total 1000 crossed in 10 s at +50.0 records/s (< 60 s)" in (
            found.reason
        )
        assert "maxOffsetsPerTrigger" in found.reason
        assert [str(p) for p in found.partitions] == ["t:0", "t:1"]


def test_the_verdict_is_lagging_before_the_threshold_is_crossed() -> None:
    thresholds = Thresholds(max_lag_records_total=1000, min_time_to_breach_seconds=60)
    verdict = evaluate(_with_forecast(lagging(), thresholds), thresholds, now=NOW)
    assert (verdict.health, verdict.rule) == (Health.LAGGING, "time_to_breach")


def test_reads_the_window_only_with_its_bound_and_records_waiting() -> None:
    bound = Thresholds(min_time_to_breach_seconds=60)
    assert reads_time_to_breach(lagging(), bound, NOW, False) is Reads.WINDOW
    assert reads_time_to_breach(lagging(), Thresholds(), NOW, False) is Reads.NOTHING
    assert reads_time_to_breach(report(part(0)), bound, NOW, False) is Reads.NOTHING
