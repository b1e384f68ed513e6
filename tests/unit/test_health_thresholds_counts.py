"""Regression: count thresholds given as floats (`sparklag status --window 5`, JSON 5.0).

`window` is a slice bound in the trend rules; as a float every evaluation crashed with
"TypeError: slice indices must be integers".
"""

from __future__ import annotations

import pytest

from airflow_sparklag.health import evaluate
from airflow_sparklag.model.verdict import Health, Thresholds
from tests.unit.test_health_support import NOW, part, report


def test_float_counts_become_ints() -> None:
    t = Thresholds.from_dict(
        {
            "window": 5.0,
            "min_window": 3.0,
            "allowed_lag": 1.0,
            "max_lag_records_per_partition": 100.0,
            "max_lag_records_total": 1000.0,
        }
    )
    assert (t.window, t.min_window, t.allowed_lag) == (5, 3, 1)
    assert (t.max_lag_records_per_partition, t.max_lag_records_total) == (100, 1000)
    assert all(
        type(v) is int
        for v in (t.window, t.min_window, t.allowed_lag, t.max_lag_records_per_partition)
    )


def test_evaluate_with_float_window_does_not_crash() -> None:
    r = report(part(4, committed=10, history=(2, 6, 10)))
    verdict = evaluate(r, Thresholds.from_dict({"window": 5.0, "allowed_lag": 1.0}), now=NOW)
    assert verdict.health in tuple(Health)


def test_fractional_count_is_rejected() -> None:
    with pytest.raises(ValueError, match="window must be a whole number"):
        Thresholds(window=2.5)  # type: ignore[arg-type]
