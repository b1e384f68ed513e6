"""The bounded form of a check result that the Airflow classes store (airflow_sparklag/compact.py),
made from real ``compute_lag`` / ``evaluate`` results of synthetic checkpoints."""

from __future__ import annotations

import json

from airflow_sparklag.compact import COLUMNS, LISTED, compact, partition_rows
from airflow_sparklag.health import evaluate
from airflow_sparklag.kafka import KafkaSnapshot, PartitionOffsets
from airflow_sparklag.lag import compute_lag
from airflow_sparklag.model.verdict import Thresholds
from airflow_sparklag.monitor import CheckResult
from tests.unit.test_lag import NOW, batch, state


def result(lags: list[int], thresholds: Thresholds | None = None, **ends: int) -> dict:
    """One topic ``t``: partition p committed at 100 and ``lags[p]`` records behind."""
    committed = {p: 100 for p in range(len(lags))}
    offsets = {p: PartitionOffsets(ends.get(f"start{p}", 0), 100 + lag, None)
               for p, lag in enumerate(lags)}  # fmt: skip
    snapshot = KafkaSnapshot({"t": offsets}, frozenset(), NOW, None)
    checkpoint = state([batch(4, {"t": committed}, NOW - 20), batch(5, {"t": committed}, NOW - 10)])
    report = compute_lag(checkpoint, snapshot, now=NOW)
    verdict = evaluate(report, thresholds or Thresholds(), now=NOW)
    return CheckResult(report, verdict, "/ck/orders").to_dict()


def topic_of(value: dict) -> dict:
    return value["report"]["sources"][0]["topics"][0]


def test_a_large_job_lists_the_most_lagging_in_full_and_every_partition_in_columns():
    lags = [p % 7 for p in range(300)]
    lags[250] = 5000  # the most lagging
    full = result(lags)
    small = compact(full)
    listed = topic_of(small)["partitions"]
    assert len(listed) == LISTED and listed[-1]["partition"] == 250  # partition order kept
    assert min(p["lag"] for p in listed) >= 6 and listed[0] == topic_of(full)["partitions"][6]
    columns = topic_of(small)["partition_columns"]
    assert set(columns) == set(COLUMNS)
    assert columns["partition"] == list(range(300)) and columns["lag"] == lags
    assert columns["committed_offset"] == [100] * 300
    assert small["report"]["partitions_listed"] == {
        "total": 300,
        "listed": LISTED,
        "rule": "flagged, then most lagging; all in partition_columns",
    }
    # what the page and the metrics read: every partition, the listed ones whole
    rows = partition_rows(small["report"])
    assert [(r["topic"], r["partition"], r["lag"]) for r in rows] == [
        (p["topic"], p["partition"], p["lag"]) for p in partition_rows(full["report"])
    ]
    assert rows[250] is listed[-1]
    # totals, verdict and everything else as before; a seventh of the size
    assert small["report"]["total_lag"] == full["report"]["total_lag"] == sum(lags)
    assert small["verdict"] == full["verdict"] and small["location"] == full["location"]
    assert len(json.dumps(small)) * 7 < len(json.dumps(full))


def test_flagged_partitions_are_listed_before_lagging_ones():
    lags = [1000 + p for p in range(30)]
    lags[3] = 0  # retention deleted past its committed offset: data loss, no lag
    full = result(lags, start3=150)
    listed = topic_of(compact(full))["partitions"]
    assert listed[0]["partition"] == 3 and listed[0]["data_loss"]
    assert [p["partition"] for p in listed[1:]] == list(range(11, 30))


def test_a_verdict_names_at_most_listed_partitions_and_says_how_many_it_found():
    full = result([50] * 60, Thresholds(max_lag_records_per_partition=10))
    assert len(full["verdict"]["partitions"]) == 60
    verdict = compact(full)["verdict"]
    assert len(verdict["partitions"]) == LISTED and verdict["partitions_named"] == 60
    assert verdict["partitions"] == full["verdict"]["partitions"][:LISTED]
    assert all(len(f["partitions"]) <= LISTED for f in verdict["findings"])
    assert verdict["reason"] == full["verdict"]["reason"]


def test_a_small_job_keeps_every_partition_in_full():
    full = result([3, 0, 9])
    small = compact(full)
    assert topic_of(small)["partitions"] == topic_of(full)["partitions"]
    assert small["report"]["partitions_listed"]["listed"] == 3
    assert partition_rows(small["report"]) == partition_rows(full["report"])


def test_failed_checks_and_other_payloads_pass_unchanged():
    failed = {"location": "/ck/a", "error": "CheckpointNotFound: /ck/a", "report": None,
              "verdict": {"health": "CHECK_FAILED", "reason": "gone"}}  # fmt: skip
    assert compact(failed) == failed
    progress = {"committed_batch_id": 7, "committed_at": 1.0}
    assert compact(progress) == progress
    assert partition_rows(None) == [] and partition_rows({"sources": None}) == []


def test_the_compact_form_stays_json_safe():
    full = result([5, 0])
    full["report"]["min_time_to_loss_seconds"] = "infinite"  # as json_safe writes math.inf
    text = json.dumps(compact(full), allow_nan=False)
    assert json.loads(text)["report"]["sources"][0]["topics"][0]["partition_columns"]
