#!/usr/bin/env bash
# A CycloneDX SBOM (JSON, spec 1.5) of the crates one package links for one target,
# without build-only dependencies: what a release archive or image actually contains.
#
#   scripts/sbom.sh OUT [PACKAGE [TARGET]]
#
# PACKAGE: kubectl-mcsched (default) or mcsched-agent; TARGET: a Rust target triple, by
# default this machine's. Needs cargo-cyclonedx on the PATH (`cargo install
# cargo-cyclonedx --locked`; the release workflow installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "sbom.sh: error: $*" >&2
    exit 1
}

[ $# -ge 1 ] && [ $# -le 3 ] || die "usage: scripts/sbom.sh OUT [PACKAGE [TARGET]]"
out=$1
package=${2:-kubectl-mcsched}
target=${3:-$(rustc -vV | sed -n 's/^host: //p')}
case "$package" in
    kubectl-mcsched) dir=cli ;;
    mcsched-agent) dir=agent ;;
    *) die "unknown package '$package' (kubectl-mcsched or mcsched-agent)" ;;
esac
command -v cargo-cyclonedx >/dev/null || die "cargo-cyclonedx is not on the PATH (cargo install cargo-cyclonedx --locked)"

# cargo-cyclonedx writes one file per workspace member, beside each Cargo.toml, under the
# name given; only the package's is kept.
name="mcsched-sbom-$$"
trap 'rm -f ./*/"$name.json"' EXIT
cargo cyclonedx --manifest-path "$dir/Cargo.toml" --format json --spec-version 1.5 \
    --no-build-deps --target "$target" --override-filename "$name" --quiet
mkdir -p "$(dirname "$out")"
mv "$dir/$name.json" "$out"
echo "sbom.sh: $out ($package, $target)"
