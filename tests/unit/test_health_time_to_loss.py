"""The time_to_data_loss rule: imminent data loss is a verdict at defaults (a quarter of the
topic's retention, at most 6 h ahead), overridable, off only when set off; a worse verdict
names it; its ages are declared where the estimate cannot date the waiting records."""

from __future__ import annotations

import dataclasses
import math

import pytest

from airflow_sparklag.health import LOSS_NEXT_STEP, ages_time_to_loss, evaluate, rule_time_to_loss
from airflow_sparklag.model.report import PartitionLag
from airflow_sparklag.model.verdict import Health, Thresholds
from tests.unit.test_health_support import NOW, part, report

HOUR = 3600.0
DAY = 24 * HOUR


def waiting(
    ttl: float | None, retention: float | None, lag_seconds: float | None = 5.0
) -> PartitionLag:
    """A lagging partition whose oldest unread record is deleted in ``ttl`` seconds."""
    p = part(50, lag_seconds=lag_seconds)
    return dataclasses.replace(p, time_to_loss_seconds=ttl, retention_seconds=retention)


@pytest.mark.parametrize(
    ("ttl", "retention", "thresholds", "fires"),
    [
        # defaults: a quarter of the retention...
        (89.0, 360.0, {}, True),
        (91.0, 360.0, {}, False),
        # ...and at most 6 h ahead
        (5.9 * HOUR, 7 * DAY, {}, True),
        (6.1 * HOUR, 7 * DAY, {}, False),
        # the share and the horizon overridden
        (170.0, 360.0, {"min_time_to_loss_ratio": 0.5}, True),
        (30.0, 360.0, {"min_time_to_loss_seconds": 20, "min_time_to_loss_ratio": 0.5}, False),
        # the seconds alone: the bound by itself, as before the defaults
        (3000.0, 360.0 * 100, {"min_time_to_loss_seconds": 3600}, True),
        (3000.0, 7 * DAY, {"min_time_to_loss_seconds": 60}, False),
        # off only when set off
        (1.0, 360.0, {"min_time_to_loss_ratio": 0}, False),
        (1.0, 360.0, {"min_time_to_loss_seconds": 0}, False),
        # never deleted, unknown retention or time to loss: silent
        (math.inf, None, {}, False),
        (None, 360.0, {}, False),
        (10.0, None, {}, False),
    ],
)
def test_time_to_loss_rule(
    ttl: float | None, retention: float | None, thresholds: dict, fires: bool
) -> None:
    found = rule_time_to_loss(report(waiting(ttl, retention)), Thresholds(**thresholds), NOW)
    assert (found is not None) == fires
    if found is not None:
        assert found.health is Health.LAGGING and found.rule == "time_to_data_loss"
        assert "retention deletes unread records in" in found.reason
        assert "raise the topic's retention.ms" in found.reason  # what to do


def test_the_reason_says_when_against_which_bound() -> None:
    found = rule_time_to_loss(report(waiting(62.0, 360.0)), Thresholds(), NOW)
    assert found is not None
    assert found.reason.startswith(
        "retention deletes unread records in 62 s (< 90 s, 25% of its 6.0 min retention) on t:0"
    )


def test_a_worse_verdict_names_the_time_to_loss() -> None:
    """STOPPED wins, and its reason says when records are deleted and what to do."""
    stopped = report(waiting(40.0, 360.0, lag_seconds=320.0), batch_ages=(400.0, 390.0, 380.0))
    verdict = evaluate(
        dataclasses.replace(stopped, min_time_to_loss_seconds=40.0),
        Thresholds(max_commit_age_seconds=60),
        now=NOW,
    )
    assert verdict.health is Health.STOPPED
    assert verdict.reason.endswith(f"; retention deletes unread records in 40 s: {LOSS_NEXT_STEP}")


def test_ages_are_declared_where_the_estimate_cannot_date_a_waiting_record() -> None:
    undated = report(waiting(None, 360.0, lag_seconds=None))
    assert ages_time_to_loss(undated, Thresholds(), NOW)
    assert not ages_time_to_loss(undated, Thresholds(min_time_to_loss_ratio=0), NOW)
    assert not ages_time_to_loss(report(waiting(None, None, lag_seconds=None)), Thresholds(), NOW)
    assert not ages_time_to_loss(report(waiting(300.0, 360.0)), Thresholds(), NOW)


def test_a_ratio_above_one_is_refused() -> None:
    with pytest.raises(ValueError, match="share of the topic's retention"):
        Thresholds(min_time_to_loss_ratio=1.5)
