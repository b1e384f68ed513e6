#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), lint, format check, types, then every test against
# the real test bed (Kafka, Spark, S3, HDFS, Airflow), then the compatibility runs (Airflow 2.11
# and 3.0, Python 3.10 and 3.13: scripts/test_compat.sh). Extra arguments go to the main pytest
# run and leave the compatibility runs out.
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
"$VENV/bin/lint-imports"  # the layer contracts of pyproject.toml
"$VENV/bin/pytest" -p no:cacheprovider "$@"
t2=$(date +%s)
# Airflow 2.11 and 3.0, Python 3.10 and 3.13 (scripts/test_compat.sh); not with a pytest selection.
if [ "$#" = 0 ]; then
  bash scripts/test_compat.sh
else
  echo "test: compatibility runs left out (pytest arguments given): bash scripts/test_compat.sh"
fi
echo "test: whole run took $(( $(date +%s) - t0 ))s (set-up $((t1 - t0))s," \
  "compatibility runs $(( $(date +%s) - t2 ))s)"
