#!/usr/bin/env bash
# Idempotent set-up of the Spark 3.5 compatibility test bed: a virtualenv of its own with pyspark
# 3.5 (Python <= 3.11; the main venv keeps pyspark 4.x) and Spark 3.5's Kafka connector (Scala
# 2.12) from Maven Central. tests/integration/test_spark35_checkpoints.py runs its queries with
# that venv's python. A second run downloads nothing (stamps); pip's cache keeps the wheel it
# builds from the ~317 MB pyspark tarball, so even a new venv does not download it again.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
CACHE="${SPARKLAG_CACHE:-$HOME/.cache/sparklag}"
VENV35="$CACHE/venv-spark35"          # keep in step with testbed/spark35.py
PYSPARK35="pyspark==3.5.7"            # = the connector in testbed/jars/spark35-kafka/pom.xml

# --- a Python pyspark 3.5 runs on (3.8 to 3.11) ---------------------------------------------------
supported() { "$1" -c 'import sys; sys.exit(not (3, 8) <= sys.version_info[:2] <= (3, 11))' 2>/dev/null; }
py=""
for candidate in "${SPARK35_PYTHON:-}" python3.11 python3.10 python3.9 python3; do
  if [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1 && supported "$candidate"; then
    py="$candidate"; break
  fi
done
[ -n "$py" ] || { echo "setup_spark35: pyspark 3.5 needs Python 3.8-3.11 (set SPARK35_PYTHON)" >&2; exit 1; }

# --- the venv ---------------------------------------------------------------------------------------
stamp="$VENV35/.sparklag-installed"
want_venv="$PYSPARK35 $("$py" -c 'import platform; print(platform.python_version())')"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want_venv" ]; then
  echo "setup_spark35: creating $VENV35 ($want_venv; pip's cache makes repeats fast)"
  rm -rf "$VENV35"
  "$py" -m venv "$VENV35"
  "$VENV35/bin/pip" install -q "$PYSPARK35"
  echo "$want_venv" > "$stamp"
fi

# --- Spark 3.5's Kafka connector ----------------------------------------------------------------------
pom=testbed/jars/spark35-kafka/pom.xml
jars="$CACHE/jars/spark35-kafka"
want_jars=$(sha256sum "$pom" | cut -c1-16)
if [ "$(cat "$jars/.complete" 2>/dev/null)" != "$want_jars" ]; then
  echo "setup_spark35: fetching Spark 3.5's Kafka connector into $jars"
  log="$CACHE/mvn-spark35-kafka.log"
  rm -rf "$jars.partial"
  if ! mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$jars.partial" >"$log" 2>&1; then
    echo "setup_spark35: Maven failed; log $log:" >&2; tail -n 20 "$log" >&2; exit 1
  fi
  echo "$want_jars" > "$jars.partial/.complete"
  rm -rf "$jars" && mv "$jars.partial" "$jars"
fi
echo "setup_spark35: ready in $(( $(date +%s) - start ))s (venv $VENV35, jars $jars)"
