#!/usr/bin/env bash
# The GPU check, for a machine with one or more CUDA GPUs; about 8 minutes on one H100/H200, at most ~10 (each part
# has its own time limit, and a part that fails or runs out of time does not stop the others):
#   1. the CUDA tests (pytest -m cuda): forward/backward on the GPU against the CPU, a tiny bf16-mixed training run;
#   2. bench/gpu_check.py: bf16 + torch.compile training of the `small` preset and of a ~125M-parameter config,
#      baseline and G1-gated: throughput, MFU against the GPU's dense bf16 peak, gated/baseline step time, training
#      peak memory against the memory plan's estimate; the paper's dense 1.7B at sequence length 4096: peak memory
#      against the estimate (baseline; G1 with activation checkpointing); with 2+ GPUs, FSDP over all of them;
#   3. bench/gate_step.py: the fused G1 gate's step time (one matmul, query rows then gate rows), elementwise and
#      headwise, over the baseline's (and unfused) on 4 layers of the paper's dense 1.7B model, batch 8 x 2048
#      (the paper: < 2% wall time).
# Usage: bench/gpu_check.sh [gpu_check.py options, e.g. --out figures.json --only mfu,memory]
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
cd "$here"
export ABLATE_CACHE=${ABLATE_CACHE:-$(mktemp -d /tmp/ablate-gpu-cache.XXXXXX)}
"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible')" || exit 1
"$py" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.device_count(), 'x', torch.cuda.get_device_name(0))"
failed=()
t0=$SECONDS
part() {  # part NAME SECONDS CMD...: run one part under its time limit, note a failure, go on
  local name=$1 limit=$2; shift 2
  local t=$SECONDS
  echo "== $name"
  timeout "$limit" "$@" || failed+=("$name (exit $?)")
  echo "== $name: $((SECONDS - t)) s"
}
part "CUDA tests" 100 "$py" -m pytest -m cuda -q -p no:cacheprovider tests/
part "training: MFU, memory, FSDP" 420 "$py" bench/gpu_check.py "$@"
part "fused G1 step overhead" 90 "$py" bench/gate_step.py --device cuda --preset paper-dense-1.7b --layers 4 \
  --batch 8 --seq 2048 --reps 10 --warmup 3 --variants sdpa-elementwise sdpa-headwise
echo "== total $((SECONDS - t0)) s"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
