#!/usr/bin/env bash
# Installs nvcc 13.0 and the CUDA runtime headers/libraries from PyPI into .cuda/ (git-ignored),
# where crates/inferd-runtime/build.rs finds them for `--features cuda`. Idempotent; all five
# packages pinned (unpinned, nvvm and crt come at a newer version than nvcc).
# Also FlashInfer's CUDA headers (the paged attention kernels) from its pinned wheel, checked
# by sha256 and unpacked into .cuda/fi (never vendored), and curand's headers that they include.
set -euo pipefail
cd "$(dirname "$0")/.."
pip=(python3 -m pip --quiet --disable-pip-version-check)
nvcc=.cuda/nvidia/cu13/bin/nvcc
if ! { [ -x "$nvcc" ] && "$nvcc" --version | grep -q "release 13.0"; }; then
  "${pip[@]}" install --target .cuda --no-deps --upgrade \
    nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
    nvidia-cuda-cccl==13.0.85 nvidia-cuda-runtime==13.0.96
  "$nvcc" --version | tail -1
fi
FI_WHEEL=flashinfer_python-0.7.2.post1-py3-none-any.whl
FI_SHA=bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49
if [ ! -f .cuda/fi/$FI_SHA ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  "${pip[@]}" download --no-deps flashinfer-python==0.7.2.post1 -d "$tmp"
  echo "$FI_SHA  $tmp/$FI_WHEEL" | sha256sum -c --quiet
  rm -rf .cuda/fi && mkdir -p .cuda/fi
  python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith(('flashinfer/data/include/', 'flashinfer/data/cccl/', 'flashinfer/data/cutlass/'))])" "$tmp/$FI_WHEEL" .cuda/fi
  touch .cuda/fi/$FI_SHA
fi
if [ ! -d .cuda/curand/nvidia/cu13/include ]; then
  "${pip[@]}" install --target .cuda/curand --no-deps nvidia-curand==10.4.5.25
fi
