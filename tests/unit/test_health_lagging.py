"""rule_lagging: lag thresholds, or lag that grew at every batch of the window."""

from __future__ import annotations

import pytest
from test_health_support import NOW, part, report

from airflow_sparklag.health import rule_lagging
from airflow_sparklag.model.verdict import Health, Thresholds

THRESHOLD_CASES = [
    # id, partitions, thresholds, fires, offending partitions
    ("per partition at the limit", [part(100)], {"max_lag_records_per_partition": 100}, False, []),
    ("per partition over", [part(101)], {"max_lag_records_per_partition": 100}, True, ["t:0"]),
    (
        "one partition over of two",
        [part(10), part(101, partition=1)],
        {"max_lag_records_per_partition": 100},
        True,
        ["t:1"],
    ),
    (
        "total at the limit",
        [part(60), part(40, partition=1)],
        {"max_lag_records_total": 100},
        False,
        [],
    ),
    (
        "total over",
        [part(60), part(41, partition=1)],
        {"max_lag_records_total": 100},
        True,
        ["t:0", "t:1"],
    ),
    ("seconds at the limit", [part(5, lag_seconds=300.0)], {"max_lag_seconds": 300}, False, []),
    ("seconds over", [part(5, lag_seconds=300.5)], {"max_lag_seconds": 300}, True, ["t:0"]),
    ("seconds unknown never fires", [part(5, lag_seconds=None)], {"max_lag_seconds": 1}, False, []),
    ("all limits off", [part(10**9, lag_seconds=10.0**6)], {}, False, []),
]


@pytest.mark.parametrize(
    ("case", "parts", "limits", "fires", "offending"),
    THRESHOLD_CASES,
    ids=[c[0] for c in THRESHOLD_CASES],
)
def test_thresholds(case: str, parts: list, limits: dict, fires: bool, offending: list) -> None:
    result = rule_lagging(report(*parts), Thresholds(**limits), NOW)
    assert (result is not None) == fires
    if result:
        assert result.health is Health.LAGGING
        assert [str(r) for r in result.partitions] == offending


TREND_CASES = [
    # id, offset history, live lag, allowed_lag, fires
    # backlog samples: differences of consecutive offsets (min_window of them), then the live lag
    ("growing at every batch", (0, 10, 30, 60), 40, 0, True),  # 10, 20, 30, 40
    ("growing, then flat live lag", (0, 10, 30, 60), 30, 0, False),  # 10, 20, 30, 30
    ("shrinking", (0, 40, 70, 90), 10, 0, False),  # 40, 30, 20, 10
    ("one dip in the middle", (0, 10, 30, 40, 70), 40, 0, False),  # 10, 20, 10, 30, 40
    ("too few batches", (0, 10), 40, 0, False),  # 10, then 40
    # A job that keeps 3 batches (minBatchesToRetain=2): 2 backlog samples and the live lag
    # "grow" by chance at one poll in six on a steady stream; min_window samples are needed.
    ("two backlog samples are too few", (0, 10, 30), 40, 0, False),  # 10, 20, then 40
    ("just enough batches", (0, 10, 30, 60), 40, 0, True),  # 10, 20, 30, then 40
    ("growing but within allowed_lag", (0, 1, 3, 6), 4, 4, False),
    ("growing, live lag one over allowed_lag", (0, 1, 3, 6), 5, 4, True),
]


@pytest.mark.parametrize(
    ("case", "history", "lag", "allowed", "fires"), TREND_CASES, ids=[c[0] for c in TREND_CASES]
)
def test_lag_trend(
    case: str, history: tuple[int, ...], lag: int, allowed: int, fires: bool
) -> None:
    p = part(lag, committed=history[-1], history=history)
    ages = tuple(float(10 * (len(history) - i)) for i in range(len(history)))
    thresholds = Thresholds(allowed_lag=allowed, min_window=3)
    result = rule_lagging(report(p, batch_ages=ages), thresholds, NOW)
    assert (result is not None) == fires
    if result:
        assert "grew at every batch" in result.reason


def test_trend_looks_only_at_the_window() -> None:
    # Window 3 = the last 3 backlog samples + the live lag; the early 50 is outside it.
    p = part(40, committed=100, history=(0, 50, 60, 70, 100))  # (50,) 10, 10, 30, then 40
    assert rule_lagging(report(p), Thresholds(window=3, min_window=3), NOW) is None
    p = part(40, committed=100, history=(0, 50, 60, 75, 100))  # (50,) 10, 15, 25, then 40
    assert rule_lagging(report(p), Thresholds(window=3, min_window=3), NOW) is not None
