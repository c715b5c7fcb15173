#!/usr/bin/env bash
# Packages `kubectl mcsched` for krew on this machine's platform.
#
#   scripts/package.sh [--debug]
#   scripts/package.sh --manifest-only
#
# MCSCHED_DIST_DIR puts the output somewhere else than dist/ (the e2e test uses a temporary
# directory, so that it never overwrites a release's dist/); CARGO_TARGET_DIR is honoured.
#
# 1. builds kubectl-mcsched (`cargo build --release -p kubectl-mcsched`); with --debug, for
#    tests only (never publish that archive), `cargo build --workspace --bins` instead: the
#    dev build `make build` and `make test` already did, so nothing is compiled twice
#    (`-p kubectl-mcsched` alone unifies fewer features and would build tokio, hyper and
#    kube a second time);
# 2. writes dist/kubectl-mcsched_<os>_<arch>.tar.gz with kubectl-mcsched,
#    kubectl_complete-mcsched (kubectl's plugin completion) and LICENSE at
#    the archive root, as the files: list of krew/mcsched.yaml expects;
# 3. writes dist/mcsched.yaml: krew/mcsched.yaml with the sha256 of every platform whose
#    archive is in dist/ (this one, just built, and any other put there); the others keep
#    the committed value.
#
# With --manifest-only, nothing is built: only step 3, for the archives already in dist/.
#
# A release (.github/workflows/release.yml) runs this on each platform of the manifest —
# linux/amd64, linux/arm64, darwin/amd64, darwin/arm64 — gathers the four archives in one
# dist/, runs it there with --manifest-only so that dist/mcsched.yaml carries all four
# sums, and publishes the archives and that manifest under the tag v<version>. Test the result with
#   kubectl krew install --manifest=dist/mcsched.yaml --archive=dist/kubectl-mcsched_<os>_<arch>.tar.gz
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MANIFEST="$ROOT/krew/mcsched.yaml"
DIST="${MCSCHED_DIST_DIR:-$ROOT/dist}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
PLATFORMS=(linux_amd64 linux_arm64 darwin_amd64 darwin_arm64)

die() {
    echo "package.sh: error: $*" >&2
    exit 1
}
say() { echo "package.sh: $*"; }

profile=release
manifest_only=false
for arg in "$@"; do
    case "$arg" in
        --debug) profile=debug ;;
        --manifest-only) manifest_only=true ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        *) die "unknown argument '$arg' (usage: scripts/package.sh [--debug | --manifest-only])" ;;
    esac
done

