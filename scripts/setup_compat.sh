#!/usr/bin/env bash
# Idempotent set-up of the compatibility venvs that scripts/test.sh runs besides the main one:
#   airflow-2.11  Python 3.11, Airflow 2.11 + the provider (editable, with the amazon provider),
#                 pyspark, moto, pytest: the Airflow-layer tests marked airflow_compat
#   airflow-3.0   the same on Python 3.12 with Airflow 3.0
#   py3.10 py3.13 the core only (no Airflow) with its storage/exporter extras, moto, pytest:
#                 tests/unit
# Versions are pinned by constraints-airflow2.11.txt, constraints-airflow3.0.txt and
# constraints-core.txt (all three made by `bash scripts/setup_compat.sh --lock`). The venvs live
# in ${SPARKLAG_CACHE:-~/.cache/sparklag}/compat and are stamped: a second run installs nothing.
# The Pythons come from pyenv (or pythonX.Y on PATH); uv (pinned) builds the venvs.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
CACHE="${SPARKLAG_CACHE:-$HOME/.cache/sparklag}"
COMPAT="$CACHE/compat"
UV_VERSION=0.13.9
UV="$CACHE/uv-$UV_VERSION/bin/uv"
TEST_TOOLS=("pytest>=8" "pytest-timeout>=2.3" "jsonschema>=4.18")
CORE_TOOLS=("moto[server,s3]>=5.0" "${TEST_TOOLS[@]}")
# every extra of the core (all but Airflow and Spark): the unit tests use each storage backend;
# s3-fast's obstore is built for Python 3.11+ only (test_compat.sh leaves its two test files out on 3.10)
CORE_EXTRAS=amazon,hdfs,fsspec,gcs,azure,exporter
CORE_REQUIREMENTS=("${CORE_TOOLS[@]}" "obstore>=0.12.1; python_version >= '3.11'")

python_for() {  # python_for 3.10: the newest pyenv 3.10.x, else python3.10 on PATH
  local found
  found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python 2>/dev/null \
    | sort -V | tail -n 1 || true)
  [ -n "$found" ] || found=$(command -v "python$1" || true)
  [ -n "$found" ] || { echo "setup_compat: Python $1 is required (pyenv install $1)" >&2; exit 1; }
  echo "$found"
}

if [ ! -x "$UV" ]; then
  echo "setup_compat: installing uv $UV_VERSION into $CACHE/uv-$UV_VERSION"
  python3 -m venv "$CACHE/uv-$UV_VERSION"
  "$CACHE/uv-$UV_VERSION/bin/pip" install -q "uv==$UV_VERSION"
fi

airflow_requirements() {  # the compat venv of Airflow $1: what the lock file pins
  printf '%s\n' "apache-airflow==$1" apache-airflow-providers-apache-kafka "asgiref>=3.8" \
    apache-airflow-providers-amazon "boto3>=1.34" "confluent-kafka>=2.6" "pyspark==4.2.0" \
    "${CORE_TOOLS[@]}"
}

# --lock: re-pin the venvs (then commit the three files). Like Airflow's own constraints files,
# an Airflow venv gets what PyPI had a few days after that Airflow's release (newer libraries
# break it: Airflow 3.0.6 with cadwyn 8 fails every task), except the test bed's pyspark.
if [ "${1:-}" = "--lock" ]; then
  for release in 2.11:2.11.2:3.11:2026-03-21 3.0:3.0.6:3.12:2025-09-05; do
    IFS=: read -r series version py released <<<"$release"
    out="constraints-airflow$series.txt"
    airflow_requirements "$version" | "$UV" pip compile - -q --python-version "$py" \
      --python-platform x86_64-manylinux_2_28 --no-header --no-annotate -o "$out.new" \
      --exclude-newer "${released}T00:00:00Z" --exclude-newer-package pyspark=2100-01-01T00:00:00Z \
      --exclude-newer-package py4j=2100-01-01T00:00:00Z
    { echo "# Airflow $version on Python $py, libraries as of $released: made by"
      echo "# 'bash scripts/setup_compat.sh --lock'"; cat "$out.new"; } > "$out" && rm "$out.new"
  done
  IFS=, read -ra extras <<<"$CORE_EXTRAS"
  printf '%s\n' "${CORE_REQUIREMENTS[@]}" | "$UV" pip compile pyproject.toml - "${extras[@]/#/--extra=}" -q \
    --universal --python-version 3.10 --no-header --no-annotate -o constraints-core.txt.new
  { echo "# The core venvs (Python 3.10-3.13): made by 'bash scripts/setup_compat.sh --lock'"
    cat constraints-core.txt.new; } > constraints-core.txt && rm constraints-core.txt.new
  exit 0
fi

make_venv() {  # make_venv NAME PYTHON CONSTRAINTS SPEC...: stamped on pyproject + constraints
  local name=$1 python=$2 constraints=$3 dir="$COMPAT/$1"
  shift 3
  local want
  want=$(printf '%s\n' "$python" "$@" | cat - pyproject.toml "$constraints" | sha256sum | cut -c1-16)
  [ "$(cat "$dir/.sparklag-installed" 2>/dev/null)" = "$want" ] && return 0
  echo "setup_compat: building $dir"
  rm -rf "$dir"
  "$UV" venv -q --python "$python" "$dir"
  "$UV" pip install -q --python "$dir/bin/python" -c "$constraints" "$@"
  echo "$want" > "$dir/.sparklag-installed"
}

make_venv airflow-2.11 "$(python_for 3.11)" constraints-airflow2.11.txt \
  -e '.[airflow-amazon,spark,exporter]' "${CORE_TOOLS[@]}"
make_venv airflow-3.0 "$(python_for 3.12)" constraints-airflow3.0.txt \
  -e '.[airflow-amazon,spark,exporter]' "${CORE_TOOLS[@]}"
for py in 3.10 3.13; do
  make_venv "py$py" "$(python_for "$py")" constraints-core.txt \
    -e ".[$CORE_EXTRAS]" "${CORE_REQUIREMENTS[@]}"
done
echo "setup_compat: ready in $(( $(date +%s) - start ))s ($COMPAT)"
