#!/usr/bin/env bash
# Prepares the earlier release `make test-upgrade` upgrades from: the source tree of git
# revision REV (default $UPGRADE_FROM) exported into .build/upgrade/REV/src, built there
# in a target of its own (its own Cargo.lock, --locked), and its agent packed as an image
# tagged mcsched.test/mcsched-agent:REV by that tree's own scripts/image.sh. Prints the
# directory. Nothing is rebuilt when the directory already holds a finished build.
#
#   scripts/upgrade-from.sh [REV]
#
# Needs the repository's history (a shallow clone lacks REV: `git fetch --unshallow`).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REV=${1:-${UPGRADE_FROM:?UPGRADE_FROM or an argument names the revision to upgrade from}}
die() {
  echo "upgrade-from.sh: error: $*" >&2
  exit 1
}

commit=$(git -C "$ROOT" rev-parse --verify --quiet "$REV^{commit}") ||
  die "revision $REV is not in this repository's history (a shallow clone? run \`git fetch --unshallow\`)"
short=$(git -C "$ROOT" rev-parse --short=7 "$commit")
DIR="$ROOT/.build/upgrade/$short"
SRC="$DIR/src"
DONE="$DIR/built"
if [[ -f $DONE ]]; then
  echo "$DIR"
  exit 0
fi

rm -rf "$DIR"
mkdir -p "$SRC"
# An export, not a worktree: nothing registered in the repository, removed with .build.
git -C "$ROOT" archive --format=tar "$commit" | tar -x -C "$SRC"
echo "upgrade-from.sh: building $short (agent, CLI) in $SRC/target" >&2
# Its own target: the earlier lock file's versions never mix with this tree's build.
(cd "$SRC" && CARGO_TARGET_DIR="$SRC/target" cargo build --locked --workspace --bins) >&2
(cd "$SRC" && CARGO_TARGET_DIR="$SRC/target" MCSCHED_IMAGE_BUILD=debug \
  IMAGE="mcsched.test/mcsched-agent:$short" bash scripts/image.sh agent) >&2
for f in "$SRC/target/debug/mcsched-agent" "$SRC/target/debug/kubectl-mcsched" \
  "$SRC/.build/image/mcsched-agent.tar" "$SRC/.build/image/mcsched-agent.ref"; do
  [[ -e $f ]] || die "$short built, but $f is missing"
done
echo "$commit" >"$DONE"
echo "$DIR"