# The version: [workspace.package] version in Cargo.toml; the manifest must agree.
version="$(awk '
    /^\[/ { in_pkg = ($0 == "[workspace.package]") }
    in_pkg && $1 == "version" { gsub(/"/, "", $3); print $3; exit }
' "$ROOT/Cargo.toml")"
[[ -n "$version" ]] || die "no version in [workspace.package] of $ROOT/Cargo.toml"
manifest_version="$(awk '$1 == "version:" { gsub(/"/, "", $2); print $2; exit }' "$MANIFEST")"
[[ "$manifest_version" == "v$version" ]] ||
    die "krew/mcsched.yaml has version '$manifest_version' but Cargo.toml says $version: update spec.version and the uris to v$version"

sha256_of() {
    if command -v sha256sum >/dev/null; then
        sha256sum "$1" | awk '{print $1}'
    else
        shasum -a 256 "$1" | awk '{print $1}'
    fi
}

if [[ "$manifest_only" == false ]]; then
    case "$(uname -s)" in
        Linux) os=linux ;;
        Darwin) os=darwin ;;
        *) die "unsupported OS $(uname -s) (the manifest has linux and darwin)" ;;
    esac
    case "$(uname -m)" in
        x86_64 | amd64) arch=amd64 ;;
        aarch64 | arm64) arch=arm64 ;;
        *) die "unsupported architecture $(uname -m) (the manifest has amd64 and arm64)" ;;
    esac
    platform="${os}_${arch}"
    archive="$DIST/kubectl-mcsched_${platform}.tar.gz"
    grep -q "kubectl-mcsched_${platform}.tar.gz" "$MANIFEST" ||
        die "krew/mcsched.yaml has no platform $os/$arch"

    say "building kubectl-mcsched v$version for $os/$arch ($profile profile)"
    if [[ "$profile" == release ]]; then
        cargo build --manifest-path "$ROOT/Cargo.toml" --release -p kubectl-mcsched
    else
        say "warning: --debug builds an archive for tests only; do not publish it"
        cargo build --manifest-path "$ROOT/Cargo.toml" --workspace --bins
    fi
    binary="$TARGET_DIR/$profile/kubectl-mcsched"
    [[ -x "$binary" ]] || die "cargo built no $binary (is CARGO_TARGET_DIR set the same as for cargo?)"

    mkdir -p "$DIST"
    stage="$(mktemp -d)"
    trap 'rm -rf "$stage"' EXIT
    cp "$binary" "$stage/kubectl-mcsched"
    cp "$ROOT/krew/kubectl_complete-mcsched" "$stage/kubectl_complete-mcsched"
    cp "$ROOT/LICENSE" "$stage/LICENSE"
    chmod 0755 "$stage/kubectl-mcsched" "$stage/kubectl_complete-mcsched"
    chmod 0644 "$stage/LICENSE"
    tar -C "$stage" -czf "$archive.tmp" kubectl-mcsched kubectl_complete-mcsched LICENSE
    mv "$archive.tmp" "$archive"
    say "wrote $archive ($(wc -c <"$archive" | tr -d ' ') bytes)"
else
    ls "$DIST"/kubectl-mcsched_*.tar.gz >/dev/null 2>&1 || die "--manifest-only: no kubectl-mcsched_<os>_<arch>.tar.gz in $DIST"
fi

# "os_arch=sum ..." for every platform whose archive is in dist/.
sums=""
filled=""
for p in "${PLATFORMS[@]}"; do
    a="$DIST/kubectl-mcsched_${p}.tar.gz"
    if [[ -f "$a" ]]; then
        s="$(sha256_of "$a")"
        [[ "$s" =~ ^[0-9a-f]{64}$ ]] || die "bad sha256 '$s' for $a"
        sums+="$p=$s "
        filled+=" $p"
        say "sha256 $p: $s"
    fi
done

# The sha256 line that follows each platform's uri gets that platform's sum.
awk -v sums="$sums" '
    BEGIN {
        n = split(sums, pairs, " ")
        for (i = 1; i <= n; i++) { split(pairs[i], kv, "="); sum[kv[1]] = kv[2] }
    }
    $1 == "uri:" {
        current = ""
        if (match($2, /kubectl-mcsched_[a-z0-9]+_[a-z0-9]+\.tar\.gz$/)) {
            current = substr($2, RSTART + 16, RLENGTH - 16 - 7)
        }
    }
    $1 == "sha256:" && current != "" && (current in sum) {
        indent = substr($0, 1, index($0, "sha256:") - 1)
        print indent "sha256: \"" sum[current] "\""
        filled[current] = 1
        current = ""
        next
    }
    { print }
    END { for (p in sum) if (!(p in filled)) { print "no sha256 line for " p > "/dev/stderr"; exit 1 } }
' "$MANIFEST" >"$DIST/mcsched.yaml.tmp" || die "could not fill the sha256 values into $DIST/mcsched.yaml"
mv "$DIST/mcsched.yaml.tmp" "$DIST/mcsched.yaml"
say "wrote $DIST/mcsched.yaml (sha256 filled for:${filled})"
if [[ "$manifest_only" == false ]]; then
    say "try it: kubectl krew install --manifest=$DIST/mcsched.yaml --archive=$archive"
fi
