#!/usr/bin/env bash
# Runs the Gated DeltaNet CUDA kernels' own source on the host (no GPU): copies of
# kernels/delta_net.cu and delta_rule.cu compiled as C++ against common.cuh here (a host
# stand-in for kernels/common.cuh: a block's threads as std::threads, __syncthreads and warp
# shuffles as barriers, bf16 on f32 bits), each kernel called through its C entry point and
# checked against the CPU backend's op (hybrid_ops_emu.cpp) at the tiny fixtures' shapes, the
# CUDA test model's and the Qwen3.5-9B head shape.
# Usage: scripts/dev/kernel-emulation/run.sh (needs g++ >= 11).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k=$here/../../../crates/inferd-runtime/kernels
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$here/common.cuh" "$here/hybrid_ops_emu.cpp" "$tmp/"
# The one construct common.cuh cannot redefine: dynamic shared memory.
sed -e 's/extern __shared__ float smem\[\];/float* smem = emu::dyn_smem;/' "$k/delta_rule.cu" > "$tmp/delta_rule.cu"
cp "$k/delta_net.cu" "$tmp/delta_net.cu"
cd "$tmp"
g++ -std=c++20 -O2 -pthread -x c++ hybrid_ops_emu.cpp -o ops
status=0
#        nk nv dk  dv  taps head_dim
for shape in "2 4 16 16 4 16" \
             "3 3 8 12 3 32" \
             "2 4 128 128 4 256" \
             "1 2 40 70 4 64"; do
  ./ops $shape || status=1
done
exit $status
