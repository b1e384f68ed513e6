"""The published JSON Schema (docs/schema/sparklag-1.json) is what the model types give, and
the JSON of the model writes every moment as ISO 8601 UTC text beside epoch milliseconds and a
failed check as CHECK_FAILED. Real output of every command: tests/integration/test_cli.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jsonschema

from airflow_sparklag.model.report import HistoryBatch, InFlightBatch, RealTime
from airflow_sparklag.model.result import SCHEMA, CheckResult, check_document

ROOT = Path(__file__).resolve().parents[2]


def generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("json_schema", ROOT / "scripts/json_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_published_schema_is_generated_from_the_model_types():
    published = (ROOT / "docs/schema/sparklag-1.json").read_text()
    assert published == generator().text(), "run: python scripts/json_schema.py"
    schema = json.loads(published)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"] == {"const": SCHEMA}


def test_moments_are_iso_utc_beside_epoch_milliseconds():
    flight = InFlightBatch(8, started_at=1_700_000_000.25, age_seconds=3.0, planned_records=5)
    assert flight.to_dict()["started_at"] == "2023-11-14T22:13:20.250Z"
    assert flight.to_dict()["started_at_ms"] == 1_700_000_000_250
    assert "age_seconds" in flight.to_dict()  # durations keep their unit
    assert InFlightBatch(8, None, None, 0).to_dict() | {"batch_id": 0} == {
        "batch_id": 0, "started_at": None, "started_at_ms": None, "age_seconds": None,
        "planned_records": 0, "planned_offsets": {},
    }  # fmt: skip
    batch = HistoryBatch(3, timestamp_ms=1_700_000_000_000).to_dict()
    assert (
        batch["timestamp"] == "2023-11-14T22:13:20.000Z"
        and batch["timestamp_ms"] == 1_700_000_000_000
    )
    real_time = RealTime(5.0, checkpoint_at=1_700_000_000.0, checkpoint_times=(None, 1.5)).to_dict()
    assert real_time["checkpoint_times"] == [None, "1970-01-01T00:00:01.500Z"]
    assert real_time["checkpoint_times_ms"] == [None, 1500]


def test_a_failed_check_is_check_failed_in_one_document():
    failed = CheckResult.failed("/ck/gone", "CheckpointNotFound: no checkpoint at /ck/gone")
    document = check_document("status", [failed])
    schema = json.loads((ROOT / "docs/schema/sparklag-1.json").read_text())
    jsonschema.validate(document, schema)
    (result,) = document["results"]
    assert result["verdict"]["health"] == "CHECK_FAILED" == result["verdict"]["rule"].upper()
    assert document["summary"] == {
        "jobs": 1, "health": {"CHECK_FAILED": 1}, "total_lag": 0, "max_lag_seconds": None,
        "failed_checks": 1,
    }  # fmt: skip
