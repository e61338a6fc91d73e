#!/usr/bin/env bash
# Sets everything up, then runs the linter, the type checker and the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check src tests benchmarks examples scripts
ruff format --check src tests benchmarks examples scripts
mypy
if [ $# -gt 0 ]; then
  exec python -m pytest -q --durations=30 "$@"
fi
# Tests that only read recorded data (rules on hand-written records, run.json rows, trace parsing,
# the analyses on the real traces, memory snapshots) time nothing: they run two at a time
# (pytest-xdist). Everything else times steps or loads the machine on purpose, so it runs alone
# afterwards, never beside another test.
READS_ONLY=(tests/rules tests/record tests/trace tests/analysis tests/memory)
python -m pytest -q -n 2 "${READS_ONLY[@]}"
exec python -m pytest -q --durations=30 "${READS_ONLY[@]/#/--ignore=}"
