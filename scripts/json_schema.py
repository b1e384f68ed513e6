"""Writes docs/schema/sparklag-1.json: the JSON Schema of the documents `sparklag --json`
prints and the operators and sensors leave in XCom (docs/json.md), generated from the model
types (their fields and type hints, as ``json_safe`` writes them).

    python scripts/json_schema.py          # rewrite the file
    python scripts/json_schema.py --check  # exit 1 when the file is not what the types give

tests/unit/test_json_schema.py runs the check.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_sparklag import history  # noqa: E402
from airflow_sparklag.model import report, result, verdict  # noqa: E402

OUT = ROOT / "docs" / "schema" / "sparklag-1.json"
TYPES = (
    result.CheckResult,
    verdict.HealthVerdict,
    verdict.RuleResult,
    verdict.PartitionRef,
    report.LagReport,
    report.SourceLag,
    report.TopicLag,
    report.PartitionLag,
    report.InFlightBatch,
    report.RealTime,
    report.HistoryBatch,
    report.Breach,
    report.Pace,
    report.Schedule,
    report.Run,
    history.LagHistory,
    history.HistoryPoint,
    history.PartitionPoint,
)
MOMENT = {"type": ["string", "null"], "format": "date-time"}
MS = {"type": ["integer", "null"]}
# Fields whose JSON is not the dataclass's own: CheckResult.to_dict (evidence as Read.to_dict,
# the verdict with CHECK_FAILED) and what `compact` adds to a result in XCom.
EXTRA: dict[str, dict[str, Any]] = {
    "CheckResult": {"evidence": {"type": "array", "items": {"$ref": "#/$defs/Read"}}},
    "HealthVerdict": {"partitions_named": {"type": "integer"}},
    "RuleResult": {"partitions_named": {"type": "integer"}},
    "LagReport": {"partitions_listed": {"type": "object"}},
    "TopicLag": {"partition_columns": {"type": "object"}},
}


def of_type(hint: Any) -> dict[str, Any]:
    """The JSON Schema of a value of type ``hint`` as ``json_safe`` writes it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [of_type(a) for a in args if a is not type(None)]
        with_null = type(None) in args
        if len(options) == 1 and "type" in options[0]:
            kinds = options[0]["type"]
            kinds = kinds if isinstance(kinds, list) else [kinds]
            return {**options[0], "type": [*kinds, *(["null"] * with_null)]}
        return {"anyOf": [*options, *([{"type": "null"}] * with_null)]}
    if origin in (tuple, list, set, frozenset):
        return {"type": "array", "items": of_type(args[0]) if args else {}}
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return {"type": "object", "additionalProperties": of_type(args[1]) if args else {}}
    if dataclasses.is_dataclass(hint):
        return {"$ref": f"#/$defs/{hint.__name__}"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    simple = {bool: "boolean", int: "integer", str: "string", float: "number"}
    if hint is float:  # json_safe: +inf is "infinite" (never), NaN None
        return {"type": ["number", "string"], "pattern": "^infinite$"}
    if hint in simple:
        return {"type": simple[hint]}
    return {}  # Any


def properties(cls: type) -> dict[str, Any]:
    """Each field's schema, moments as ISO text beside epoch milliseconds (``json_safe``)."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        name = f.name
        if name.endswith("_at"):
            out.update({name: MOMENT, f"{name}_ms": MS})
        elif name.endswith(("timestamp_ms", "time_ms")):
            out.update({name[:-3]: MOMENT, name: MS})
        elif f.metadata.get("moment"):
            out[name] = {"type": "array", "items": MOMENT}
            out[f"{name}_ms"] = {"type": "array", "items": MS}
        else:
            out[name] = of_type(hints[name])
    return {**out, **EXTRA.get(cls.__name__, {})}


def definition(cls: type) -> dict[str, Any]:
    props = properties(cls)
    required = [name for name in props if name not in EXTRA.get(cls.__name__, {})]
    return {
        "type": "object",
        "description": (cls.__doc__ or "").strip().split("\n\n")[0],
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def summary() -> dict[str, Any]:
    count = {"type": "integer", "minimum": 0}
    return {
        "type": "object",
        "description": "The jobs of the document counted; checks add verdict counts and "
        "totals, a wait its condition and outcome.",
        "properties": {
            "jobs": count,
            "failed_checks": count,
            "health": {"type": "object", "additionalProperties": count},
            "total_lag": count,
            "max_lag_seconds": {"type": ["number", "null"]},
            "condition": {"enum": ["health", "progress", "catch_up"]},
            "done": {"type": "boolean"},
            "failed": {"type": "boolean"},
            "timed_out": {"type": "boolean"},
            "message": {"type": "string"},
            "points": count,
            "storage_requests": count,
        },
        "required": ["jobs", "failed_checks"],
        "additionalProperties": False,
    }


def schema() -> dict[str, Any]:
    defs = {cls.__name__: definition(cls) for cls in TYPES}
    health = defs["HealthVerdict"]["properties"]["health"]
    health["enum"] = [*health["enum"], result.CHECK_FAILED]
    defs["Read"] = {
        "type": "object",
        "properties": {"read": {"type": "string"}, "asked_by": of_type(list[str])},
        "required": ["read", "asked_by"],
        "additionalProperties": False,
    }
    defs["Summary"] = summary()
    # What other commands and tasks return, each its own result (not a model type).
    # (never a check result: "verdict" is not theirs)
    loose = {"type": "object", "properties": {"verdict": False}, "additionalProperties": True}
    for name, what, required in (
        ("Snapshot", "sparklag snapshot; SparkCheckpointSnapshotOperator",
         ["path", "checkpoint_location", "committed_batch_id", "starting_offsets"]),
        ("Migration", "sparklag migrate; CheckpointMigrationOperator",
         ["checkpoint", "status", "starting_offsets", "refusals"]),
        ("GroupExport", "ConsumerGroupExportOperator", ["group_id", "offsets", "total_lag"]),
        ("Progress", "wait progress; SparkCheckpointProgressSensor", ["location"]),
        ("CatchUp", "wait catch-up; SparkKafkaCatchUpSensor",
         ["location", "target_time", "target_time_ms", "records_behind"]),
    ):  # fmt: skip
        defs[name] = {**loose, "description": what, "required": required}
    defs["Progress"]["properties"] = {
        "verdict": False,
        "committed_at": MOMENT,
        "committed_at_ms": MS,
    }
    results = ("CheckResult", "LagHistory", "Snapshot", "Migration", "GroupExport", "CatchUp")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/airflow-provider-sparklag/schema/sparklag-1.json",
        "title": result.SCHEMA,
        "description": "Every document of `sparklag --json` and every XCom of the sparklag "
        "operators and sensors (docs/json.md). Generated by scripts/json_schema.py.",
        "type": "object",
        "properties": {
            "schema": {"const": result.SCHEMA},
            "command": {
                "enum": [
                    "status",
                    "wait",
                    "history",
                    "snapshot",
                    "migrate",
                    "check",
                    "fleet",
                    "export",
                ]
            },
            "summary": {"$ref": "#/$defs/Summary"},
            "results": {
                "type": "array",
                "items": {
                    "anyOf": [{"$ref": f"#/$defs/{name}"} for name in results]
                    + [{"$ref": "#/$defs/Progress"}]
                },
            },
            "failing": {"type": "array", "items": {"type": "object"}},
        },
        "required": ["schema", "command", "summary", "results"],
        "additionalProperties": False,
        "$defs": defs,
    }


def text() -> str:
    return json.dumps(schema(), indent=2) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if OUT.read_text() == text() else 1)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text())
