#!/usr/bin/env bash
# The compatibility runs of scripts/test.sh, in the venvs of scripts/setup_compat.sh:
#   airflow-2.11, airflow-3.0  the Airflow-layer tests marked airflow_compat (hook, operators,
#                              sensors, triggers, DagBag and one `airflow dags test`) against the
#                              real test bed, which tests/conftest.py starts as in the main run
#   py3.10, py3.13             tests/unit (the core; packaging is checked in the main venv)
# Two lanes run side by side (one per core); each run logs to its own file and has its own
# pytest temp directory. Any failing run fails the script, with the tail of its log.
set -euo pipefail
cd "$(dirname "$0")/.."
COMPAT="${SPARKLAG_CACHE:-$HOME/.cache/sparklag}/compat"
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/sparklag-compat.XXXXXX")
mapfile -t AIRFLOW_FILES < <(grep -l "pytest.mark.airflow_compat" tests/airflow/test_*.py)

for venv in airflow-2.11 airflow-3.0 py3.10 py3.13; do
  [ -f "$COMPAT/$venv/.sparklag-installed" ] || {
    echo "test_compat: no venv $COMPAT/$venv: run scripts/setup.sh" >&2; exit 1; }
done

run() {  # run VENV PYTEST-ARGS...: one pytest run, its outcome in $LOGS/VENV.rc
  local venv=$1 started
  shift
  started=$(date +%s)
  set +e
  # The venvs are shared by every checkout (~/.cache): their editable install points at the
  # tree that built them. PYTHONPATH makes this tree's code win, also in the subprocesses the
  # tests start (the `sparklag` script, `airflow dags test`).
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
    "$COMPAT/$venv/bin/python" -m pytest -p no:cacheprovider --basetemp "$LOGS/$venv.tmp" "$@" \
    >"$LOGS/$venv.log" 2>&1
  echo $? >"$LOGS/$venv.rc"
  set -e
  # pytest's summary line (librdkafka may print after it at exit)
  echo "test_compat: $venv: $(grep -E '^=+ .* in [0-9.]+s' "$LOGS/$venv.log" | tail -n 1 \
    | tr -d '=') ($(( $(date +%s) - started ))s)"
}

airflow_run() { run "$1" -m airflow_compat "${AIRFLOW_FILES[@]}"; }
# obstore (installed with boto3 on Python >= 3.11 only): its two test files are left out on 3.10,
# where every S3 read goes through boto3.
OBSTORE_TESTS=(--ignore=tests/unit/test_storage_s3_obstore.py
  --ignore=tests/unit/test_storage_obstore_hostile.py)
core_run() {
  if [ "$1" = py3.10 ]; then
    run "$1" tests/unit --ignore=tests/unit/test_packaging.py "${OBSTORE_TESTS[@]}"
  else
    run "$1" tests/unit --ignore=tests/unit/test_packaging.py
  fi
}

(airflow_run airflow-2.11; core_run py3.10) &
lane=$!
airflow_run airflow-3.0
core_run py3.13
wait "$lane"

failed=0
for venv in airflow-2.11 airflow-3.0 py3.10 py3.13; do
  if [ "$(cat "$LOGS/$venv.rc")" != 0 ]; then
    failed=1
    echo "test_compat: $venv FAILED; the end of $LOGS/$venv.log:" >&2
    tail -n 60 "$LOGS/$venv.log" >&2
  fi
done
[ "$failed" = 0 ] && rm -rf "$LOGS"
exit "$failed"
