"""Airflow hooks: connections in, the core's results out."""
