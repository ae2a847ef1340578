#!/usr/bin/env bash
# The GPU check, for a machine with one or more CUDA GPUs: about 9 minutes on one H200 (measured: 30 s tests, 190 s
# MFU, ~300 s memory, 16 s gate), at most 570 s of parts, inside a lent device's 10-minute command (each part
# has its own time limit, and a part that fails or runs out of time does not stop the others):
#   1. the CUDA tests (pytest -m cuda): forward/backward on the GPU against the CPU, a tiny bf16-mixed training run;
#   2. bench/gpu_check.py: bf16 + torch.compile training of the `small` preset and of a ~125M-parameter config,
#      baseline and G1-gated: throughput, MFU against the GPU's dense bf16 peak, gated/baseline step time, training
#      peak memory against the memory plan's estimate; the paper's dense 1.7B at sequence length 4096: peak memory
#      against the estimate (baseline; G1 with activation checkpointing); with 2+ GPUs, FSDP over all of them;
#   3. bench/gate_step.py: the fused G1 gate's step time (one matmul, query rows then gate rows), elementwise and
#      headwise, over the baseline's (and unfused) on 4 layers of the paper's dense 1.7B model, batch 8 x 2048
#      (the paper: < 2% wall time).
# With --arms instead (about 3 minutes): the CUDA tests, then 4. alone: the step time of the attention weights
# slot's arms (the sink fixes and the attention-2025 study's arms, which write their attention weights out
# rather than calling a fused kernel) over the baseline's, same model and batch as 3.
#
# It runs on the machine as it is lent: with no .venv there, it takes that machine's python3 and torch (whatever
# CUDA build it holds), installs the wheels that bench/gpu_wheels.sh downloaded into .whl/ (pip --no-index
# --no-deps --target, a folder under /tmp) and imports ablate from this tree. Nothing of the store or MLflow runs.
#
# Usage: bench/gpu_check.sh [--cpu | --arms] [gpu_check.py options, e.g. --out figures.json --only mfu,memory]
#   --cpu: the same steps on CPU at tiny sizes (CUDA tests skipped): proves the bootstrap without a GPU
#   PYTHON=...: the interpreter (default: .venv/bin/python if there, else python3); WHEELS=DIR: the wheels (.whl)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cpu=0 arms=0
if [ "${1:-}" = "--cpu" ]; then cpu=1; shift; export CUDA_VISIBLE_DEVICES=; fi
if [ "${1:-}" = "--arms" ]; then arms=1; shift; fi
py=${PYTHON:-}
[ -z "$py" ] && { [ -x "$here/.venv/bin/python" ] && py=$here/.venv/bin/python || py=python3; }
wheels=${WHEELS:-$here/.whl}
if compgen -G "$wheels/*.whl" >/dev/null; then
  site=$(mktemp -d /tmp/ablate-gpu-site.XXXXXX)
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
    --target "$site" "$wheels"/*.whl || exit 1
  export PYTHONPATH="$site:$here${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
fi
"$py" -c "import ablate.runner" ||
  { echo "gpu_check.sh: $py cannot import ablate's runner: run bench/gpu_wheels.sh where pip reaches PyPI and carry .whl" >&2
    exit 1; }
export ABLATE_CACHE=${ABLATE_CACHE:-$(mktemp -d /tmp/ablate-gpu-cache.XXXXXX)}
if [ $cpu = 0 ]; then
  "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible')" || exit 1
  "$py" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.device_count(), 'x', torch.cuda.get_device_name(0))"
else
  "$py" -c "import torch; print('torch', torch.__version__, 'on CPU (--cpu)')"
fi
failed=()
t0=$SECONDS
part() {  # part NAME SECONDS CMD...: run one part under its time limit, note a failure, go on
  local name=$1 limit=$2; shift 2
  local t=$SECONDS
  echo "== $name"
  timeout -k 15 "$limit" "$@" || failed+=("$name (exit $?)")
  echo "== $name: $((SECONDS - t)) s"
}
# the CUDA tests' file alone: collecting the whole suite would import the store and MLflow
part "CUDA tests" 60 "$py" -m pytest -m cuda -q -p no:cacheprovider tests/unit/ablations/test_cuda.py
ARMS="sdpa-elementwise sink-learned softmax-off-by-one softpick diff-attention diff-attention-matched diff-v2
  forgetting-attention forgetting-attention-rope selective-attention sdpa-headwise-sparse"
if [ $arms = 1 ]; then
  # shellcheck disable=SC2086  # one word per arm
  part "attention weights arms' step time" 240 "$py" bench/gate_step.py --device cuda --preset paper-dense-1.7b \
    --layers 4 --batch 8 --seq 2048 --reps 6 --warmup 2 --variants $ARMS
elif [ $cpu = 0 ]; then
  part "training: MFU, memory, FSDP" 450 "$py" bench/gpu_check.py "$@"
  part "fused G1 step overhead" 60 "$py" bench/gate_step.py --device cuda --preset paper-dense-1.7b --layers 4 \
    --batch 8 --seq 2048 --reps 10 --warmup 3 --variants sdpa-elementwise sdpa-headwise
else
  part "training: MFU (--cpu)" 300 "$py" bench/gpu_check.py --cpu --steps 6 --warmup 2 "$@"
  part "fused G1 step overhead (--cpu)" 120 "$py" bench/gate_step.py --device cpu --preset tiny --batch 2 \
    --seq 32 --reps 3 --warmup 1 --variants sdpa-elementwise sdpa-headwise
fi
echo "== total $((SECONDS - t0)) s"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}"
  exit 1
fi
