#!/usr/bin/env bash
# Side-by-side CPU speed of inferd and llama.cpp (llama-bench) on the same GGUF files and
# threads. Repeats the pair of measurements ROUNDS times, alternating engines, because the
# machine is shared and noisy; prints every round's table rows (docs/RESULTS.md).
# Needs: scripts/peers/build-llama-cpp.sh run once.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
LB=${LLAMA_BENCH:-.peers/llama.cpp/build/bin/llama-bench}
[[ -x "$LB" ]] || { echo "llama-bench not found at $LB: run scripts/peers/build-llama-cpp.sh" >&2; exit 1; }
cargo build --release -q -p inferd
for round in $(seq "$ROUNDS"); do
  for m in smollm2-135m-instruct qwen2.5-coder-0.5b-instruct; do
    ./target/release/inferd speed -m "$m" -r 2 -p 512 -n 128 --llama-bench "$LB" | tail -n 4 | sed "s/^/round $round /"
  done
done
