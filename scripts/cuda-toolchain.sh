#!/usr/bin/env bash
# Installs nvcc 13.0 and the CUDA runtime headers/libraries from PyPI into .cuda/ (git-ignored),
# where crates/inferd-runtime/build.rs finds them for `--features cuda`. Idempotent; all five
# packages pinned (unpinned, nvvm and crt come at a newer version than nvcc).
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=.cuda/nvidia/cu13/bin/nvcc
if [ -x "$nvcc" ] && "$nvcc" --version | grep -q "release 13.0"; then
  exit 0
fi
python3 -m pip install --quiet --disable-pip-version-check --target .cuda --no-deps --upgrade \
  nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
  nvidia-cuda-cccl==13.0.85 nvidia-cuda-runtime==13.0.96
"$nvcc" --version | tail -2
