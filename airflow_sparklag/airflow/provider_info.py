"""What this provider registers with Airflow, read through the ``apache_airflow_provider`` entry
point (pyproject.toml) whenever Airflow lists its providers: nothing here imports Airflow or a
client. Lists only what exists in the package."""

from __future__ import annotations

from typing import Any

INTEGRATION = "Spark Structured Streaming (Kafka lag)"


def get_provider_info() -> dict[str, Any]:
    """Provider metadata: name, versions, the modules of each kind, the connection type."""
    from airflow_sparklag import __version__
    from airflow_sparklag.hooks.bundle import CONN_TYPE, HIDDEN_FIELDS, conn_fields

    return {
        "package-name": "airflow-provider-sparklag",
        "name": "Spark Kafka lag",
        "description": "Lag, health, snapshots and migration of Spark Structured Streaming jobs "
        "that read Kafka, straight from their checkpoints.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://spark.apache.org/docs/latest/structured-streaming-kafka-integration.html",
                "tags": ["apache"],
            }
        ],
        "hooks": [
            {"integration-name": INTEGRATION, "python-modules": ["airflow_sparklag.hooks.sparklag"]}
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_sparklag.triggers.sparklag",
                    "airflow_sparklag.triggers.events",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_sparklag.sensors.sparklag"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_sparklag.operators.sparklag",
                    "airflow_sparklag.operators.snapshot",
                    "airflow_sparklag.operators.fleet",
                ],
            }
        ],
        # One connection type of our own, `sparklag`: it bundles the ecosystem's `kafka`,
        # `aws`, `webhdfs`, ... connections by id, and its "Test" button runs
        # SparkLagHook.test_connection() (docs/connections.md). Airflow 3.2+ reads its form
        # (conn-fields, ui-field-behaviour); older versions accept and ignore them.
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": "airflow_sparklag.hooks.sparklag.SparkLagHook",
                "hook-name": "Spark Kafka lag",
                "conn-fields": conn_fields(),
                "ui-field-behaviour": {
                    "hidden-fields": list(HIDDEN_FIELDS),
                    "relabeling": {},
                    "placeholders": {},
                },
            }
        ],
    }
