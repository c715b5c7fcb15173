#!/usr/bin/env bash
# Prints the agent image that this source tree releases and that `kubectl mcsched install`
# deploys by default: REPOSITORY:vVERSION, read from the one place each is defined
# (mcsched_shared::keys::AGENT_IMAGE_REPOSITORY and [workspace.package] version in
# Cargo.toml; mcsched_shared::manifests::default_image joins them the same way).
#
#   scripts/image-ref.sh              ghcr.io/mcsched/mcsched-agent:v0.1.0
#   scripts/image-ref.sh --version    0.1.0
#   scripts/image-ref.sh --repository ghcr.io/mcsched/mcsched-agent
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$(awk '
    /^\[/ { in_pkg = ($0 == "[workspace.package]") }
    in_pkg && $1 == "version" { gsub(/"/, "", $3); print $3; exit }
' "$root/Cargo.toml")"
repository="$(sed -n 's/^pub const AGENT_IMAGE_REPOSITORY: &str = "\([^"]*\)";$/\1/p' "$root/shared/src/keys.rs")"
[[ -n "$version" ]] || { echo "image-ref.sh: no version in [workspace.package] of Cargo.toml" >&2; exit 1; }
[[ -n "$repository" ]] || { echo "image-ref.sh: no AGENT_IMAGE_REPOSITORY in shared/src/keys.rs" >&2; exit 1; }
case "${1:-}" in
  "") echo "$repository:v$version" ;;
  --version) echo "$version" ;;
  --repository) echo "$repository" ;;
  *) echo "usage: scripts/image-ref.sh [--version|--repository]" >&2; exit 2 ;;
esac
