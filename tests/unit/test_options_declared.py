"""Every option is declared once and reaches every entry point: a field of CheckOptions or
MigrationOptions without a reader, a CLI flag or its docs row fails here, and so does an
operator or sensor that does not take it as a templated keyword argument."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from airflow_sparklag import params
from airflow_sparklag.cli import build_parser
from airflow_sparklag.migration import MigrationOptions
from airflow_sparklag.model.verdict import Thresholds
from airflow_sparklag.monitor import CheckOptions

DOCS = Path(__file__).resolve().parents[2] / "docs"
KINDS = {
    CheckOptions: ("status", DOCS / "lag-and-health.md"),
    MigrationOptions: ("migrate", DOCS / "operators" / "checkpoint-migration.md"),
}


def _flags(command: str) -> dict[str, set[str]]:
    """dest -> option strings of a subcommand's flags."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    parser = sub.choices[command]  # type: ignore[attr-defined]
    found: dict[str, set[str]] = {}
    for action in parser._actions:
        found.setdefault(action.dest, set()).update(action.option_strings)
    return found


def _doc_rows(page: Path) -> dict[str, str]:
    """option -> the rest of its row in the page's options table (`| `name` | flag | ...`)."""
    rows = re.findall(r"^\| `(\w+)` \| (.*)$", page.read_text(), flags=re.M)
    return dict(rows)


@pytest.mark.parametrize("kind", list(KINDS), ids=lambda k: k.__name__)
def test_every_option_has_a_reader_a_flag_and_a_doc_row(kind: type) -> None:
    command, page = KINDS[kind]
    flags, rows = _flags(command), _doc_rows(page)
    for field in dataclasses.fields(kind):
        assert callable(field.metadata.get("read")), f"{field.name}: no params reader"
        assert field.metadata.get("doc"), f"{field.name}: no doc line"
        assert field.name in rows, f"{field.name}: no row in {page.name}'s options table"
        flag = field.metadata["flag"]
        if flag is None:  # read from other flags: the thresholds
            continue
        assert flag in flags.get(field.name, set()), f"{field.name}: no {flag} on `{command}`"
        assert f"`{flag}`" in rows[field.name], f"{field.name}: {page.name} names another flag"


def test_every_threshold_has_a_flag_and_a_doc_row() -> None:
    flags = _flags("status")
    row = _doc_rows(DOCS / "lag-and-health.md")["thresholds"]
    for field in dataclasses.fields(Thresholds):
        flag = params.flag_of(field.name)  # its name, dashed: one name (docs/names.md)
        assert flag in flags.get(field.name, set()), f"threshold {field.name}: no {flag}"
        assert f"`{flag}`" in row and f"`{field.name}`" in row, f"{field.name}: not in the docs"


def test_a_field_without_a_doc_row_fails() -> None:
    """The check above can fail: an option missing from the table is found."""

    @dataclasses.dataclass(frozen=True)
    class Wider(CheckOptions):
        brand_new: bool = params.option(False, read=params.boolean, flag=None, doc="new")

    rows = _doc_rows(DOCS / "lag-and-health.md")
    missing = [f.name for f in dataclasses.fields(Wider) if f.name not in rows]
    assert missing == ["brand_new"]


def test_options_read_from_rendered_text_name_the_field() -> None:
    options = params.options(MigrationOptions, {"quiet_period": "5m", "dry_run": "yes"})
    assert (options.quiet_period, options.dry_run) == (300.0, True)
    with pytest.raises(params.InvalidParameter, match=r"^force: "):
        params.options(MigrationOptions, {"force": "Ture"})
    assert params.options(CheckOptions, {}) == CheckOptions()


def test_options_travel_as_one_json_safe_dict() -> None:
    options = CheckOptions(Thresholds(max_lag_seconds=60), history=3, runs_every=3600)
    assert CheckOptions.from_dict(options.to_dict()) == options
