#!/usr/bin/env bash
# The GPU check: exercises torchdoctor's GPU paths on a CUDA machine in under 8 minutes and
# writes every result under $OUT. Prepare the wheels first with scripts/fetch_gpu_wheels.sh,
# then run this from the repository root on the GPU machine (carrying .whl).
set -uo pipefail
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:${PWD}/src
else
  export PYTHONPATH=${PWD}/src
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())" >> "$OUT/gpu.txt"

step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s)" | tee -a "$OUT/summary.txt"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "exit $?" | tee -a "$OUT/summary.txt"
  tail -n 15 "$OUT/$name.log" >> "$OUT/summary.txt"
}

# 1. analyze: planted problems profiled on the GPU, each must be found.
step analyze 120 python3 scripts/gpu_check_analyze.py "$OUT"
# 2. runtime: auto precision, prefetch overlap, MFU of a GPT-style model.
step runtime 150 python3 scripts/gpu_check_runtime.py "$OUT"
# 3. check: the planted-problem example scripts run through `torchdoctor check` on CUDA.
step check 120 python3 -m torchdoctor check examples/check/item_per_step.py
# 4. tune: a short tuning run on the MLP workload.
step tune 60 python3 -m torchdoctor tune examples/workloads/mlp_adamw.py --budget 50s \
  --out "$OUT/torchdoctor.toml"
echo "done" | tee -a "$OUT/summary.txt"
