#!/usr/bin/env bash
# README command 1: set up (idempotent), then run the main job end to end on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --demo  # only what the demo runs; scripts/test.sh sets up the rest
exec "${SPARKLAG_VENV:-.venv}/bin/python" scripts/demo.py "$@"
