"""A check result's bounded form, for the stores that keep every check: Airflow's XCom and
trigger events, both rows of Airflow's metadata database.

``CheckResult.to_dict()`` lists every partition in full (~470 bytes each: 4.7 MB per check at
10,000 partitions, docs/benchmarks.md). ``compact(result.to_dict())`` keeps ``LISTED`` of them
in full (every flagged one, then the most lagging), every partition's offsets and lag as five
columns of its topic (``partition_columns``), says so in ``partitions_listed`` and names at
most ``LISTED`` partitions per verdict rule; everything else is unchanged
(docs/operators/spark-lag-check.md shows the shape).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LISTED = 20  # partitions listed in full: the page draws the 8 most lagging
COLUMNS = ("partition", "committed_offset", "log_end_offset", "lag", "lag_seconds")
FLAGS = ("data_loss", "ahead_of_log", "removed_partition")
RULE = "flagged, then most lagging; all in partition_columns"


def compact(result: Mapping[str, Any], listed: int = LISTED) -> dict[str, Any]:
    """``result`` (a ``CheckResult.to_dict()``, or a document of them: each of its
    ``results``) with at most ``listed`` partitions in full."""
    if isinstance(result.get("results"), list):
        results = [compact(r, listed) if isinstance(r, Mapping) else r for r in result["results"]]
        return {**result, "results": results}
    compacted = dict(result)
    if isinstance(result.get("report"), Mapping):
        compacted["report"] = compact_report(result["report"], listed)
    if isinstance(result.get("verdict"), Mapping):
        verdict = _named(result["verdict"], listed)
        findings = verdict.get("findings")
        if isinstance(findings, list):
            verdict["findings"] = [_named(f, listed) if isinstance(f, Mapping) else f
                                   for f in findings]  # fmt: skip
        compacted["verdict"] = verdict
    return compacted


def compact_report(report: Mapping[str, Any], listed: int = LISTED) -> dict[str, Any]:
    """A ``LagReport.to_dict()`` with the partitions that matter most in full, every one in
    its topic's ``partition_columns``."""
    every = [
        p
        for source in report.get("sources") or ()
        for topic in source.get("topics") or ()
        for p in topic.get("partitions") or ()
    ]
    kept = {id(p) for p in sorted(every, key=_importance)[:listed]}
    sources = []
    for source in report.get("sources") or ():
        topics = []
        for topic in source.get("topics") or ():
            parts = topic.get("partitions") or []
            columns = {name: [p.get(name) for p in parts] for name in COLUMNS}
            shown = [p for p in parts if id(p) in kept]
            topics.append({**topic, "partitions": shown, "partition_columns": columns})
        sources.append({**source, "topics": topics})
    listed_count = min(len(every), listed)
    cut = {"total": len(every), "listed": listed_count, "rule": RULE}
    return {**report, "sources": sources, "partitions_listed": cut}


def _importance(partition: Mapping[str, Any]) -> tuple[bool, float, float]:
    flagged = any(partition.get(flag) for flag in FLAGS)
    return (not flagged, -_number(partition.get("lag")), -_number(partition.get("lag_seconds")))


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _named(verdict: Mapping[str, Any], listed: int) -> dict[str, Any]:
    """A verdict or finding naming at most ``listed`` partitions (``partitions_named``: how
    many it found, when that is more)."""
    named = dict(verdict)
    refs = verdict.get("partitions")
    if isinstance(refs, list) and len(refs) > listed:
        named["partitions"] = refs[:listed]
        named["partitions_named"] = len(refs)
    return named


def partition_rows(report: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """Every partition of a report dict, full or compact (then from its columns: the listed
    ones with all their fields, the others with ``topic`` and ``COLUMNS``), in topic order."""
    rows: list[Mapping[str, Any]] = []
    for source in (report or {}).get("sources") or ():
        for topic in source.get("topics") or ():
            listed = [p for p in topic.get("partitions") or () if isinstance(p, Mapping)]
            columns = topic.get("partition_columns")
            if not isinstance(columns, Mapping):
                rows.extend(listed)
                continue
            full = {p.get("partition"): p for p in listed}
            for values in zip(*(columns.get(name) or () for name in COLUMNS), strict=False):
                row = dict(zip(COLUMNS, values, strict=True))
                rows.append(full.get(row["partition"]) or {"topic": topic.get("topic"), **row})
    return rows
