#!/usr/bin/env bash
# The GPU check: one short run on one CUDA GPU (built for an H200 borrowed for a few minutes) that
# decides, on evidence, whether each of torchdoctor's GPU paths works, and returns it in three
# files: $OUT/summary.txt (one line per section: PASS/FAIL/TIMEOUT/SKIPPED, seconds, the figure
# that decided it; also printed to standard output), $OUT/verdicts.json (every verdict with its
# checks and evidence) and $OUT/evidence.tar.gz (logs and run records, no traces or snapshots,
# under 16 MiB). Everything else (run folders, traces, the inductor and Triton caches, the
# installed wheels) stays in $GPU_CHECK_WORK (/tmp/gpu-check).
#
#   bash scripts/gpu_check.sh                       # OUT defaults to /tmp/gpu-check-out
#   GPU_CHECK_DRY=1 OUT=/tmp/x bash scripts/gpu_check.sh   # no GPU: every verdict on faked inputs
#
# On the H200 machine: copy the checkout there with the wheels that scripts/fetch_gpu_wheels.sh
# built in .whl/ (msgspec, tomli-w, isal, libcst, pyyaml for cp312 manylinux), then from the
# repository root, under a 450 s wall-clock limit:
#
#   timeout 450 bash scripts/gpu_check.sh
#
# The sections stop starting at GPU_CHECK_DEADLINE_S (390 s); packing takes seconds, so 450 s
# holds the run. With a cold start of 1-2 minutes that is about 9.5 of the 15 device minutes,
# which leaves one immediate rerun of what failed, e.g.
#   GPU_CHECK_ONLY=meter,tune GPU_CHECK_DEADLINE_S=180 timeout 240 bash scripts/gpu_check.sh
# (docs/gpu-check.md lists the sections and what each decides on).
#
# It runs the current source (src/ first on PYTHONPATH); the wheels only supply missing
# dependencies and are installed with pip --no-index (its result is the summary's second line).
# Sections run cheapest and most informative first, each in its own process with its own limit,
# log and status; one failing never stops the next; none starts past the deadline.
# GPU_CHECK_ONLY="env,meter" runs only the named sections (or groups: runtime, dist).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
OUT=${OUT:-/tmp/gpu-check-out}
WORK=${GPU_CHECK_WORK:-/tmp/gpu-check}
DEADLINE_S=${GPU_CHECK_DEADLINE_S:-390}
DRY=${GPU_CHECK_DRY:-}
ONLY=${GPU_CHECK_ONLY:-}
PY=${PYTHON:-python3}
CASES="$ROOT/scripts/gpu_check_cases"
START_S=$SECONDS
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)

mkdir -p "$OUT" "$WORK"
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
# A fresh run keeps only the compile caches and the installed wheels from an earlier one.
find "$WORK" -mindepth 1 -maxdepth 1 ! -name inductor-cache ! -name triton-cache ! -name site \
  -exec rm -rf {} +
mkdir -p "$WORK/status" "$WORK/verdicts" "$WORK/tune"
rm -f "$OUT/summary.txt" "$OUT/verdicts.json" "$OUT/evidence.tar.gz"

export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export TORCHINDUCTOR_CACHE_DIR="$WORK/inductor-cache" TRITON_CACHE_DIR="$WORK/triton-cache"
export CUDA_CACHE_PATH="$WORK/cuda-cache"
export ROOT WORK PY CASES DRY

