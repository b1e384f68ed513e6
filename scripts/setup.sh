#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: Python virtualenv with the package and its dev extras,
# and the test bed's jars (Kafka, Spark's Kafka connector, s3a, HDFS MiniCluster) from Maven
# Central into a cache (and Spark's own test jars, for their checkpoint files). A second run
# downloads nothing and takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
CACHE="${SPARKLAG_CACHE:-$HOME/.cache/sparklag}"
VENV="${SPARKLAG_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

need() { command -v "$1" >/dev/null 2>&1 || { echo "setup: '$1' is required ($2)" >&2; exit 1; }; }
need "$PYTHON" "Python >= 3.10"
need java "Java 17: apt-get update && apt-get install -y openjdk-17-jdk-headless"
need mvn "Maven: apt-get update && apt-get install -y maven"

fetch_jars() {  # fetch_jars COMPONENT...: Maven Central -> $CACHE/jars/<component>, once
  mkdir -p "$CACHE/jars"
  local component pom dir want
  for component in "$@"; do
    pom="testbed/jars/$component/pom.xml"
    dir="$CACHE/jars/$component"
    want=$(sha256sum "$pom" | cut -c1-16)
    if [ "$(cat "$dir/.complete" 2>/dev/null)" != "$want" ]; then
      echo "setup: fetching $component jars into $dir"
      rm -rf "$dir.partial"
      mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
        -DoutputDirectory="$dir.partial" >"$CACHE/mvn-$component.log" 2>&1 || {
          echo "setup: Maven could not fetch $component jars; log $CACHE/mvn-$component.log:" >&2
          tail -n 20 "$CACHE/mvn-$component.log" >&2; exit 1; }
      echo "$want" > "$dir.partial/.complete"
      rm -rf "$dir" && mv "$dir.partial" "$dir"
    fi
  done
}

# --- `--demo`: only what scripts/demo.sh runs (the package with Airflow and PySpark, Kafka and
# Spark's Kafka connector); the test command sets up the rest. -----------------------------------
if [ "${1:-}" = "--demo" ]; then
  want_py=$(cat pyproject.toml constraints.txt 2>/dev/null | sha256sum | cut -c1-16)
  [ -x "$VENV/bin/python" ] || { echo "setup: creating virtualenv $VENV"; "$PYTHON" -m venv "$VENV"; }
  if [ "$(cat "$VENV/.sparklag-installed" 2>/dev/null)" != "$want_py" ] \
      && [ "$(cat "$VENV/.sparklag-demo-installed" 2>/dev/null)" != "$want_py" ]; then
    echo "setup: installing Python packages for the demo (pip cache makes repeats fast)"
    # --no-compile: Python compiles what the demo imports when it imports it, not all of
    # Airflow's and PySpark's files up front
    "$VENV/bin/pip" install -q --no-compile --upgrade pip
    "$VENV/bin/pip" install -q --no-compile -c constraints.txt -e '.[airflow,spark]'
    echo "$want_py" > "$VENV/.sparklag-demo-installed"
  fi
  fetch_jars kafka spark-kafka
  echo "setup: demo ready in $(( $(date +%s) - start ))s (venv $VENV, jars $CACHE/jars)"
  exit 0
fi

# --- Kerberos headers: the apache-hdfs provider (airflow-hdfs extra) builds gssapi from source ----
if ! command -v krb5-config >/dev/null 2>&1; then
  echo "setup: installing libkrb5-dev (Debian package; gssapi for the apache-hdfs provider)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libkrb5-dev >/dev/null
fi

# --- Python ------------------------------------------------------------------------------------
stamp_py="$VENV/.sparklag-installed"
want_py=$(cat pyproject.toml constraints.txt 2>/dev/null | sha256sum | cut -c1-16)
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [ "$(cat "$stamp_py" 2>/dev/null)" != "$want_py" ]; then
  echo "setup: installing Python packages (pip cache makes repeats fast)"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -c constraints.txt -e '.[dev]'
  echo "$want_py" > "$stamp_py"
fi

# --- Prometheus (the exporter's tests scrape it with a real server) -----------------------------
if ! command -v prometheus >/dev/null 2>&1; then
  echo "setup: installing prometheus (Debian package)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq prometheus >/dev/null
fi

# --- Chromium (the "Streaming lag" page is tested in a real headless browser) -------------------
if ! command -v chromium >/dev/null 2>&1; then
  echo "setup: installing chromium (Debian package)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

