"""Kafka lag and health of Spark Structured Streaming jobs, read from their checkpoints.

The core (checkpoint, kafka, lag, health, monitor) never imports Airflow; the Airflow hooks,
sensors, operators, triggers and the provider's registration (``airflow_sparklag.airflow``) are
thin adapters over it (docs/architecture.md; the import-linter contracts in pyproject.toml).
"""

from __future__ import annotations

__version__ = "0.1.0"
