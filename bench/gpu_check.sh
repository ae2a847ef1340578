#!/usr/bin/env bash
# The GPU check, for a machine with one CUDA GPU; under 8 minutes on an H100/H200:
#   1. the CUDA tests (pytest -m cuda): forward/backward on the GPU against the CPU, a tiny bf16-mixed training run;
#   2. bench/gpu_check.py: bf16 training of the `small` preset and of a ~125M-parameter config (--set overrides
#      change it), baseline and G1-gated: throughput, MFU against the GPU's dense bf16 peak, gated/baseline step time.
# Usage: bench/gpu_check.sh [gpu_check.py options, e.g. --out figures.json --set n_layers=12]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
cd "$here"
export ABLATE_CACHE=${ABLATE_CACHE:-$(mktemp -d /tmp/ablate-gpu-cache.XXXXXX)}
"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible')"
"$py" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name(0))"
echo "== CUDA tests"
t0=$SECONDS
timeout 240 "$py" -m pytest -m cuda -q -p no:cacheprovider tests/
echo "== CUDA tests: $((SECONDS - t0)) s"
echo "== bf16 training: throughput, MFU, gated / baseline"
t1=$SECONDS
timeout 360 "$py" bench/gpu_check.py "$@"
echo "== measurements: $((SECONDS - t1)) s; total $((SECONDS - t0)) s"
