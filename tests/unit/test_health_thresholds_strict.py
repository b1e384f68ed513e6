"""Thresholds are strict: numbers only, finite, >= 0, whole for counts; errors name the field.

Text (what Airflow renders) is read by ``airflow_sparklag.params.thresholds`` before it gets
here; the core type knows nothing of templates.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from airflow_sparklag.model.verdict import Thresholds


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_lag_seconds": "60"}, "threshold max_lag_seconds must be a number, got str '60'"),
        ({"window": "5"}, "threshold window must be a number, got str '5'"),
        ({"max_lag_records_total": ""}, "threshold max_lag_records_total must be a number"),
        ({"max_lag_seconds": True}, "threshold max_lag_seconds must be a number, got bool True"),
        ({"allowed_lag": False}, "threshold allowed_lag must be a number, got bool False"),
        ({"max_lag_seconds": [60]}, "threshold max_lag_seconds must be a number, got list [60]"),
        ({"max_commit_age_seconds": {"s": 1}}, "threshold max_commit_age_seconds must be a num"),
        ({"window": None}, "threshold window must be a number, got NoneType None"),
        ({"max_lag_seconds": math.nan}, "threshold max_lag_seconds must be a finite number"),
        ({"max_in_flight_seconds": math.inf}, "threshold max_in_flight_seconds must be a finite"),
        ({"max_lag_records_total": -math.inf}, "threshold max_lag_records_total must be a fin"),
        ({"max_lag_seconds": -0.5}, "threshold max_lag_seconds must be >= 0, got -0.5"),
        ({"max_lag_records_per_partition": -1}, "threshold max_lag_records_per_partition must"),
        ({"allowed_lag": -1}, "threshold allowed_lag must be >= 0, got -1"),
        ({"window": 2.5}, "threshold window must be a whole number, got 2.5"),
        ({"max_lag_records_total": 10.1}, "threshold max_lag_records_total must be a whole"),
        ({"window": 1}, "window and min_window must be >= 2 batches"),
        ({"window": 3, "min_window": 4}, "min_window must not exceed window"),
        ({"max_lagg": 5}, "unknown threshold"),
    ],
)
def test_bad_values_are_refused_naming_the_field(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        Thresholds.from_dict(values)


def test_numbers_are_kept_counts_become_ints() -> None:
    t = Thresholds(
        max_lag_seconds=Fraction(3, 2),  # type: ignore[arg-type]
        max_commit_age_seconds=600,
        max_lag_records_total=1000.0,  # type: ignore[arg-type]
        window=5.0,  # type: ignore[arg-type]
    )
    assert t.max_lag_seconds == 1.5 and type(t.max_lag_seconds) is float
    assert t.max_commit_age_seconds == 600 and type(t.max_commit_age_seconds) is int
    assert t.max_lag_records_total == 1000 and type(t.max_lag_records_total) is int
    assert t.window == 5 and type(t.window) is int


def test_optional_limits_accept_none_and_zero() -> None:
    t = Thresholds(max_lag_seconds=None, max_lag_records_total=0, allowed_lag=0)
    assert (t.max_lag_seconds, t.max_lag_records_total, t.allowed_lag) == (None, 0, 0)
