#!/usr/bin/env bash
# Sets everything up, then runs the linter, the type checker and the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check src tests benchmarks examples scripts
ruff format --check src tests benchmarks examples scripts
mypy
exec python -m pytest -q --durations=30 "$@"
