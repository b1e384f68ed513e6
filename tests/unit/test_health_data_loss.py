"""rule_data_loss: committed offset below the log start."""

from __future__ import annotations

import pytest
from test_health_support import NOW, part, report

from airflow_sparklag.health import rule_data_loss
from airflow_sparklag.model.verdict import Health, PartitionRef, Thresholds

CASES = [
    # id, partitions, fires
    ("committed equals log start", [part(5, committed=10, log_start=10)], False),
    ("committed one below log start", [part(5, committed=9, log_start=10, data_loss=True)], True),
    ("no lag at all", [part(0)], False),
    (
        "one of two partitions lost records",
        [part(0), part(3, partition=1, committed=1, log_start=7, data_loss=True)],
        True,
    ),
]


@pytest.mark.parametrize(("case", "parts", "fires"), CASES, ids=[c[0] for c in CASES])
def test_data_loss(case: str, parts: list, fires: bool) -> None:
    result = rule_data_loss(report(*parts), Thresholds(), NOW)
    assert (result is not None) == fires
    if result:
        assert result.health is Health.DATA_LOSS
        assert result.partitions == tuple(
            PartitionRef(p.topic, p.partition) for p in parts if p.data_loss
        )
        assert "deleted before being read" in result.reason


def test_reason_counts_records_lost() -> None:
    parts = [part(5, committed=2, log_start=10, data_loss=True)]
    result = rule_data_loss(report(*parts), Thresholds(), NOW)
    assert result is not None and result.reason.startswith("8 record(s)")
    assert "t:0" in result.reason
