#!/usr/bin/env bash
# Here: builds cuda_check with a patch applied to the working tree, as
# .device/variants/variant_NAME (stripped), then takes the patch out again; prepare.sh
# carries every variant there beside the plain build, for run.sh stages that time builds
# side by side on one machine (a kernel as it was, against the one in the tree).
# Usage: variant.sh NAME PATCH   (PATCH: as `git diff` writes it, from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../.."
name=$1 patch=$(realpath "$2")
git apply --check "$patch"
git apply "$patch"
trap 'git apply -R "$patch"' EXIT
cargo build --release -p inferd-runtime --features cuda --example cuda_check
mkdir -p .device/variants
strip -o ".device/variants/variant_$name" target/release/examples/cuda_check
