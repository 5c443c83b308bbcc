#!/usr/bin/env bash
# Runs CUDA kernels' own source on the host (no GPU), compiled as C++ against common.cuh
# here (a host stand-in for kernels/common.cuh: a block's threads as fibers,
# __syncthreads and warp shuffles as barriers, bf16 on f32 bits), each kernel called
# through its C entry point:
# - the Gated DeltaNet kernels (delta_net.cu, delta_rule.cu, delta_pieces.cu) against the CPU backend's op
#   (hybrid_ops_emu.cpp) at the tiny fixtures' shapes, the CUDA test model's and the
#   Qwen3.5-9B head shape;
# - the planned draws (sample_plan.cu) over cases inferd-core writes, its results checked
#   there against the host sampler, bit for bit (sample_emu.cpp);
# - the 8-bit KV kernels (attention.cu's append, page dequantization and simple attention,
#   decode.cu, kv_gather.cu's copy into contiguous K/V, also from bf16 pages) for Q8 and Fp8: codes and scales bit for bit against a quantizer of its own,
#   attention against double precision over the dequantized rows (kv8_emu.cpp; cuda_fp8.h
#   stands in for CUDA's e4m3 conversions);
# - the norms', SwiGLU's and qkv_prep's 16-byte paths against the scalar kernels they
#   replace, on the same inputs (elementwise_emu.cpp);
# - qkv_prep's store of the new K/V rows into the pool against qkv_prep then the KV
#   append, byte for byte, in every pool dtype (kv_store_emu.cpp);
# - decode attention over bf16 pages, its SIMT and tensor-core builds (decode_emu.cpp; mma
#   and ldmatrix computed warp-wide from the lanes' fragments), against double precision;
# - the matrix-vector kernel against double precision (gemv_emu.cpp);
# - chains of products in one persistent kernel (chain.cu), its blocks side by side,
#   against the matrix-vector kernel bit for bit (chain_emu.cpp).
# Usage: scripts/dev/kernel-emulation/run.sh (needs g++ >= 11).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k=$here/../../../crates/inferd-runtime/kernels
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$here/common.cuh" "$here/hybrid_ops_emu.cpp" "$here/sample_emu.cpp" "$k/sample_plan.cu" "$tmp/"
cp "$here/cuda_fp8.h" "$here/kv8_emu.cpp" "$k/attention.cu" "$k/kv8.cuh" "$k/inferd.h" "$tmp/"
cp "$here/elementwise_emu.cpp" "$here/decode_emu.cpp" "$here/expect.h" "$here/cooperative_groups.h" "$k/fused.cu" "$k/norm.cu" "$tmp/"
cp "$here/gemv_emu.cpp" "$here/kv_store_emu.cpp" "$here/chain_emu.cpp" "$k/gemv.cu" "$k/kv_gather.cu" "$tmp/"
# The one construct common.cuh cannot redefine: dynamic shared memory.
for f in delta_rule delta_pieces; do
  sed -e 's/extern __shared__ float smem\[\];/float* smem = emu::dyn_smem;/' "$k/$f.cu" > "$tmp/$f.cu"
done
for f in decode chain; do
  sed -e 's/extern __shared__ float smem\[\];/float* smem = emu::dyn_smem;/' "$k/$f.cu" > "$tmp/$f.cu"
done
cp "$k/delta_net.cu" "$tmp/delta_net.cu"
cd "$tmp"
# Every program compiled first, two at a time (the compiles are most of the run).
# (gemv.cu and chain.cu read bf16 pairs out of uint4 registers, CUDA's idiom: not strict
# aliasing.)
cc() { g++ -std=c++20 -O2 -pthread -I"$tmp" "$@"; }
printf '%s\n' "-x c++ hybrid_ops_emu.cpp -o ops" "-x c++ sample_emu.cpp -o sample" \
  "-x c++ kv8_emu.cpp -o kv8" "-x c++ decode_emu.cpp -o decode" \
  "-fno-strict-aliasing -x c++ gemv_emu.cpp -o gemv" \
  "-fno-strict-aliasing -x c++ chain_emu.cpp -o chain" \
  "-x c++ elementwise_emu.cpp -o elementwise" "-x c++ kv_store_emu.cpp -o kv_store" |
  { export -f cc; export tmp; xargs -P 2 -I{} bash -c 'cc {}'; }
status=0
# The Gated DeltaNet kernels against the CPU backend's ops.
#        nk nv dk  dv  taps head_dim
for shape in "2 4 16 16 4 16" \
             "3 3 8 12 3 32" \
             "2 4 128 128 4 256" \
             "1 2 40 70 4 64" \
             "2 4 6 10 4 16"; do
  ./ops $shape || status=1
done
# Planned draws: cases from inferd-core, the kernel here, the check there.
root=$here/../../..
export INFERD_SAMPLE_EMU=$tmp
(cd "$root" && cargo test -q -p inferd-core --lib planned_draws_on_the_emulated_kernel -- --ignored) >/dev/null
./sample "$tmp/cases.bin" "$tmp/outs.bin"
(cd "$root" && cargo test -q -p inferd-core --lib planned_draws_on_the_emulated_kernel -- --ignored) || status=1
# 8-bit KV: append, pages, decode and simple attention.
./kv8 || status=1
# Decode attention over bf16 pages, SIMT and tensor-core builds.
./decode || status=1
# The matrix-vector kernel.
./gemv || status=1
# Chains of products in one persistent kernel, its blocks side by side.
./chain || status=1
# The norms, SwiGLU and qkv_prep.
./elementwise || status=1
# qkv_prep's store into the pool.
./kv_store || status=1
exit $status
