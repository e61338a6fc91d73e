#!/usr/bin/env bash
# The GPU check: exercises torchdoctor's CUDA paths on one GPU in at most 8 minutes and leaves
# the evidence for each under $OUT: a log per section, run folders, JSON verdicts, and
# $OUT/summary.txt (one line per section: name, status, seconds, limit).
#
#   OUT=/tmp/gpu-check bash scripts/gpu_check.sh
#
# Run from the repository root. It runs the *current source* (src/ first on PYTHONPATH; wheels
# in .whl/ from scripts/fetch_gpu_wheels.sh only supply missing dependencies, never
# torchdoctor itself). Every section is independent: its own timeout, its own log, and a failure
# never stops the next one. A global deadline (GPU_CHECK_DEADLINE_S, default 450 s) caps the
# whole run: a section gets at most the time left, and sections that would start past it are
# recorded as skipped. GPU_CHECK_ONLY="env,syncs" runs only the named sections.
set -uo pipefail

ROOT=$(pwd)
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY="$OUT/summary.txt"
DEADLINE_S=${GPU_CHECK_DEADLINE_S:-450}
ONLY=${GPU_CHECK_ONLY:-}
CASES="$ROOT/scripts/gpu_check_cases"
PY=${PYTHON:-python3}
START_S=$SECONDS
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export TORCHINDUCTOR_CACHE_DIR="$OUT/.inductor-cache"

if [ -d .whl ] && compgen -G ".whl/*.whl" > /dev/null; then
  deps=()
  for whl in .whl/*.whl; do
    case "$(basename "$whl")" in
      torchdoctor-*) ;;  # never a prebuilt torchdoctor: it would be stale
      *) deps+=("$whl") ;;
    esac
  done
  if [ "${#deps[@]}" -gt 0 ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target /tmp/gpu-check-site "${deps[@]}" > "$OUT/pip.log" 2>&1
  fi
fi
export PYTHONPATH="$ROOT/src:/tmp/gpu-check-site${PYTHONPATH:+:$PYTHONPATH}"
TD=("$PY" -m torchdoctor)

echo "# gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) deadline ${DEADLINE_S}s" > "$SUMMARY"

wanted() {  # section name -> 0 when it should run ("x-verdict" runs with "x")
  [ -z "$ONLY" ] && return 0
  case ",$ONLY," in *",${1%-verdict},"*) return 0 ;; *) return 1 ;; esac
}

section() {  # name limit_s command...: run with a timeout, log, one summary line
  local name=$1 limit=$2
  shift 2
  wanted "$name" || return 0
  local left=$((DEADLINE_S - (SECONDS - START_S)))
  if [ "$left" -lt 15 ]; then
    printf '%-20s skipped (out of time)\n' "$name" >> "$SUMMARY"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS status rc
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124 | 137) status=timeout ;;
    *) status="failed (exit $rc)" ;;
  esac
  printf '%-20s %-18s %4ss (limit %ss)\n' "$name" "$status" $((SECONDS - t0)) "$limit" \
    >> "$SUMMARY"
}

# name kind limit script [check options...]: `torchdoctor check`, then a verdict on its run.
# CASE_ARGS (the script's arguments) and CASE_TORCHRUN=1 (launch under torchrun) are optional.
check_case() {
  local name=$1 kind=$2 limit=$3 script=$4 launch=("${TD[@]}") args=()
  shift 4
  [ -n "${CASE_TORCHRUN:-}" ] && launch=(torchrun --standalone --nproc_per_node=1 -m torchdoctor)
  [ -n "${CASE_ARGS:-}" ] && read -ra args <<< "$CASE_ARGS"
  section "$name" "$limit" "${launch[@]}" check --out "$OUT/runs-$name" --json "$@" "$script" \
    "${args[@]}"
  wanted "$name" || return 0
  section "$name-verdict" 20 "$PY" scripts/gpu_check_verify.py "$kind" "$OUT/runs-$name" "$script"
  cp "$OUT/$name-verdict.log" "$OUT/verdict-$name.json" 2> /dev/null
}

env_report() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,mig.mode.current --format=csv || true
  git -C "$ROOT" rev-parse HEAD 2> /dev/null || echo "not a git checkout"
  git -C "$ROOT" status --short 2> /dev/null | head -20
  "$PY" - "$ROOT" << 'EOF'
import sys, torch, torchdoctor
root = sys.argv[1]
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
print("torch", torch.__version__, "cuda", torch.version.cuda, gpu)
print("torchdoctor from", torchdoctor.__file__)
try:
    import pynvml
    print("pynvml", pynvml.__file__)
except ImportError:
    print("pynvml missing: NVML samples will be absent")
sys.exit(0 if torchdoctor.__file__.startswith(root + "/src/") else 3)  # 3: stale torchdoctor
EOF
}

memory_command() {  # analyse the OOM snapshot with the memory command, where it exists
  local snap
  snap=$(find "$OUT/runs-oom" -name 'memory_snapshot*.pickle' | head -1)
  [ -n "$snap" ] || { echo "no snapshot"; return 1; }
  if "$PY" -m torchdoctor memory --help > /dev/null 2>&1; then
    "$PY" -m torchdoctor memory "$snap"
  else
    echo "no memory command in this version; snapshot kept at $snap"
  fi
}

export ROOT OUT PY

# Sections, most important first: what runs late is what a short deadline drops.
section env 60 bash -c "$(declare -f env_report); env_report"
# NVML samples, sync-debug sites (GradScaler's and the user's), fp16 with GradScaler.
check_case syncs syncs 75 "$CASES/scaler_syncs.py" --warmup 3 --steps 20
# --memory with a provoked OOM: snapshot at the OOM, largest block at the script's line.
check_case oom oom 60 "$CASES/oom.py" --memory --warmup 2 --steps 4
section oom-memory-command 30 bash -c "$(declare -f memory_command); memory_command"
CASE_ARGS=--catch check_case oom-caught oom-caught 60 "$CASES/oom.py" --memory --full --warmup 2 \
  --steps 4
# The new TF32 API must not stop the window or the record.
check_case tf32 tf32 60 "$CASES/tf32_new_api.py" --warmup 3 --steps 10
section fp16 60 "$PY" scripts/gpu_check_paths.py "$OUT" fp16
section meter 60 "$PY" scripts/gpu_check_paths.py "$OUT" meter
section compile 120 "$PY" scripts/gpu_check_paths.py "$OUT" compile
# DDP over NCCL, world size 1: the runtime, and check on the DDP example.
section ddp-runtime 60 torchrun --standalone --nproc_per_node=1 scripts/gpu_check_paths.py "$OUT" ddp
CASE_TORCHRUN=1 check_case ddp-check ddp 75 "$ROOT/examples/check/ddp_train.py" --warmup 3 \
  --steps 5
# Side-stream prefetch overlap (copy under compute, read from the trace), auto precision, MFU.
section runtime 120 "$PY" scripts/gpu_check_runtime.py "$OUT" --steps 20
# The tuner: --max-trials only stops new trials; the final pair still runs.
section tune 150 "${TD[@]}" tune examples/workloads/mlp_adamw.py --max-trials 4 --steps 10 \
  --out "$OUT/torchdoctor.toml"
# Planted problems profiled on CUDA and analysed.
section analyze 90 "$PY" scripts/gpu_check_analyze.py "$OUT"

printf '# done in %ss\n' $((SECONDS - START_S)) >> "$SUMMARY"
cat "$SUMMARY"
