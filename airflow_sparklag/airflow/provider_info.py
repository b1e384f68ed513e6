"""What this provider registers with Airflow, read through the ``apache_airflow_provider`` entry
point (pyproject.toml) whenever Airflow lists its providers: nothing here imports Airflow or a
client. Lists only what exists in the package."""

from __future__ import annotations

from typing import Any

INTEGRATION = "Spark Structured Streaming (Kafka lag)"
# The modules of each kind, below airflow_sparklag.
MODULES = {
    "hooks": ("hooks.sparklag",),
    "triggers": ("triggers.sparklag", "triggers.events"),
    "sensors": ("sensors.sparklag",),
    "operators": ("operators.sparklag", "operators.snapshot", "operators.fleet"),
}


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
        **{
            kind: [
                {
                    "integration-name": INTEGRATION,
                    "python-modules": [f"airflow_sparklag.{module}" for module in modules],
                }
            ]
            for kind, modules in MODULES.items()
        },
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
