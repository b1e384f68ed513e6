"""docs/names.md, made from the code: each thing's name on the command line, in Airflow, in the
``sparklag`` connection and in the metrics, and the old names still read.

    python scripts/names_table.py          # rewrites docs/names.md

tests/airflow/test_names.py makes the page again and fails when it differs, so a new flag,
argument, connection key or metric cannot go without its row.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parents[1] / "docs" / "names.md"

# The command line's words where Airflow's differ, and why (the only differences allowed).
CLI_WORDS = {
    "checkpoint": ("location", "the positional CHECKPOINT"),
    "checkpoints": ("locations", "the positional CHECKPOINT..., the Spark scan's --checkpoints"),
}
# Flags whose Airflow counterpart is Airflow's own argument of every sensor.
AIRFLOW_OWN = {"max_wait": "timeout", "poll_interval": "poke_interval"}
# Airflow metrics of a job that the exporter does not have, and why.
AIRFLOW_ONLY_METRICS = {
    "max_partition_lag_records": "the exporter has every partition's lag",
    "records_behind": "a catch-up wait's poll",
}
# Metrics sent besides the report's gauges (metrics.JOB_GAUGES) -> the XCom field they send.
OTHER_AIRFLOW_METRICS = {
    "health": "verdict.health",
    "check_errors": "error",
    "records_behind": "records_behind",
}


def _cell(text: str) -> str:
    return " ".join(text.replace("%%", "%").replace("|", "\\|").split())


def cli_names() -> dict[str, dict[str, Any]]:
    """name -> {"flags": [...], "commands": [...], "doc": help}: every flag of `sparklag` and
    of the Spark scan, named by its destination (the command line's own words mapped by
    :data:`CLI_WORDS`)."""
    from airflow_sparklag import cli, spark_scan

    found: dict[str, dict[str, Any]] = {}
    commands = next(a for a in cli.build_parser()._actions if a.dest == "command").choices
    parsers = {**commands, "spark scan": spark_scan.build_parser()}  # type: ignore[dict-item]
    for command, parser in parsers.items():
        for action in parser._actions:
            if action.dest in ("help", "version") or isinstance(action, argparse._SubParsersAction):
                continue
            name = CLI_WORDS.get(action.dest, (action.dest, ""))[0]
            flags = list(action.option_strings) or [str(action.metavar or action.dest.upper())]
            row = found.setdefault(name, {"flags": [], "commands": [], "doc": action.help or ""})
            row["repeatable"] = isinstance(action, argparse._AppendAction)
            row["flags"] += [flag for flag in flags if flag not in row["flags"]]
            row["commands"].append(command)
    return found


def airflow_classes() -> list[type]:
    """The operators and sensors, in module order."""
    from airflow.providers.common.compat.sdk import BaseOperator

    from airflow_sparklag.operators import fleet, snapshot, sparklag
    from airflow_sparklag.sensors import sparklag as sensors

    return [
        value
        for module in (sparklag, fleet, snapshot, sensors)
        for name, value in vars(module).items()
        if isinstance(value, type)
        and issubclass(value, BaseOperator)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    ]


def airflow_names() -> dict[str, list[str]]:
    """Argument -> the classes taking it: the operators' and sensors' own arguments (not
    BaseOperator's nor BaseSensorOperator's), old names left out."""
    from airflow.providers.common.compat.sdk import BaseOperator, BaseSensorOperator

    from airflow_sparklag.operators.base import RENAMED

    airflow_own = {
        name
        for base in (BaseOperator, BaseSensorOperator)
        for name in inspect.signature(base.__init__).parameters
    }
    found: dict[str, list[str]] = {}
    for cls in airflow_classes():
        init = cls.__init__  # type: ignore[misc]
        for name, parameter in inspect.signature(init).parameters.items():
            if parameter.kind is parameter.VAR_KEYWORD or name == "self":
                continue
            if name not in airflow_own and name not in RENAMED:
                found.setdefault(name, []).append(cls.__name__)
    return found


def option_docs() -> dict[str, str]:
    """Field -> its doc line, for every options dataclass and the connection's keys."""
    from airflow_sparklag.cli import THRESHOLD_HELP
    from airflow_sparklag.hooks.bundle import FIELDS
    from airflow_sparklag.hooks.sparklag import ConnectionIds
    from airflow_sparklag.migration import MigrationOptions
    from airflow_sparklag.monitor import CheckOptions

    docs = {key: description for key, (_, description, _) in FIELDS.items()}
    docs.update(THRESHOLD_HELP)
    for kind in (ConnectionIds, MigrationOptions, CheckOptions):
        docs.update({f.name: f.metadata["doc"] for f in dataclasses.fields(kind)})
    return docs


