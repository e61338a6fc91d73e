#!/usr/bin/env bash
# Downloads the pure-Python / binary wheels torchdoctor needs that the GPU machine's image may
# lack (Python 3.12, x86_64), into .whl/ (git-ignored), for an offline install there. No
# torchdoctor wheel: scripts/gpu_check.sh runs the current source from src/.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)  # .git is a file in a worktree
mkdir -p "$(dirname "$exclude")"
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo /.whl/ >> "$exclude"
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
# nvidia-ml-py: pynvml for the NVML samples; click and rich (with its dependencies) for the CLI.
for pkg in msgspec tomli-w isal nvidia-ml-py click rich markdown-it-py mdurl pygments; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${plat[@]}" -d .whl "$pkg"
done
rm -f .whl/torchdoctor-*.whl  # left by older versions of this script; gpu_check.sh skips it
ls .whl
