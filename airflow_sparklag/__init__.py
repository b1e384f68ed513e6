"""Kafka lag and health of Spark Structured Streaming jobs, read from their checkpoints.

The core (checkpoint, kafka, lag, health, monitor) never imports Airflow; the Airflow hooks,
sensors, operators and triggers are thin adapters over it.
"""

from __future__ import annotations

__version__ = "0.1.0"


def get_provider_info() -> dict:
    """Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""
    from airflow_sparklag.provider_info import provider_info

    return provider_info()