# -- dependencies: the carried wheels, offline ---------------------------------------------------
PIP_RC=null
PIP_NOTE="no .whl/ here (scripts/fetch_gpu_wheels.sh builds it); the image's packages are used"
wheels=()
for whl in .whl/*.whl; do
  [ -e "$whl" ] || continue
  case "$(basename "$whl")" in
    torchdoctor-*) ;; # never a prebuilt torchdoctor: it would be stale
    *) wheels+=("$whl") ;;
  esac
done
if [ "${#wheels[@]}" -gt 0 ]; then
  target="$WORK/site"
  extra=()
  if [ -n "$DRY" ]; then
    # Here the wheels are for another Python: check they install for the GPU image (cp312,
    # manylinux), into a folder that never goes on this Python's path.
    target="$WORK/site-dry"
    extra=(--python-version 3.12 --implementation cp --only-binary=:all:
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64)
  fi
  "$PY" -m pip install --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$target" "${extra[@]}" "${wheels[@]}" > "$WORK/pip.log" 2>&1
  PIP_RC=$?
  names=$(for w in "${wheels[@]}"; do basename "$w" | cut -d- -f1-2; done | paste -sd' ' -)
  if [ "$PIP_RC" -eq 0 ]; then
    PIP_NOTE="ok: ${#wheels[@]} wheels installed with --no-index ($names)"
  else
    PIP_NOTE="FAILED (exit $PIP_RC): $(tail -1 "$WORK/pip.log")"
  fi
fi
if [ -n "$DRY" ]; then
  export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$ROOT/src:$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
TORCHRUN=("$PY" -m torch.distributed.run --standalone --nproc_per_node=1 --local-addr 127.0.0.1)

# -- running a section ---------------------------------------------------------------------------
wanted() { # group [its sections...]: selected by GPU_CHECK_ONLY (everything when unset)
  [ -z "$ONLY" ] && return 0
  local name
  for name in "$@"; do
    case ",$ONLY," in *",$name,"*) return 0 ;; esac
  done
  return 1
}

status() { # group status rc seconds limit
  printf '{"group": "%s", "status": "%s", "rc": %s, "seconds": %s, "limit": %s}\n' \
    "$1" "$2" "$3" "$4" "$5" > "$WORK/status/$1.json"
}

group() { # name limit command...: one process with its timeout, log and status
  local name=$1 limit=$2
  shift 2
  local left=$((DEADLINE_S - (SECONDS - START_S)))
  if [ "$left" -lt 10 ]; then
    status "$name" skipped null 0 "$limit"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS rc state
  timeout --kill-after=10 "$limit" "$@" > "$WORK/$name.log" 2>&1
  rc=$?
  case $rc in
    0) state=ok ;;
    124 | 137) state=timeout ;;
    *) state=failed ;;
  esac
  status "$name" "$state" "$rc" $((SECONDS - t0)) "$limit"
  printf '%-12s %-8s %4ss\n' "$name" "$state" $((SECONDS - t0))
}

# section script [check options...] -- [script arguments...]: `torchdoctor check`, then verdict.
# shellcheck disable=SC2329  # called through `bash -c` (exported below)
check_case() {
  local section=$1 script=$2 launch=("$PY" -m torchdoctor) opts=() args=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1") && shift; done
  [ $# -gt 0 ] && shift
  args=("$@")
  [ "$section" = ddp-check ] && launch=("$PY" -m torch.distributed.run --standalone
    --nproc_per_node=1 --local-addr 127.0.0.1 -m torchdoctor)
  local runs="$WORK/runs-$section"
  "${launch[@]}" check --out "$runs" "${opts[@]}" "$script" "${args[@]}"
  echo "torchdoctor check exited $?"
  local memory=()
  if [ "$section" = oom ]; then
    local snap
    snap=$(find "$runs" -name 'memory_snapshot*.pickle' | head -1)
    "$PY" -m torchdoctor memory "${snap:-missing.pickle}" --json > "$WORK/oom-memory.json"
    memory=("$WORK/oom-memory.json" "$?")
  fi
  "$PY" "$ROOT/scripts/gpu_check_verify.py" "$section" "$runs" "$script" "$WORK" "${memory[@]}"
}

# shellcheck disable=SC2329  # called through `bash -c` (exported below)
tune_case() { # the tuner on a GEMM-bound MLP (data on the device), precision only, bounded
  "$PY" -m torchdoctor tune "$CASES/tune_precision.py" --knobs precision --max-trials 4 \
    --trial-timeout 60s --warmup 2 --steps 10 --max-rounds 8 --fidelity-steps 12 \
    --db "$WORK/tune/tune.sqlite" --out "$WORK/tune/torchdoctor.toml" --json "$WORK/tune/tune.json"
  local rc=$?
  "$PY" "$ROOT/scripts/gpu_check_judge.py" tune "$WORK" "$rc" "$WORK/tune/tune.json" 4
}
export -f check_case tune_case

run_group() { # name limit sections -- GPU command...: the GPU command, or the dry run
  local name=$1 limit=$2 sections=$3
  shift 3
  [ "$1" = "--" ] && shift
  IFS=, read -ra list <<< "$sections"
  wanted "$name" "${list[@]}" || return 0
  if [ -n "$DRY" ]; then
    group "$name" "$limit" "$PY" "$ROOT/scripts/gpu_check_dry.py" "$WORK" "${list[@]}"
  else
    group "$name" "$limit" "$@"
  fi
}

RUNTIME=precision,meter,prefetch,fp16,memory-history,tune-loop
runtime_only=$RUNTIME
if [ -n "$ONLY" ] && ! wanted runtime; then
  runtime_only=$(tr , '\n' <<< "$RUNTIME" | while read -r s; do wanted "$s" && echo "$s"; done |
    paste -sd, -)
fi

echo "# gpu_check $STARTED ${DRY:+(dry run) }deadline ${DEADLINE_S}s; pip: $PIP_NOTE"

# -- the sections, most informative per second first (what a short deadline drops is last) ------
run_group env 40 env -- "$PY" scripts/gpu_check_paths.py "$WORK" env "$PIP_RC"
# Planted problems profiled on CUDA and analysed; the kernel names this GPU runs are recorded.
run_group analyze 80 analyze -- "$PY" scripts/gpu_check_analyze.py "$WORK"
# fp16 + GradScaler with an .item() per step: NVML samples, sync-debug sites at the user's lines.
run_group syncs 60 syncs -- bash -c 'check_case "$@"' _ syncs "$CASES/scaler_syncs.py" \
  --warmup 3 --steps 10 -- --steps 20
# TF32 through the new fp32_precision API: the window and the record must survive it.
run_group tf32 50 tf32 -- bash -c 'check_case "$@"' _ tf32 "$CASES/tf32_new_api.py" \
  --warmup 3 --steps 6 -- --steps 12
# --memory with a provoked OOM: the observer's snapshot, the largest block at the script's line.
run_group oom 50 oom -- bash -c 'check_case "$@"' _ oom "$CASES/oom.py" --memory --warmup 2 \
  --steps 4 -- --steps 8
run_group oom-caught 50 oom-caught -- bash -c 'check_case "$@"' _ oom-caught "$CASES/oom.py" \
  --memory --full --warmup 2 --steps 4 -- --steps 8 --catch
# Precision, MFU, prefetch overlap, GradScaler, memory history, the tuner's loop: one process.
run_group runtime 100 "$runtime_only" -- "$PY" scripts/gpu_check_runtime.py "$WORK" \
  --only "$runtime_only"
# DDP and FSDP2 over a one-rank NCCL group made in the check.
run_group dist 60 ddp,fsdp -- "${TORCHRUN[@]}" scripts/gpu_check_paths.py "$WORK" dist
run_group ddp-check 60 ddp-check -- bash -c 'check_case "$@"' _ ddp-check \
  "$ROOT/examples/check/ddp_train.py" --warmup 3 --steps 5 -- --steps 12
# Every kernel taking >= 1% of the GPU time in the traces above is classified by its name.
run_group kernels 40 kernels -- "$PY" scripts/gpu_check_kernels.py "$WORK"
# The probe effect: a GPT-2-shaped and a small char model, plain and under check, interleaved.
run_group probe 150 probe -- "$PY" scripts/gpu_check_probe.py "$WORK"
run_group tune 120 tune -- bash -c tune_case
run_group compile 120 compile -- "$PY" scripts/gpu_check_paths.py "$WORK" compile

# -- the three files -------------------------------------------------------------------------------
elapsed=$((SECONDS - START_S))
src_hash=$(find src -name '*.py' -print0 | sort -z | xargs -0 cat | sha256sum | cut -c1-12)
commit=$(git rev-parse --short HEAD 2> /dev/null || echo "src $src_hash")
PIP_NOTE="$PIP_NOTE" ONLY="$ONLY" "$PY" - "$WORK/meta.json" "$STARTED" "$DEADLINE_S" "$elapsed" "$commit" \
  "$src_hash" << 'EOF'
import json, os, sys
path, started, deadline, elapsed, commit, src_hash = sys.argv[1:]
json.dump({"started": started, "deadline_s": int(deadline), "elapsed_s": int(elapsed),
           "commit": commit, "src_sha256_12": src_hash, "dry": bool(os.environ.get("DRY")),
           "only": os.environ.get("ONLY", ""), "pip": os.environ["PIP_NOTE"]},
          open(path, "w"), indent=2)
EOF
if ! "$PY" scripts/gpu_check_report.py "$WORK" "$OUT"; then
  echo "# the report failed: the process statuses instead"
  cat "$WORK"/status/*.json
  exit 1
fi
grep -qE '^[a-z0-9-]+ +(FAIL|TIMEOUT|SKIPPED)' "$OUT/summary.txt" && exit 1
exit 0
