#!/usr/bin/env bash
# Creates .venv (if missing) and installs torchdoctor with its test tools and the CPU build of torch.
# Idempotent: a second run only checks that everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
stamp=.venv/.torchdoctor-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  python -m pip install -q --upgrade pip >/dev/null
  # torch 2.13.0 is the CPU build on machines without a GPU; any torch >= 2.5 works.
  python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
  python -m pip install -q -e ".[dev,dask,lightning,transformers,browser-tests]"  # --dask, integration, browser tests
  # The integration tests also run the callback under the older pytorch_lightning namespace.
  python -m pip install -q "pytorch-lightning>=2.2"
  touch "$stamp"
fi
# The HTML report is tested in a real browser: Debian's chromium, driven by Playwright.
if ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
      >/dev/null || echo "setup: could not install chromium; the browser tests will skip" >&2
  else
    echo "setup: chromium is missing (apt-get install chromium); the browser tests will skip" >&2
  fi
fi
python -c "import playwright" 2>/dev/null || python -m pip install -q "playwright>=1.45"
