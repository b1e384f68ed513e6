#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), lint, format check, types, then every test against
# the real test bed (Kafka, Spark, S3, HDFS, Airflow), and beside it the compatibility runs
# (Airflow 2.11 and 3.0, Python 3.10 and 3.13: scripts/test_compat.sh). Extra arguments go to
# the main pytest run and leave the compatibility runs out.
#
# Speed (docs/benchmarks.md, "Test suite"): the main run has SPARKLAG_WORKERS pytest-xdist
# workers (default 2 per core, at least 3: most tests wait on Spark, Kafka or Airflow, not on
# the CPU), a test file stays on one worker (its module fixtures start once; tests/conftest.py
# names the few files split across workers and the slow files that start first), and every worker
# and the Airflow compatibility runs share one Kafka broker and HDFS MiniCluster
# (testbed/shared.py). The compatibility runs start with the main run, in the background.
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
t2=$(date +%s)
echo "test: lint and types took $((t2 - t1))s"

SPARKLAG_SHARED_TESTBED=$(mktemp -d "${TMPDIR:-/tmp}/sparklag-testbed.XXXXXX")
export SPARKLAG_SHARED_TESTBED
compat=""
stop_testbed() {
  [ -z "$compat" ] || kill "$compat" 2>/dev/null || true
  "$VENV/bin/python" -m testbed.shared stop "$SPARKLAG_SHARED_TESTBED"
  rm -rf "$SPARKLAG_SHARED_TESTBED"
}
trap stop_testbed EXIT
# Airflow 2.11 and 3.0, Python 3.10 and 3.13 (scripts/test_compat.sh); not with a pytest selection.
if [ "$#" = 0 ]; then
  COMPAT_LOG="$SPARKLAG_SHARED_TESTBED/compat.log"
  bash scripts/test_compat.sh >"$COMPAT_LOG" 2>&1 &
  compat=$!
fi
cores=$(nproc 2>/dev/null || echo 2)
workers="${SPARKLAG_WORKERS:-$(( cores * 2 > 3 ? cores * 2 : 3 ))}"
set +e
"$VENV/bin/pytest" -p no:cacheprovider -n "$workers" --dist loadfile --no-loadscope-reorder --durations=20 "$@"
main_rc=$?
set -e
t3=$(date +%s)
echo "test: main run took $((t3 - t2))s ($workers workers)"
compat_rc=0
if [ -n "$compat" ]; then
  wait "$compat" || compat_rc=$?
  compat=""
  cat "$COMPAT_LOG"
  echo "test: compatibility runs ended $(( $(date +%s) - t3 ))s after the main run"
else
  echo "test: compatibility runs left out (pytest arguments given): bash scripts/test_compat.sh"
fi
echo "test: whole run took $(( $(date +%s) - t0 ))s (set-up $((t1 - t0))s, lint $((t2 - t1))s," \
  "main run $((t3 - t2))s)"
[ "$main_rc" = 0 ] && [ "$compat_rc" = 0 ]
