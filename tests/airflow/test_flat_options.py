"""The option fields are keyword arguments Airflow knows: DAG ``default_args`` fill them,
``partial()`` / ``expand()`` accept them, and each task reads them into ONE object."""

from __future__ import annotations

import pytest
from airflow.providers.common.compat.sdk import DAG

from airflow_sparklag.hooks.sparklag import ConnectionIds
from airflow_sparklag.migration import MigrationOptions
from airflow_sparklag.operators.fleet import SparkLagFleetCheckOperator
from airflow_sparklag.operators.snapshot import CheckpointMigrationOperator
from airflow_sparklag.operators.sparklag import SparkLagCheckOperator
from airflow_sparklag.sensors.sparklag import SparkLagSensor

DEFAULTS = {"history": 5, "thresholds": {"max_lag_seconds": 60}, "aws_conn_id": "aws_x"}


@pytest.mark.airflow_compat
def test_default_args_fill_the_option_fields() -> None:
    with DAG("flat_options_defaults", schedule=None, default_args=DEFAULTS):
        sensor = SparkLagSensor(task_id="s", location="/ck")
        check = SparkLagCheckOperator(task_id="c", location="/ck", history=7)
        fleet = SparkLagFleetCheckOperator(task_id="f", prefix="/ck")
        migrate = CheckpointMigrationOperator(
            task_id="m", location="/ck", archive_root="/a", dry_run="true"
        )
    for task in (sensor, fleet):
        options = task.check_options()
        assert (options.history, options.thresholds.max_lag_seconds) == (5, 60)
    assert check.check_options().history == 7  # given to the task: wins over default_args
    assert {t.connection_ids().aws_conn_id for t in (sensor, check, fleet, migrate)} == {"aws_x"}
    assert migrate.options(MigrationOptions) == MigrationOptions(dry_run=True)
    assert migrate.connection_ids() == ConnectionIds(aws_conn_id="aws_x")


@pytest.mark.airflow_compat
def test_partial_and_expand_take_the_option_fields() -> None:
    with DAG("flat_options_mapped", schedule=None):
        SparkLagSensor.partial(task_id="s", location="/ck", thresholds={"window": 3}).expand(
            history=[1, 2]
        )
        with pytest.raises(TypeError, match="histroy"):
            SparkLagSensor.partial(task_id="t", location="/ck", histroy=3).expand(history=[1])
