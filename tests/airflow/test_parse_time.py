"""Arguments are checked where they are written: a value given as it is (not templated) is read
when Airflow parses the DAG file, so a misspelt threshold or an unreadable value is an import
error naming the task and the parameter, not a task that fails hours later. A templated value
is read when the task runs, by the same reader. The signatures show every argument."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import DAG

from airflow_sparklag.errors import InvalidParameter
from airflow_sparklag.hooks.sparklag import CONN_FIELDS
from airflow_sparklag.migration import MIGRATION_OPTIONS
from airflow_sparklag.monitor import OPTION_NAMES
from airflow_sparklag.operators.fleet import SparkLagFleetCheckOperator
from airflow_sparklag.operators.snapshot import (
    CheckpointMigrationOperator,
    CheckpointSnapshotOperator,
    ConsumerGroupExportOperator,
)
from airflow_sparklag.operators.sparklag import SparkLagBranchOperator, SparkLagCheckOperator
from airflow_sparklag.sensors.sparklag import (
    SparkCheckpointProgressSensor,
    SparkKafkaCatchUpSensor,
    SparkLagSensor,
)
from tests.airflow.conftest import airflow_env


def parse(folder: Path, thresholds: str) -> Any:
    """A real DAG file with one check task given ``thresholds`` (source text), parsed by
    Airflow's DagBag as the DAG processor parses it: the bag."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow < 3.1
        from airflow.models.dagbag import DagBag

    dag_id = f"parse_time_{uuid.uuid4().hex[:8]}"
    source = f"""
        from airflow.providers.common.compat.sdk import DAG
        from airflow_sparklag.operators.sparklag import SparkLagCheckOperator

        with DAG("{dag_id}", schedule=None, params={{"lag": "5m"}}):
            SparkLagCheckOperator(
                task_id="check_orders",
                location="s3a://lake/ck/orders",
                thresholds={thresholds},
            )
        """
    path = folder / f"{dag_id}.py"
    path.write_text(textwrap.dedent(source))
    return DagBag(str(path)), dag_id, str(path)


@pytest.mark.airflow_compat
def test_a_misspelt_threshold_is_an_import_error_naming_the_task_and_the_key(tmp_path):
    bag, dag_id, path = parse(tmp_path, '{"max_lag_second": "5m"}')
    assert dag_id not in bag.dag_ids
    error = bag.import_errors[path]
    assert (
        "check_orders: invalid parameter thresholds: unknown threshold 'max_lag_second'; "
        "did you mean max_lag_seconds?"
    ) in error, error


