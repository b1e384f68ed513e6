"""Operators that check a Spark query's lag and health, fail or branch on it."""
