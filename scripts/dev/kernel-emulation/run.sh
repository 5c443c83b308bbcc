#!/usr/bin/env bash
# Runs the Gated DeltaNet CUDA kernels' own source on the host (no GPU): the kernel bodies of
# kernels/delta_rule.cu and delta_net.cu, with CUDA's keywords turned into host C++ (shared
# memory as statics, __syncthreads as a std::barrier over one std::thread per CUDA thread),
# against reference computations. Usage: scripts/dev/kernel-emulation/run.sh (needs g++ >= 11).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k=$here/../../../crates/inferd-runtime/kernels
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# delta_rule.cu: from its anonymous namespace up to the first launch helper.
awk '/^namespace \{/{on=1} /^template <int KMAX>$/{if(seen) exit; seen++} on{print}' "$k/delta_rule.cu" |
  sed -e 's/extern __shared__ float smem\[\];/float* smem = g_smem;/' -e 's/__shared__ float/static float/' \
      -e 's/__global__//' -e 's/__launch_bounds__([a-zA-Z0-9]*)//' -e 's/__host__ __device__//' \
      > "$tmp/delta_rule.inc"
echo "}  // namespace" >> "$tmp/delta_rule.inc"
# delta_net.cu: its convolution kernels.
awk '/^namespace \{/{on=1} /^__global__ void l2_norm_kernel/{exit} on{print}' "$k/delta_net.cu" |
  sed -e 's/__global__//' -e 's/__device__ __forceinline__//' -e 's/using ifd::bf16;//' > "$tmp/conv.inc"
echo "}" >> "$tmp/conv.inc"
cp "$here"/*.cpp "$tmp/"
cd "$tmp"
for shape in "40 70 64" "128 128 128" "16 16 32"; do
  set -- $shape
  g++ -std=c++20 -O2 -pthread -DEMU_DK=$1 -DEMU_DV=$2 -DEMU_KMAX=$3 delta_rule_emu.cpp -o delta_rule
  echo -n "delta rule, heads of $1 x $2: "; ./delta_rule
done
g++ -std=c++17 -O2 conv_emu.cpp -o conv && ./conv
