"""rule_rewind: offsets went backwards without recovering, or beyond the log end."""

from __future__ import annotations

import pytest
from test_health_support import NOW, part, report

from airflow_sparklag.health import rule_rewind
from airflow_sparklag.model.verdict import Health, Thresholds

CASES = [
    # id, offset history (oldest first), ahead_of_log, window, fires
    ("steady growth", (10, 20, 30), False, 10, False),
    ("flat", (10, 10, 10), False, 10, False),
    ("back below the previous maximum", (10, 30, 20), False, 10, True),
    ("went back but recovered to the maximum", (10, 30, 20, 30), False, 10, False),
    ("went back and recovered above", (10, 30, 20, 31), False, 10, False),
    ("one below the maximum", (10, 30, 29), False, 10, True),
    ("single batch", (30,), False, 10, False),
    ("rewind outside the window is forgotten", (50, 10, 20, 30), False, 3, False),
    ("rewind inside the window", (50, 10, 20, 30), False, 4, True),
    ("ahead of the log end", (10, 20, 30), True, 10, True),
    ("gaps in history are skipped", (10, None, 30, None, 20), False, 10, True),
]


@pytest.mark.parametrize(
    ("case", "history", "ahead", "window", "fires"), CASES, ids=[c[0] for c in CASES]
)
def test_rewind(
    case: str, history: tuple[int | None, ...], ahead: bool, window: int, fires: bool
) -> None:
    p = part(0, committed=history[-1] or 0, history=history, ahead_of_log=ahead)
    thresholds = Thresholds(window=window, min_window=2)
    result = rule_rewind(report(p), thresholds, NOW)
    assert (result is not None) == fires
    if result:
        assert result.health is Health.REWIND
        assert [str(r) for r in result.partitions] == ["t:0"]


def test_ahead_of_log_reason_names_recreation() -> None:
    result = rule_rewind(report(part(0, ahead_of_log=True)), Thresholds(), NOW)
    assert result is not None and "beyond the log end" in result.reason
