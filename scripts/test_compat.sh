#!/usr/bin/env bash
# The compatibility runs of scripts/test.sh, in the venvs of scripts/setup_compat.sh:
#   airflow-2.11, airflow-3.0  the Airflow-layer tests marked airflow_compat (hook, operators,
#                              sensors, triggers, DagBag and one `airflow dags test`) against the
#                              real test bed, which tests/conftest.py starts as in the main run
#   py3.10, py3.13             the unit tests of what differs between Python versions (below)
# Two lanes run side by side (one per core); each run logs to its own file and has its own
# pytest temp directory. Any failing run fails the script, with the tail of its log.
# The Airflow runs share one Kafka broker and HDFS (testbed/shared.py): the main
# run's when scripts/test.sh runs this beside it (SPARKLAG_SHARED_TESTBED), else their own.
set -euo pipefail
cd "$(dirname "$0")/.."
COMPAT="${SPARKLAG_CACHE:-$HOME/.cache/sparklag}/compat"
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/sparklag-compat.XXXXXX")
if [ -z "${SPARKLAG_SHARED_TESTBED:-}" ]; then
  export SPARKLAG_SHARED_TESTBED="$LOGS/testbed"
  trap 'PYTHONPATH="$PWD" python3 -m testbed.shared stop "$SPARKLAG_SHARED_TESTBED"' EXIT
fi
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
# What differs between Python versions, and the unit tests that read it (the main run, on 3.11,
# runs all of tests/unit; pure rule and arithmetic code behaves the same on every version):
#   every core module imports and compiles (3.11+ names such as datetime.UTC, enum.StrEnum or
#     tomllib fail at import on 3.10): the compile and import check below;
#   datetime.fromisoformat (3.10 takes no "Z" and fewer forms): params, snapshot, time lag,
#     history, S3 LastModified and fsspec timestamps;
#   the checkpoint and state-file parsers (json, text, bytes handling);
#   argparse (help, errors and abbreviations changed in 3.12/3.13): the CLI contracts;
#   compiled wheels built per version: confluent-kafka (Kafka errors), obstore (>= 3.11 only:
#     on 3.10 its two files are left out and the reader choice falls back to boto3), botocore;
#   re and str formatting of redaction and rendering.
VERSION_TESTS=(test_checkpoint_parsers test_checkpoint_hostile test_checkpoint_reader
  test_state_files_hostile test_params test_snapshot test_timelag test_history_unit test_runs
  test_storage_open test_storage_local test_storage_hostile test_storage_capabilities
  test_storage_s3 test_storage_s3_obstore test_storage_obstore_hostile test_cli_contract
  test_fleet_cli test_kafka_errors test_redact test_render test_exporter_unit test_cli_help)
core_run() {
  local files=() name
  for name in "${VERSION_TESTS[@]}"; do
    [ -f "tests/unit/$name.py" ] || continue  # a file other work removed
    # obstore (s3-fast) is built for Python >= 3.11
    [ "$1" = py3.10 ] && [[ $name == *obstore* ]] && continue
    files+=("tests/unit/$name.py")
  done
  run "$1" "${files[@]}"
  if ! PYTHONPATH="$PWD" "$COMPAT/$1/bin/python" -c "$IMPORT_CHECK" >>"$LOGS/$1.log" 2>&1; then
    echo 1 >"$LOGS/$1.rc"
    echo "test_compat: $1: a core module does not compile or import (end of $LOGS/$1.log)"
  fi
}
# Every module compiles; every one imports, or fails only for want of Airflow or pyspark (the
# core venvs have neither).
IMPORT_CHECK='
import importlib, pathlib, pkgutil, sys
import airflow_sparklag as package
failed = []
for path in sorted(pathlib.Path(package.__file__).parent.rglob("*.py")):
    try:
        compile(path.read_text(), str(path), "exec")
    except SyntaxError as exc:
        failed.append(f"{path}: {exc}")
names = [m.name for m in pkgutil.walk_packages(package.__path__, "airflow_sparklag.", lambda _: None)]
for name in names:
    try:
        importlib.import_module(name)
    except ImportError as exc:  # for want of Airflow: ModuleNotFoundError, or the error of compat.py
        wants = (exc.name or "").split(".")[0] in ("airflow", "pyspark") or "Airflow" in str(exc)
        if not wants:
            failed.append(f"{name}: {exc!r}")
    except Exception as exc:
        failed.append(f"{name}: {exc!r}")
print(f"import check: {len(names)} modules, {len(failed)} failed", *failed, sep="\n")
sys.exit(1 if failed else 0)
'

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
