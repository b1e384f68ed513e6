"""What this provider registers with Airflow. Lists only what exists in the package."""

from __future__ import annotations

from typing import Any

INTEGRATION = "Spark Structured Streaming (Kafka lag)"


def provider_info() -> dict[str, Any]:
    from airflow_sparklag import __version__

    info: dict[str, Any] = {
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
                "python-modules": ["airflow_sparklag.triggers.sparklag"],
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
        # No connection type of our own: the hook reuses the ecosystem's `kafka`, `aws` and
        # `webhdfs` connections (see docs/connections.md).
    }
    return info
