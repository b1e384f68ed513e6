"""One name for each thing (docs/names.md): the page is made from the code and kept true, a
flag is its option's name, the `sparklag` connection names a connection as the operators do,
an Airflow metric is named as the exporter's, and every old name still works for a release."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from airflow_sparklag import cli, params
from airflow_sparklag.hooks.bundle import FIELDS
from airflow_sparklag.model.verdict import Thresholds
from scripts import names_table

pytestmark = pytest.mark.airflow_compat


def test_the_names_page_is_made_from_the_code():
    assert names_table.PAGE.read_text() == names_table.render(), (
        "docs/names.md differs from the code: run python scripts/names_table.py"
    )


def test_every_flag_argument_key_and_metric_has_its_row():
    page = names_table.PAGE.read_text()
    for row in names_table.cli_names().values():
        for flag in row["flags"]:
            assert f"`{flag}`" in page, f"{flag}: no row in docs/names.md"
    for name in [*names_table.airflow_names(), *FIELDS]:
        assert f"| `{name}` |" in page, f"{name}: no row in docs/names.md"
    for metric in names_table.exporter_names():
        assert f"`{metric}`" in page, f"{metric}: no row in docs/names.md"


def test_a_flag_is_its_name_wherever_python_takes_it():
    """`--max-lag` read like a total and was the limit per partition; `--exact` was
    `exact_time_lag`: a flag is its Python name, dashed (a repeatable one may be the singular:
    `--topic` for `topics`; the CLI's own words only as listed in CLI_WORDS)."""
    cli_names = names_table.cli_names()
    python_names = {*names_table.airflow_names(), *(f.name for f in dataclasses.fields(Thresholds))}
    words = {name for name, _ in names_table.CLI_WORDS.values()}
    for name in sorted(python_names & set(cli_names) - words):
        flags, repeatable = cli_names[name]["flags"], cli_names[name]["repeatable"]
        one = params.flag_of(name.removesuffix("s")) if repeatable else None
        assert {params.flag_of(name), one} & set(flags), f"{name}: the command line says {flags}"
    for f in dataclasses.fields(Thresholds):
        assert params.flag_of(f.name) in cli_names[f.name]["flags"]


def test_the_connection_keys_are_the_operators_arguments():
    arguments = names_table.airflow_names()
    assert [key for key in FIELDS if key not in arguments] == []


def test_airflow_metrics_are_named_as_the_exporters():
    from airflow_sparklag.operators import metrics

    exported = names_table.exporter_names()
    for name in metrics.JOB_GAUGES:
        if name not in names_table.AIRFLOW_ONLY_METRICS:
            assert f"sparklag_job_{name}" in exported, name
    for name in metrics.PARTITION_GAUGES:
        assert f"sparklag_{name}" in exported, name
    assert "sparklag_check_errors_total" in exported
    for rows in names_table.metric_rows():
        assert rows[0] or rows[1]


def test_no_old_name_is_still_in_use():
    from airflow_sparklag.hooks.bundle import RENAMED as BUNDLE
    from airflow_sparklag.operators import metrics
    from airflow_sparklag.operators.base import RENAMED as ARGUMENTS

    flags = {flag for row in names_table.cli_names().values() for flag in row["flags"]}
    assert set(params.RENAMED_FLAGS) & flags == set()
    assert set(params.RENAMED_FLAGS.values()) <= flags
    assert set(ARGUMENTS) & set(names_table.airflow_names()) == set()
    assert set(ARGUMENTS.values()) <= set(names_table.airflow_names())
    assert set(BUNDLE) & set(FIELDS) == set() and set(BUNDLE.values()) <= set(FIELDS)
    assert set(metrics.RENAMED) & {*metrics.JOB_GAUGES, *metrics.PARTITION_GAUGES} == set()


def test_old_flags_still_parse_with_one_line_on_stderr(capsys):
    parser = cli.build_parser()
    old = parser.parse_args(
        ["status", "/ck", "--max-lag", "5", "--max-commit-age=5m", "--exact", "--max-lag", "6"]
    )
    given = ["--max-lag-records-per-partition", "6", "--max-commit-age-seconds=5m"]
    new = parser.parse_args(["status", "/ck", *given, "--exact-time-lag"])
    assert cli._check_options(old) == cli._check_options(new)
    assert cli._check_options(old).thresholds.max_lag_records_per_partition == 6
    said = capsys.readouterr().err.splitlines()
    assert said == [
        "sparklag: --max-lag is deprecated: use --max-lag-records-per-partition (docs/names.md)",
        "sparklag: --max-commit-age is deprecated: use --max-commit-age-seconds (docs/names.md)",
        "sparklag: --exact is deprecated: use --exact-time-lag (docs/names.md)",
    ]
    waited = parser.parse_args(
        ["wait", "progress", "/ck", "--after-batch", "3", "--after-time", "0"]
    )
    assert (waited.after_batch_id, waited.after_commit_time) == ("3", "0")
    moved = parser.parse_args(["migrate", "/ck", "--archive", "/a", "--snapshot-to", "/s"])
    assert (moved.archive_root, moved.snapshot_root.text) == ("/a", "/s")
    assert parser.parse_args(["snapshot", "/ck", "--to", "/s"]).snapshot_root == "/s"


def test_old_operator_arguments_still_work_with_a_warning():
    from airflow_sparklag.operators.snapshot import (
        CheckpointSnapshotOperator,
        ConsumerGroupExportOperator,
    )

    with pytest.warns(DeprecationWarning, match="'checkpoint_location' is deprecated.*'location'"):
        task = CheckpointSnapshotOperator(
            task_id="snap", checkpoint_location="/ck", snapshot_root="/s"
        )
    assert task.location == "/ck" and "location" in task.template_fields
    with pytest.warns(DeprecationWarning, match="'group_id' is deprecated.*'consumer_group'"):
        export = ConsumerGroupExportOperator(task_id="export", location="/ck", group_id="g")
    assert export.consumer_group == "g"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ConsumerGroupExportOperator(task_id="new", location="/ck", consumer_group="g")
    with pytest.raises(TypeError, match="not both"):
        CheckpointSnapshotOperator(
            task_id="both", location="/a", checkpoint_location="/b", snapshot_root="/s"
        )
    with pytest.raises(TypeError, match="needs the argument 'location'"):
        CheckpointSnapshotOperator(task_id="none", snapshot_root="/s")


def test_core_messages_name_the_flag_on_the_command_line():
    """The core names an option as Python does (`force=True`, `webhdfs_options['url']`): the
    CLI says the flag, a task the argument or the connection's field."""
    from airflow_sparklag.hooks.connections import in_airflow_words

    message = "alive. Stop it, or pass force=True; check webhdfs_options['url']"
    assert cli.in_cli_words(message) == "alive. Stop it, or pass --force; check --webhdfs-url"
    assert in_airflow_words(message) == (
        "alive. Stop it, or pass force=True; check the webhdfs connection's host and port"
    )
