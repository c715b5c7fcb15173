#!/usr/bin/env bash
# What a fresh machine needs beyond Rust, Go, kubectl and make: rustfmt and clippy.
set -euo pipefail
for tool in cargo go kubectl make; do
  command -v "$tool" >/dev/null || { echo "setup: $tool is required but not on PATH" >&2; exit 1; }
done
if command -v rustup >/dev/null; then
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
