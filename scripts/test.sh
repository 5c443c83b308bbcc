#!/usr/bin/env bash
# The test command (README). Fetches the real models the golden tests use
# (idempotent, checksum-verified, cached in ~/.cache/inferd) and the OpenAI and Anthropic
# Python SDKs, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
# The official OpenAI Python SDK (pinned; needs Python >= 3.10) for the end-to-end test
# crates/inferd/tests/openai_sdk.rs and protocols_sdk.rs. Skipped when that version already imports. Outside a
# virtual environment it goes to the user site; where the distribution marks its Python as
# externally managed (PEP 668: Debian 12, Ubuntu 23.04+) pip needs --break-system-packages
# for that too (a --user install leaves the distribution's own packages alone).
OPENAI_SDK=3.57.0
# The official Anthropic Python SDK (pinned) for crates/inferd/tests/protocols_sdk.rs.
ANTHROPIC_SDK=2.15.0
pip_install() { # MODULE VERSION
  if ! python3 -c "import $1, sys; sys.exit($1.__version__ != '$2')" 2>/dev/null; then
    pip_args=(--quiet --disable-pip-version-check)
    if [ "$(python3 -c 'import sys; print(sys.prefix == sys.base_prefix)')" = True ]; then
      pip_args+=(--user)
      python3 -c 'import os, sysconfig; os.stat(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))' \
        2>/dev/null && pip_args+=(--break-system-packages)
    fi
    python3 -m pip install "${pip_args[@]}" "$1==$2"
    python3 -c "import $1" # fails CI here, not in the test, when the install did not take
  fi
}
pip_install openai "$OPENAI_SDK"
pip_install anthropic "$ANTHROPIC_SDK"
cargo run --release -q -p inferd -- pull smollm2-135m-instruct qwen2.5-coder-0.5b-instruct qwen3-tokenizer
# Fail, rather than skip, when a model or a Python SDK is missing.
export INFERD_REQUIRE_MODELS=1 INFERD_REQUIRE_SDK=1
cargo test --release --workspace "$@"
