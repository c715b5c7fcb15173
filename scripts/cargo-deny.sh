#!/usr/bin/env bash
# cargo-deny over the workspace (deny.toml), installed at a pinned version into
# .build/cargo-deny when it is not there yet (from crates.io, as any crate is).
#
#   scripts/cargo-deny.sh              licenses, bans and sources: what needs no network
#                                      beyond crates.io (`make test` runs this)
#   scripts/cargo-deny.sh advisories   the same and advisories (fetches the RustSec
#                                      database; the release workflow runs it)
#   scripts/cargo-deny.sh --version    the pinned version
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.20.2
ROOT=.build/cargo-deny
BIN=$ROOT/bin/cargo-deny

case "${1:-}" in
    --version)
        echo "$VERSION"
        exit 0
        ;;
    "") checks=(licenses bans sources) ;;
    advisories) checks=(licenses bans sources advisories) ;;
    *)
        echo "cargo-deny.sh: unknown argument '$1' (usage: scripts/cargo-deny.sh [advisories | --version])" >&2
        exit 2
        ;;
esac

if ! { [ -x "$BIN" ] && "$BIN" --version | grep -qx "cargo-deny $VERSION"; }; then
    cargo install cargo-deny --locked --version "$VERSION" --root "$ROOT"
fi
PATH="$PWD/$ROOT/bin:$PATH" exec cargo deny --locked check "${checks[@]}"