# --- PostgreSQL (the "Streaming lag" page's queries run on it as Airflow's metadata database) ------
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && ! command -v postgres >/dev/null 2>&1; then
  echo "setup: installing postgresql (Debian package; testbed/postgres.py starts its own server)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi

# --- jars ----------------------------------------------------------------------------------------
# spark-tests / spark35-tests: Spark 4.2.0's and 3.5.7's own test jars, for their checkpoint
# resources (tests/integration/test_spark_test_corpus.py reads them; never on a classpath)
fetch_jars kafka spark-kafka s3a hdfs kdc spark-tests spark35-tests
bash scripts/setup_spark35.sh  # pyspark 3.5 venv + its Kafka connector (Spark 3.5 tests)
bash scripts/setup_compat.sh  # Airflow 2.11 / 3.0 and Python 3.10 / 3.13 venvs (test_compat.sh)

# --- toxiproxy (fault injection in tests) ---------------------------------------------------------
TOXIPROXY_VERSION=v2.12.0  # keep in step with testbed/toxiproxy.py
if [ "$(cat "$CACHE/bin/.toxiproxy-server.version" 2>/dev/null)" != "$TOXIPROXY_VERSION" ] \
    || [ ! -x "$CACHE/bin/toxiproxy-server" ]; then
  GO="$(command -v go || echo /usr/local/go/bin/go)"
  [ -x "$GO" ] || { echo "setup: 'go' is required to install toxiproxy (https://go.dev/dl/)" >&2; exit 1; }
  echo "setup: installing toxiproxy $TOXIPROXY_VERSION into $CACHE/bin"
  mkdir -p "$CACHE/bin"
  GOBIN="$CACHE/bin" "$GO" install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" \
    >"$CACHE/go-toxiproxy.log" 2>&1 || {
      echo "setup: go install toxiproxy failed; log $CACHE/go-toxiproxy.log:" >&2
      tail -n 20 "$CACHE/go-toxiproxy.log" >&2; exit 1; }
  mv "$CACHE/bin/server" "$CACHE/bin/toxiproxy-server"
  echo "$TOXIPROXY_VERSION" > "$CACHE/bin/.toxiproxy-server.version"
fi
# --- GCS and Azure emulators (tests/integration/test_gcs_azure.py) -------------------------------
FAKE_GCS_VERSION=v1.56.1  # keep in step with testbed/gcs_server.py
if [ "$(cat "$CACHE/bin/.fake-gcs-server.version" 2>/dev/null)" != "$FAKE_GCS_VERSION" ] \
    || [ ! -x "$CACHE/bin/fake-gcs-server" ]; then
  GO="$(command -v go || echo /usr/local/go/bin/go)"
  [ -x "$GO" ] || { echo "setup: 'go' is required to install fake-gcs-server (https://go.dev/dl/)" >&2; exit 1; }
  echo "setup: installing fake-gcs-server $FAKE_GCS_VERSION into $CACHE/bin"
  mkdir -p "$CACHE/bin"
  GOBIN="$CACHE/bin" "$GO" install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION" \
    >"$CACHE/go-fake-gcs-server.log" 2>&1 || {
      echo "setup: go install fake-gcs-server failed; log $CACHE/go-fake-gcs-server.log:" >&2
      tail -n 20 "$CACHE/go-fake-gcs-server.log" >&2; exit 1; }
  echo "$FAKE_GCS_VERSION" > "$CACHE/bin/.fake-gcs-server.version"
fi
AZURITE_VERSION=3.37.0  # keep in step with testbed/azurite.py
if [ "$(cat "$CACHE/node/.azurite.version" 2>/dev/null)" != "$AZURITE_VERSION" ] \
    || [ ! -x "$CACHE/node/node_modules/.bin/azurite-blob" ]; then
  need npm "Node.js and npm: apt-get update && apt-get install -y nodejs npm"
  echo "setup: installing azurite $AZURITE_VERSION into $CACHE/node"
  mkdir -p "$CACHE/node"
  npm install --prefix "$CACHE/node" --no-audit --no-fund "azurite@$AZURITE_VERSION" \
    >"$CACHE/npm-azurite.log" 2>&1 || {
      echo "setup: npm install azurite failed; log $CACHE/npm-azurite.log:" >&2
      tail -n 20 "$CACHE/npm-azurite.log" >&2; exit 1; }
  echo "$AZURITE_VERSION" > "$CACHE/node/.azurite.version"
fi
echo "setup: ready in $(( $(date +%s) - start ))s (venv $VENV, jars $CACHE/jars, tools $CACHE/bin)"