def rows() -> Iterator[list[str]]:
    """One row a name: name, command line, Airflow, `sparklag` connection, what."""
    from airflow_sparklag.hooks.bundle import FIELDS
    from airflow_sparklag.model.verdict import Thresholds

    cli, airflow, docs = cli_names(), airflow_names(), option_docs()
    every = len(airflow_classes())
    thresholds = {f.name for f in dataclasses.fields(Thresholds)}
    for name in sorted({*cli, *airflow, *FIELDS, *thresholds}):
        flags = cli.get(name)
        shown = ""
        if flags:
            on = ", ".join(flags["commands"])
            again = ", repeatable" if flags["repeatable"] else ""
            shown = f"{', '.join(f'`{flag}`' for flag in flags['flags'])} ({on}{again})"
        classes = airflow.get(name, [])
        if name in thresholds:
            argument = f'`thresholds={{"{name}": ...}}`'
        elif classes:
            who = "every class" if len(classes) == every else ", ".join(classes)
            argument = f"`{name}` ({who})"
        else:
            argument = ""
        key = f"`{name}`" if name in FIELDS else ""
        note = next((f"CLI: {why}" for n, why in CLI_WORDS.values() if n == name), "")
        if name in AIRFLOW_OWN:
            note = f"a sensor's `{AIRFLOW_OWN[name]}`"
        what = docs.get(name) or (flags or {}).get("doc", "")
        yield [f"`{name}`", shown, argument, key, _cell(what + (f" ({note})" if note else ""))]


def renamed_rows() -> Iterator[list[str]]:
    """Old name -> new name, where: the old names still read until the next release."""
    from airflow_sparklag.hooks.bundle import RENAMED as BUNDLE
    from airflow_sparklag.operators import metrics
    from airflow_sparklag.operators.base import RENAMED as ARGUMENTS
    from airflow_sparklag.params import RENAMED_FLAGS

    for place, renamed in (
        ("command line", RENAMED_FLAGS),
        ("operator argument", ARGUMENTS),
        ("`sparklag` connection", BUNDLE),
        ("Airflow metric", metrics.RENAMED),
    ):
        for old, new in renamed.items():
            yield [place, f"`{old}`", f"`{new}`"]


def exporter_names() -> dict[str, str]:
    """Name -> help of every metric family `sparklag serve` exposes (counters with
    ``_total``)."""
    from airflow_sparklag.exporter import LagExporter, job_families

    exporter = LagExporter(checker=None)  # type: ignore[arg-type]
    exporter._duration = 0.0  # so that the refresh duration is listed
    families = [*job_families([], 0), *exporter._families(stale=False)]
    return {f.name + ("_total" if f.type == "counter" else ""): f.documentation for f in families}


def metric_rows() -> Iterator[list[str]]:
    """One row a metric: Airflow (StatsD / OpenTelemetry), Prometheus, the XCom field, what."""
    from airflow_sparklag.exporter import PREFIX
    from airflow_sparklag.operators import metrics

    prometheus = exporter_names()
    airflow = {**metrics.JOB_GAUGES, **OTHER_AIRFLOW_METRICS}
    airflow.update({name: f"partitions[].{key}" for name, key in metrics.PARTITION_GAUGES.items()})
    shown: set[str] = set()
    for name, field in airflow.items():
        job = name not in metrics.PARTITION_GAUGES
        paths = [f"sparklag.<job>.{name}"] if job else []
        if name == "check_errors" or not job:
            paths.append(f"sparklag.{name}")
        candidates = [f"{PREFIX}job_{name}", f"{PREFIX}{name}", f"{PREFIX}{name}_total"]
        exported = next((c for c in candidates if c in prometheus), "")
        shown.add(exported)
        what = AIRFLOW_ONLY_METRICS.get(name, "") if not exported else prometheus[exported]
        yield [
            ", ".join(f"`{path}`" for path in paths),
            f"`{exported}`" if exported else "",
            f"`{field}`",
            _cell(what),
        ]
    for exported, what in sorted(prometheus.items()):
        if exported not in shown:
            yield ["", f"`{exported}`", "", _cell(what)]


def _table(header: list[str], lines: Iterator[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


def render() -> str:
    return f"""# Names

One name for each thing, wherever it is written: a flag is its name dashed
(`max_lag_seconds` is `--max-lag-seconds`), a `sparklag` connection key is the operators'
argument, an Airflow metric is the exporter's (`sparklag_job_lag_records` is
`sparklag.<job>.lag_records`). Made from the code by `python scripts/names_table.py`;
`tests/airflow/test_names.py` fails when this page differs from it. Durations take units
everywhere (`90s`, `5m`, `1h`); what each threshold decides:
[lag and health](lag-and-health.md#check-options).

## Flags, arguments and connection keys

{_table(["name", "command line", "Airflow", "`sparklag` connection", "what"], rows())}

## Old names

Read until the next release: an old flag with a line on stderr, an old argument or connection
key with a `DeprecationWarning`; an old Airflow metric is sent beside the new one.

{_table(["where", "old name", "name now"], renamed_rows())}

## Metrics

Airflow's (`Stats`: StatsD, OpenTelemetry, ...; [Airflow metrics](metrics.md)) and the
exporter's ([Prometheus exporter](exporter.md)); the XCom field is the check result's value
each one sends.

{_table(["Airflow", "Prometheus", "XCom field", "what"], metric_rows())}
"""


if __name__ == "__main__":
    PAGE.write_text(render())
    print(f"wrote {PAGE}")
