#!/usr/bin/env bash
# Builds .whl/ (git-ignored): the wheels of the dependencies the GPU machine's image lacks, for
# its Python (CPython 3.12, x86_64 manylinux), so scripts/gpu_check.sh installs them there with
# pip --no-index (that machine reaches no package index). The image already has torch, numpy,
# click, rich (with markdown-it-py, mdurl, pygments) and nvidia-ml-py; it lacks msgspec, tomli-w,
# isal and libcst (what `torchdoctor fix` rewrites scripts with), with libcst's one dependency on
# CPython 3.12, pyyaml. No torchdoctor wheel: the check runs the current source from src/.
#
#   bash scripts/fetch_gpu_wheels.sh            # then copy .whl/ with the checkout
#   GPU_WHEELS_EXTRA="somepkg==1.2" bash scripts/fetch_gpu_wheels.sh   # one more package
#
# --no-deps: each package is named, one version each (two versions of one stop the install).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl
mkdir -p .whl
plat=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
  manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  plat+=(--platform "$p")
done
read -ra extra <<< "${GPU_WHEELS_EXTRA:-}"
for pkg in msgspec tomli-w isal libcst pyyaml "${extra[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${plat[@]}" -d .whl "$pkg"
done
ls -l .whl
du -sh .whl  # the working tree that travels, .whl included, must stay under 64 MiB
