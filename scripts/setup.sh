#!/usr/bin/env bash
# What a fresh machine needs beyond Rust, Go, kubectl and make: rustfmt and clippy, and for
# the real-node tests (a kubelet on containerd) Debian's containerd, runc, CNI plugins,
# nftables, iproute2 and busybox-static (the e2e suite's busybox image). The packages are
# installed only when missing, which needs root (CI runs this as root); without root, it says what to install and the real-node tests
# fail naming what is missing.
set -euo pipefail
for tool in cargo go kubectl make; do
  command -v "$tool" >/dev/null || { echo "setup: $tool is required but not on PATH" >&2; exit 1; }
done
if command -v rustup >/dev/null; then
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi

# Debian packages of the real node: package, then a file it installs.
PACKAGES=(
  "containerd /usr/bin/containerd"
  "runc /usr/sbin/runc"
  "containernetworking-plugins /usr/lib/cni/bridge"
  "nftables /usr/sbin/nft"
  "iproute2 /usr/sbin/ip"
  "ca-certificates /etc/ssl/certs/ca-certificates.crt"
  # The busybox image of the scheduling e2e suite's pods (scripts/image.sh conformance).
  "busybox-static /bin/busybox"
)
missing=()
for entry in "${PACKAGES[@]}"; do
  read -r package file <<<"$entry"
  [[ -e "$file" ]] || missing+=("$package")
done
if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: the real-node tests need: ${missing[*]}; as root: apt-get install ${missing[*]}" >&2
  elif ! command -v apt-get >/dev/null; then
    echo "setup: the real-node tests need ${missing[*]} and this machine has no apt-get" >&2
  else
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # No service is started (there is no systemd here, and the tests run containerd of
    # their own): policy-rc.d refuses the package's start for the length of the install.
    policy=/usr/sbin/policy-rc.d
    had_policy=false
    [[ -e $policy ]] && had_policy=true
    $had_policy || { printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; }
    status=0
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || status=$?
    $had_policy || rm -f "$policy"
    ((status == 0)) || { echo "setup: apt-get install ${missing[*]} failed" >&2; exit "$status"; }
  fi
fi
