#!/usr/bin/env bash
# The test command (README). Fetches the real models the golden tests use
# (idempotent, checksum-verified, cached in ~/.cache/inferd), then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release -q -p inferd -- pull smollm2-135m-instruct qwen2.5-coder-0.5b-instruct qwen3-tokenizer
INFERD_REQUIRE_MODELS=1 cargo test --release --workspace "$@"
