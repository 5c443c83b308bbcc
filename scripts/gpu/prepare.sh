#!/usr/bin/env bash
# Here: builds what a GPU run needs into .device/carry (git-ignored): the runtime's test
# binaries, cuda_check and inferd with feature cuda, stripped, in one xz archive, the scripts
# run.sh calls, and SmolLM2's GGUF in two xz parts (a call carries at most 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.device/carry
rm -rf "$out" && mkdir -p "$out"
probe=
# PROBE=1: also cuda_check with feature kernel-probe (cuda_check_probe: our kernels stamp
# their blocks), for run.sh's `kernels` stage; built first, the plain one over it after.
if [ "${PROBE:-0}" = 1 ]; then
  cargo build --release -p inferd-runtime --features cuda,kernel-probe --example cuda_check
  strip -o "$out/cuda_check_probe" target/release/examples/cuda_check
  probe=cuda_check_probe
fi
cargo build --release -p inferd-runtime --features cuda --example cuda_check
cargo build --release -p inferd --features cuda
cargo test --release -p inferd-runtime --features cuda --no-run 2>&1 | tee /tmp/inferd-no-run.log
for t in workspace kv_blocks hf_reference hybrid_reference cuda_graphs cuda_attention cuda_hybrid; do
  exe=$(grep -o "target/release/deps/$t-[0-9a-f]*" /tmp/inferd-no-run.log | head -1)
  strip -o "$out/$t" "$exe"
done
strip -o "$out/cuda_check" target/release/examples/cuda_check
strip -o "$out/inferd" target/release/inferd
bins="workspace kv_blocks hf_reference hybrid_reference cuda_graphs cuda_attention cuda_hybrid cuda_check inferd $probe"
# BASE=<rev>: also cuda_check as built at that revision (cuda_check_base), for run.sh's `ab`
# stage, which times the two in one call. Built from a worktree into target/base (a full
# build the first time, incremental after).
if [ -n "${BASE:-}" ]; then
  wt=/tmp/inferd-base
  git worktree remove --force $wt 2>/dev/null || rm -rf $wt
  git worktree add --detach $wt "$BASE"
  ln -s "$PWD/.cuda" $wt/.cuda
  (cd $wt && CARGO_TARGET_DIR="$OLDPWD/target/base" cargo build --release -p inferd-runtime --features cuda --example cuda_check)
  strip -o "$out/cuda_check_base" target/base/release/examples/cuda_check
  git worktree remove --force $wt
  bins="$bins cuda_check_base"
fi
# Variants of cuda_check built by variant.sh (.device/variants/variant_*).
for v in .device/variants/variant_*; do
  [ -x "$v" ] || continue
  cp "$v" "$out/" && bins="$bins $(basename "$v")"
done
# One solid archive with a dictionary wider than a binary: the binaries share the kernel
# library, which is then stored once (about 15 MB in all, against 54 as nine .xz files).
tar -C "$out" -cf - $bins | xz -T1 --lzma2=preset=6,dict=192MiB > "$out/bins.tar.xz"
(cd "$out" && rm $bins)
# The Qwen3 tokenizer, for serving the Qwen3-8B-shaped model made there.
tok=${INFERD_CACHE_DIR:-$HOME/.cache/inferd}/models/qwen3-tokenizer
mkdir -p "$out/tokenizer" && cp "$tok"/* "$out/tokenizer/" && xz -T2 -6 "$out"/tokenizer/tokenizer.json
cp scripts/gpu/*.py scripts/gpu/*.sh scripts/schemas/long-thought.json ../shared/gpu/make_qwen3_8b.py "$out/"
pwd > "$out/build-root.txt" # where the test binaries look for fixtures/
[ "${SMOL:-0}" = 1 ] || { du -sh "$out"; exit 0; }
smol=${INFERD_CACHE_DIR:-$HOME/.cache/inferd}/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
xz -T2 -6 -c "$smol" > /tmp/smol.gguf.xz
mkdir -p .device/smol1 .device/smol2
split -n 2 -d /tmp/smol.gguf.xz /tmp/smol.part.
mv /tmp/smol.part.00 .device/smol1/ && mv /tmp/smol.part.01 .device/smol2/
du -sh "$out" .device/smol1 .device/smol2
