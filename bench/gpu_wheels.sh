#!/usr/bin/env bash
# The wheels a lent GPU machine lacks for bench/gpu_check.sh, downloaded here into .whl/ (ignored by git: name it in
# the device's carry so that it travels with the working tree; the GPU machine reaches no package registry).
#
# The GPU machine's own Python (python3, 3.12) already holds torch (a CUDA build), Lightning, transformers,
# numpy, pandas, scipy, matplotlib, PyYAML, rich, typer, pytest and pytest-timeout. What the check imports
# beyond those (the runner's config schema: pydantic) is listed below, pinned to constraints.txt's versions.
# Nothing of the store, MLflow, Optuna or submitit is needed: the check trains through the runner alone.
#
#   bench/gpu_wheels.sh                        # cp312 manylinux wheels into .whl/ (about 3 MB)
#   bench/gpu_wheels.sh --python-version 3.11  # for another Python (the CPU proof in docs/gpu.md)
#   bench/gpu_wheels.sh --dest DIR
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dest=$here/.whl
version=3.12
while [ $# -gt 0 ]; do
  case $1 in
    --dest) dest=$2; shift 2 ;;
    --python-version) version=$2; shift 2 ;;
    *) echo "gpu_wheels.sh: unknown option $1 (allowed: --dest DIR, --python-version X.Y)" >&2; exit 2 ;;
  esac
done
# what the GPU machine's Python lacks, and what those need that it may hold too old (typing_extensions)
missing=(pydantic pydantic_core annotated-types typing-inspection typing_extensions)
pins=()
for name in "${missing[@]}"; do
  # constraints.txt spells a name with - or _; pip's names compare without that difference
  pattern=$(echo "$name" | sed 's/[-_]/[-_]/g')
  pin=$(grep -iE "^${pattern}==" "$here/constraints.txt") || { echo "gpu_wheels.sh: $name is not pinned in constraints.txt" >&2; exit 1; }
  pins+=("$pin")
done
pip=${PIP:-$(command -v pip3 || command -v pip)}
[ -x "$here/.venv/bin/pip" ] && pip=${PIP:-$here/.venv/bin/pip}
mkdir -p "$dest"
rm -f "$dest"/*.whl
"$pip" download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dest" "${pins[@]}" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
du -sh "$dest" | cut -f1 | xargs -I{} echo "gpu_wheels.sh: ${#pins[@]} wheels for Python $version in $dest ({})"
ls "$dest"
