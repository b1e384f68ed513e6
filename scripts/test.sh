#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), lint, format check, types, then every test against
# the real test bed (Kafka, Spark, S3, HDFS, Airflow). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
bash scripts/setup.sh
t1=$(date +%s)
echo "test: set-up took $((t1 - t0))s"
VENV="${SPARKLAG_VENV:-.venv}"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/mypy"
"$VENV/bin/pytest" -p no:cacheprovider "$@"
echo "test: whole run took $(( $(date +%s) - t0 ))s (set-up $((t1 - t0))s)"
