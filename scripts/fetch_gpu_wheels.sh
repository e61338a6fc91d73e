#!/usr/bin/env bash
# Downloads the pure-Python / binary wheels torchdoctor needs that the GPU machine's image lacks
# (Python 3.12, x86_64), into .whl/ (git-ignored), for an offline install there.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
for pkg in msgspec tomli-w isal; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${plat[@]}" -d .whl "$pkg"
done
python3 -m pip wheel -q --no-deps -w .whl .
ls .whl
