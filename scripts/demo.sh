#!/usr/bin/env bash
# Sets everything up, profiles a small bundled training loop on the CPU, then analyses its trace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec torchdoctor demo "$@"
