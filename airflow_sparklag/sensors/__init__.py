"""Sensors that wait on a Spark query's checkpoint (health, progress, catch-up)."""