@pytest.mark.testbed
def test_airflow_dags_list_import_errors_names_the_task_and_suggests_the_key(airflow_db, tmp_path):
    """What a deployment's users see: ``airflow dags list-import-errors`` on a DAGs folder
    holding the DAG file (parsed as the DAG processor parses it)."""
    folder = tmp_path / "dags"
    folder.mkdir()
    _, _, path = parse(folder, '{"max_lag_second": "5m"}')
    env = {**airflow_env(tmp_path), "AIRFLOW__CORE__DAGS_FOLDER": str(folder)}
    airflow = Path(sys.executable).parent / "airflow"
    out = subprocess.run(
        [str(airflow), "dags", "list-import-errors", "--local", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 1, out.stderr[-3000:]  # its exit code when a file fails
    errors = {e["filepath"]: e["error"] for e in json.loads(out.stdout.strip().splitlines()[-1])}
    expected = (
        "check_orders: invalid parameter thresholds: unknown threshold 'max_lag_second'; "
        "did you mean max_lag_seconds?"
    )
    assert expected in errors[path], errors


@pytest.mark.airflow_compat
def test_a_threshold_with_a_unit_parses_and_is_read_in_seconds(tmp_path):
    bag, dag_id, _ = parse(tmp_path, '{"max_lag_seconds": "5m", "max_commit_age_seconds": "1h"}')
    assert bag.import_errors == {}
    options = bag.dags[dag_id].get_task("check_orders").check_options()
    assert options.thresholds.max_lag_seconds == 300
    assert options.thresholds.max_commit_age_seconds == 3600


@pytest.mark.airflow_compat
def test_a_templated_threshold_is_read_when_the_task_runs(tmp_path):
    """Parsing leaves a template alone; the rendered text goes through the same reader."""
    bag, dag_id, _ = parse(tmp_path, '{"max_lag_seconds": "{{ params.lag }}"}')
    assert bag.import_errors == {}
    task = bag.dags[dag_id].get_task("check_orders")
    task.render_template_fields({"params": {"lag": "5m"}})
    assert task.check_options().thresholds.max_lag_seconds == 300
    task.render_template_fields({"params": {}})  # rendered to "": no limit
    with DAG("parse_time_rendered", schedule=None):
        misspelt = SparkLagCheckOperator(
            task_id="check", location="/ck", thresholds="{{ params.t }}"
        )
    misspelt.render_template_fields({"params": {"t": {"max_lagg": 1}}})
    with pytest.raises(InvalidParameter, match="did you mean max_lag_seconds"):
        misspelt.check_options()


# A task, the argument it is given as it is, and the parameter its import error names.
REFUSED = {
    "check-location-list": (SparkLagCheckOperator, {"location": ["/a", "/b"]}, "location"),
    "check-fail-on": (SparkLagCheckOperator, {"location": "/a", "fail_on": "HEALTHY"}, "fail_on"),
    "check-history": (SparkLagCheckOperator, {"location": "/a", "history": 0}, "history"),
    "check-grace-alone": (
        SparkLagCheckOperator,
        {"location": "/a", "run_grace": "5m"},
        "run_grace",
    ),
    "check-negative-duration": (
        SparkLagCheckOperator,
        {"location": "/a", "thresholds": {"max_in_flight_seconds": "-5m"}},
        "thresholds.max_in_flight_seconds",
    ),
    "check-ratio": (
        SparkLagCheckOperator,
        {"location": "/a", "thresholds": {"min_time_to_loss_ratio": 2}},
        "thresholds",  # Thresholds: a share of the retention, 0 to 1
    ),
    "branch-thresholds": (
        SparkLagBranchOperator,
        {"location": "/a", "default_task_id": "x", "thresholds": {"window": "5m"}},
        "thresholds.window",
    ),
    "fleet-max-failing": (
        SparkLagFleetCheckOperator,
        {"prefix": "/a", "max_failing": -1},
        "max_failing",
    ),
    "sensor-accept": (SparkLagSensor, {"location": "/a", "accept": ["HEALTHY"]}, "accept"),
    "sensor-source-conn": (
        SparkLagSensor,
        {"location": "/a", "source_kafka_conn_ids": {"1": 5}},
        "source_kafka_conn_ids.1",
    ),
    "progress-batch": (
        SparkCheckpointProgressSensor,
        {"location": "/a", "after_batch_id": "x"},
        "after_batch_id",
    ),
    "catch-up-time": (
        SparkKafkaCatchUpSensor,
        {"location": "/a", "target_time": "yesterday"},
        "target_time",
    ),
    "snapshot-location": (
        CheckpointSnapshotOperator,
        {"location": ["/a"], "snapshot_root": "/s"},
        "location",
    ),
    "export-group": (
        ConsumerGroupExportOperator,
        {"location": "/a", "consumer_group": " "},
        "consumer_group",
    ),
    "migration-dry-run": (
        CheckpointMigrationOperator,
        {"location": "/a", "archive_root": "/b", "dry_run": "Ture"},
        "dry_run",
    ),
}


@pytest.mark.airflow_compat
@pytest.mark.parametrize(("cls", "given", "parameter"), REFUSED.values(), ids=list(REFUSED))
def test_each_task_reads_what_it_is_given_when_the_dag_is_parsed(cls, given, parameter):
    dag = DAG(f"parse_time_{uuid.uuid4().hex[:8]}", schedule=None)
    with dag, pytest.raises(InvalidParameter) as refused:
        cls(task_id="the_task", **given)
    assert str(refused.value).startswith(f"the_task: invalid parameter {parameter}: ")
    assert refused.value.parameter == parameter


@pytest.mark.airflow_compat
def test_default_args_are_read_when_the_dag_is_parsed():
    dag = DAG("parse_time_defaults", schedule=None, default_args={"thresholds": {"max_lag": 5}})
    with dag, pytest.raises(InvalidParameter, match=r"^check: .*unknown threshold 'max_lag'"):
        SparkLagCheckOperator(task_id="check", location="/a")


TASKS = (
    SparkLagCheckOperator,
    SparkLagBranchOperator,
    SparkLagFleetCheckOperator,
    SparkLagSensor,
    SparkCheckpointProgressSensor,
    SparkKafkaCatchUpSensor,
    CheckpointSnapshotOperator,
    ConsumerGroupExportOperator,
    CheckpointMigrationOperator,
)


@pytest.mark.airflow_compat
@pytest.mark.parametrize("cls", TASKS, ids=lambda cls: cls.__name__)
def test_signatures_show_every_argument_of_the_task(cls):
    """help() and IDEs that inspect the class show the arguments its bases take (location)
    and the option fields, not only the class's own."""
    shown = set(inspect.signature(cls).parameters)
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None and klass.__module__.startswith("airflow_sparklag."):
            own = inspect.signature(init.__wrapped__ if hasattr(init, "__wrapped__") else init)
            assert {n for n in own.parameters if n not in ("self", "kwargs")} <= shown, klass
    assert set(CONN_FIELDS) <= shown
    fields = MIGRATION_OPTIONS if cls is CheckpointMigrationOperator else ()
    assert set(fields) <= shown
    if cls in (
        SparkLagCheckOperator,
        SparkLagBranchOperator,
        SparkLagFleetCheckOperator,
        SparkLagSensor,
    ):
        assert set(OPTION_NAMES) <= shown


SINGLE_JOB = (
    SparkLagCheckOperator,
    SparkLagBranchOperator,
    SparkLagSensor,
    SparkCheckpointProgressSensor,
    SparkKafkaCatchUpSensor,
)


@pytest.mark.airflow_compat
@pytest.mark.parametrize("cls", SINGLE_JOB, ids=lambda cls: cls.__name__)
def test_location_is_written_in_the_signature_of_each_single_job_task(cls):
    """In the class's own ``__init__`` (what an IDE reads), and required."""
    code = inspect.unwrap(cls.__dict__["__init__"]).__code__
    assert "location" in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    assert inspect.signature(cls).parameters["location"].default is inspect.Parameter.empty


SPELLINGS = {  # threshold -> (as written, seconds/count/ratio read)
    "max_lag_seconds": ("5m", 300.0),
    "max_commit_age_seconds": ("1h", 3600.0),
    "min_time_to_breach_seconds": ("90s", 90.0),
    "max_lag_records_total": ("5000", 5000),
    "max_batch_time_ratio": ("1.5", 1.5),
}


@pytest.mark.airflow_compat
def test_the_cli_and_the_operators_read_thresholds_alike():
    """One reader (params.threshold_reader): ``--max-lag-seconds 5m`` on the CLI and
    ``thresholds={"max_lag_seconds": "5m"}`` on an operator are both 300 seconds."""
    from airflow_sparklag import cli

    parser = cli.build_parser()
    argv = ["status", "/ck"]
    for field, (text, _) in SPELLINGS.items():
        argv += [f"--{field.replace('_', '-')}", text]
    from_cli = cli._check_options(parser.parse_args(argv)).thresholds
    task = SparkLagCheckOperator(
        task_id="check", location="/ck", thresholds={k: v[0] for k, v in SPELLINGS.items()}
    )
    from_operator = task.check_options().thresholds
    assert from_cli == from_operator
    assert {field: getattr(from_cli, field) for field in SPELLINGS} == {
        field: read for field, (_, read) in SPELLINGS.items()
    }
