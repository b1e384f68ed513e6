"""evaluate(): rule order (worst wins), UNKNOWN and OK, Thresholds and JSON output."""

from __future__ import annotations

import json

import pytest
from test_health_support import NOW, part, report

from airflow_sparklag.health import RULES, evaluate
from airflow_sparklag.model.verdict import Health, Thresholds


def test_rule_order_is_worst_first() -> None:
    assert [r.name for r in RULES] == [
        "data_loss",
        "rewind",
        "stopped",
        "stopped_real_time",
        "stalled",
        "time_to_data_loss",
        "lagging",
        "lagging_real_time",
        "time_to_breach",
        "batch_time",
        "short_history",
    ]
    # UNKNOWN sits below OK: the short-history rule decides only when no other rule fired.
    assert [r.name for r in RULES][-1] == "short_history"


def test_worst_rule_wins_and_all_findings_are_kept() -> None:
    lost = part(5, committed=1, log_start=3, data_loss=True, history=(1,))
    late = part(500, partition=1, lag_seconds=900.0)
    verdict = evaluate(
        report(lost, late, batch_ages=(3600.0,)),
        Thresholds(max_lag_seconds=60, max_commit_age_seconds=60),
        now=NOW,
    )
    assert verdict.health is Health.DATA_LOSS
    assert [f.rule for f in verdict.findings] == ["data_loss", "stopped", "lagging"]
    assert [str(p) for p in verdict.partitions] == ["t:0"]


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        ({"committed": False}, "no_commit"),
        ({"kafka": False}, "no_kafka_source"),
    ],
)
def test_unknown_without_anything_to_judge(kwargs: dict, rule: str) -> None:
    verdict = evaluate(report(part(5), **kwargs), Thresholds(max_lag_records_total=0))
    assert (verdict.health, verdict.rule) == (Health.UNKNOWN, rule)


def test_missing_topic_is_unknown_not_ok() -> None:
    verdict = evaluate(report(part(0), part(0, topic="gone"), missing_topics=("gone",)))
    assert (verdict.health, verdict.rule) == (Health.UNKNOWN, "topic_missing")
    assert "gone" in verdict.reason


def test_missing_topic_does_not_hide_a_worse_finding() -> None:
    r = report(part(50), part(0, topic="gone"), missing_topics=("gone",))
    assert evaluate(r, Thresholds(max_lag_records_total=10)).health is Health.LAGGING


def test_ok() -> None:
    verdict = evaluate(report(part(0), part(3, partition=1)), Thresholds(max_lag_records_total=3))
    assert (verdict.health, verdict.rule, verdict.findings) == (Health.OK, "ok", ())


def test_now_defaults_to_report_time() -> None:
    r = report(part(5), batch_ages=(30.0,))
    thresholds = Thresholds(max_commit_age_seconds=60)
    assert evaluate(r, thresholds).health is Health.OK
    assert evaluate(r, thresholds, now=NOW + 100).health is Health.STOPPED


def test_verdict_to_dict_is_json_safe() -> None:
    r = report(part(5, committed=1, log_start=3, data_loss=True, history=(1,)))
    data = json.loads(json.dumps(evaluate(r).to_dict(), allow_nan=False))
    assert data["health"] == "DATA_LOSS"
    assert data["partitions"] == [{"topic": "t", "partition": 0}]
    assert data["findings"][0]["rule"] == "data_loss"


# -- Thresholds --------------------------------------------------------------------------------


def test_thresholds_defaults() -> None:
    t = Thresholds()
    assert t.to_dict() == {
        "max_lag_records_per_partition": None,
        "max_lag_records_total": None,
        "max_lag_seconds": None,
        "max_commit_age_seconds": None,
        "max_in_flight_seconds": None,
        "min_time_to_loss_seconds": None,
        "min_time_to_loss_ratio": None,
        "min_time_to_breach_seconds": None,
        "max_batch_time_ratio": None,
        "allowed_lag": 0,
        "window": 10,
        "min_window": 3,
    }


def test_thresholds_round_trip() -> None:
    t = Thresholds(max_lag_seconds=120.0, allowed_lag=1, window=5, min_window=2)
    assert Thresholds.from_dict(t.to_dict()) == t
    assert Thresholds.from_dict(None) == Thresholds()


@pytest.mark.parametrize(
    "values",
    [
        {"max_lag": 5},
        {"allowed_lag": -1},
        {"max_lag_seconds": -0.5},
        {"window": 1},
        {"window": 3, "min_window": 4},
    ],
)
def test_thresholds_reject_bad_values(values: dict) -> None:
    with pytest.raises(ValueError):
        Thresholds.from_dict(values)


def test_thresholds_refuse_text() -> None:
    # Rendered template text is read by airflow_sparklag.params.thresholds, not here.
    for values, field in [
        ({"max_lag_seconds": "60"}, "max_lag_seconds"),
        ({"window": "5"}, "window"),
        ({"max_lag_records_total": ""}, "max_lag_records_total"),
    ]:
        with pytest.raises(ValueError, match=f"threshold {field} must be a number, got str"):
            Thresholds.from_dict(values)


# -- before the first commit -------------------------------------------------------------------


def test_first_batch_in_flight_says_nothing_is_committed_yet() -> None:
    r = report(part(4000), committed=False, in_flight_age=20.0)
    verdict = evaluate(r, Thresholds())
    assert (verdict.health, verdict.rule) == (Health.UNKNOWN, "no_commit")
    assert "has not committed a batch yet" in verdict.reason
    assert "in flight for 20 s" in verdict.reason
    assert "lag 4000 record(s) from the offsets it started at" in verdict.reason


def test_first_batch_in_flight_is_judged_by_the_thresholds() -> None:
    r = report(part(4000), committed=False, in_flight_age=20.0)
    verdict = evaluate(r, Thresholds(max_lag_records_total=1000))
    assert verdict.health is Health.LAGGING
    assert verdict.reason.endswith(
        "(the query has not committed a batch yet: batch 1 in flight for 20 s)"
    )
    stalled = evaluate(r, Thresholds(max_in_flight_seconds=10))
    assert stalled.health is Health.STALLED and "not committed" in stalled.reason
