#!/usr/bin/env bash
# Here: prepare.sh's whole carry (test binaries, cuda_check, inferd) for this tree with a
# patch applied, as .device/carry_NAME (git-ignored), so that one GPU call can time the
# patch as a variant (variant.sh) and then run the patched tree's test bodies:
#   CARRY=.device/carry_NAME TESTS_PLAIN=1 bash .device/carry/run.sh tests
# (carry both folders). Built in a worktree at /tmp/inferd-tree-NAME, from a copy of this
# tree's target/ the first time (only the workspace's crates build again).
# Usage: tree-carry.sh NAME PATCH   (PATCH: as `git diff` writes it, from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../.."
name=$1 patch=$(realpath "$2") main=$PWD
wt=/tmp/inferd-tree-$name
if [ ! -d "$wt" ]; then
  git worktree add --detach "$wt" HEAD
  if [ -d target ]; then cp -r target "$wt/target"; fi
else # an earlier patch out (its new files too; ignored ones, target/ among them, stay)
  git -C "$wt" reset --quiet --hard "$(git rev-parse HEAD)"
  git -C "$wt" clean --quiet -fd
fi
ln -sfn "$main/.cuda" "$wt/.cuda"
# prepare.sh copies ../shared/gpu/make_qwen3_8b.py from beside the checkout.
[ -e "$wt/../shared" ] || ln -s "$(realpath ../shared)" "$wt/../shared"
git -C "$wt" apply "$patch"
(cd "$wt" && bash scripts/gpu/prepare.sh)
rm -rf ".device/carry_$name" && cp -r "$wt/.device/carry" ".device/carry_$name"
du -sh ".device/carry_$name"
