#!/usr/bin/env bash
# Runs again the tests of the packages named, as `cargo test --release --workspace` built
# them, under the caller's environment (.ci/run: the engine's tests with step overlap on,
# the engine's and the server's with speculation on). `cargo test -p PKG` would build them
# anew: cargo unifies dependencies' features over the packages a command selects, so
# selecting the engine alone gives serde_json, tokio and a dozen more other features than
# the workspace does, and recompiles half the tree (5 minutes a run on 2 cores). Here the
# workspace's build is only listed (fresh: nothing compiles) and each test binary of the
# packages named runs from its package's directory, as cargo runs it. Doc tests are not
# run again.
#
#   scripts/test-again.sh inferd-engine inferd-server [-- TEST-HARNESS-ARGS]
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do pkgs+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
[ ${#pkgs[@]} -gt 0 ] || { echo "usage: $0 PACKAGE... [-- ARGS]" >&2; exit 2; }
list=$(mktemp); trap 'rm -f "$list"' EXIT
# The executables, one "package<TAB>package-dir<TAB>executable" line each, in cargo's order.
cargo test --release --workspace --no-run --message-format=json | python3 -c '
import json, os, sys
wanted = set(sys.argv[1:])
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    pkg_dir = os.path.dirname(m["manifest_path"])
    spec = m["package_id"].split("#")[-1]  # NAME@VERSION, or VERSION where NAME is the dir
    name = spec.split("@")[0] if "@" in spec else os.path.basename(pkg_dir)
    if name in wanted:
        print(name, pkg_dir, m["executable"], sep="\t")
' "${pkgs[@]}" > "$list"
for p in "${pkgs[@]}"; do
  cut -f1 "$list" | grep -qx "$p" || { echo "$0: no test binaries for $p" >&2; exit 2; }
done
failed=0
while IFS=$'\t' read -r _ dir exe <&3; do
  echo "     Running $(basename "$exe") (in ${dir#"$PWD"/})"
  (cd "$dir" && "$exe" "$@" </dev/null) || failed=1
done 3< "$list"
exit $failed
