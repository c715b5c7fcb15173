#!/usr/bin/env bash
# Builds container images without a container engine or registry (tools/image, a Go
# program on go-containerregistry, packs a root filesystem into one layer):
#
#   scripts/image.sh agent     the agent image (`make image`): the release build of
#                              mcsched-agent (the debug build with MCSCHED_IMAGE_BUILD=debug) on the layout of scripts/image-rootfs.sh,
#                              tagged $IMAGE (default: scripts/image-ref.sh), written to
#                              .build/image/mcsched-agent.tar (docker load, ctr images
#                              import, kind load image-archive) and .build/image/oci (an
#                              OCI image layout, for skopeo/crane/oras to push)
#   scripts/image.sh test      the images the real-node tests run (`make test-images`):
#                              .build/image/pause.tar (mcsched.test/pause:1, the pod
#                              sandbox) and .build/image/hello.tar (mcsched.test/hello:1,
#                              an HTTP server saying hello), static Go programs
#   scripts/image.sh conformance the pause, agnhost and busybox images of Kubernetes' scheduling
#                              e2e suite for a real node (`make conformance`)
#
# The .test domain never resolves, so nothing can ever pull these test images: they
# exist only where a test imported them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/.build/image"
TOOL="$ROOT/.build/mcsched-image"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

say() { echo "image.sh: $*"; }
die() {
  echo "image.sh: error: $*" >&2
  exit 1
}

# Same flags as the other Go builds, so the build cache is shared (see the Makefile).
go_build() {
  local dir=$1 out=$2 pkg=$3
  (cd "$ROOT/$dir" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out" "$pkg")
}

platform() {
  case "$(uname -m)" in
    x86_64 | amd64) echo linux/amd64 ;;
    aarch64 | arm64) echo linux/arm64 ;;
    *) die "unsupported architecture $(uname -m)" ;;
  esac
}

size_of() { du -h "$1" | cut -f1; }

build_tool() {
  mkdir -p "$OUT"
  go_build tools/image "$TOOL" .
}

agent() {
  local ref="${IMAGE:-$("$ROOT/scripts/image-ref.sh")}"
  local version
  version="$("$ROOT/scripts/image-ref.sh" --version)"
  # MCSCHED_IMAGE_BUILD=debug packs the debug build instead (`make test` does: the same
  # image but for the binary's optimisation, without a second build of the workspace).
  local build=${MCSCHED_IMAGE_BUILD:-release}
  local profile_flag
  case "$build" in
    release) profile_flag=--release ;;
    debug) profile_flag= ;;
    *) die "MCSCHED_IMAGE_BUILD: must be release or debug, not \"$build\"" ;;
  esac
  say "building mcsched-agent ($build) for $ref"
  # The debug build as `cargo build --workspace --bins` made it: `-p mcsched-agent` alone
  # resolves some dependency features otherwise (cargo unifies them over the packages it
  # is given) and would build kube and the agent again.
  local packages=(-p mcsched-agent)
  [[ $build == debug ]] && packages=(--workspace --bin mcsched-agent)
  cargo build --manifest-path "$ROOT/Cargo.toml" $profile_flag --locked "${packages[@]}"
  build_tool
  local rootfs="$OUT/rootfs"
  bash "$ROOT/scripts/image-rootfs.sh" "$TARGET_DIR/$build/mcsched-agent" "$ROOT/LICENSE" "$rootfs"
  rm -rf "$OUT/oci"
  # The same user, entrypoint, port and environment as the Dockerfile.
  "$TOOL" --rootfs "$rootfs" --ref "$ref" --platform "$(platform)" \
    --entrypoint /mcsched-agent --user 65532:65532 --workdir /home/nonroot \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --expose 10259/tcp \
    --label org.opencontainers.image.title=mcsched-agent \
    --label org.opencontainers.image.version="$version" \
    --label org.opencontainers.image.licenses=Apache-2.0 \
    --docker-archive "$OUT/mcsched-agent.tar" --oci-layout "$OUT/oci"
  echo "$ref" >"$OUT/mcsched-agent.ref"
  say "$ref: archive $(size_of "$OUT/mcsched-agent.tar"), root filesystem $(du -sh "$rootfs" | cut -f1)"
  say "load it with: docker load -i $OUT/mcsched-agent.tar   (or: ctr -n k8s.io images import, kind load image-archive)"
  say "install it with: kubectl mcsched install --image $ref"
}

test_images() {
  build_tool
  local work
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  for app in pause hello; do
    mkdir -p "$work/$app"
    go_build tools/image "$work/$app/$app" "./$app"
    "$TOOL" --rootfs "$work/$app" --ref "mcsched.test/$app:1" --platform "$(platform)" \
      --entrypoint "/$app" --user 65532:65532 \
      --docker-archive "$OUT/$app.tar" >/dev/null
    say "mcsched.test/$app:1: $OUT/$app.tar ($(size_of "$OUT/$app.tar"))"
  done
}

# The images Kubernetes' scheduling e2e suite runs on a real node (`make conformance`),
# under the names the suite gives them once its registries are overridden to
# mcsched.test/e2e (KUBE_TEST_REPO_LIST, see tests/tests/conformance.rs), with the tags of
# test/utils/image/manifest.go in the k8s.io/kubernetes module of tests/conformance:
# .build/image/e2e-pause.tar (tools/image/pause), .build/image/e2e-agnhost.tar
# (k8s.io/kubernetes/test/images/agnhost, a `tool` of tests/conformance/go.mod) and
# .build/image/e2e-busybox.tar (Debian's busybox-static).
conformance_images() {
  build_tool
  local work k8s manifest
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  k8s="$(cd "$ROOT/tests/conformance" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  manifest="$k8s/test/utils/image/manifest.go"
  tag_of() { sed -n "s/.*configs\[$1\] = Config{list\.[A-Za-z0-9]*, \"[a-z]*\", \"\([^\"]*\)\"}.*/\1/p" "$manifest"; }
  local pause_tag agnhost_tag busybox_tag
  pause_tag="$(tag_of Pause)"
  agnhost_tag="$(tag_of Agnhost)"
  busybox_tag="$(tag_of BusyBox)"
  [[ -n $pause_tag && -n $agnhost_tag && -n $busybox_tag ]] ||
    die "no pause, agnhost or busybox tag in $manifest"
  [[ -x /bin/busybox ]] || die "/bin/busybox is missing (Debian's busybox-static: scripts/setup.sh)"
  mkdir -p "$work/pause" "$work/agnhost" "$work/busybox/bin"
  go_build tools/image "$work/pause/pause" ./pause
  go_build tests/conformance "$work/agnhost/agnhost" k8s.io/kubernetes/test/images/agnhost
  "$TOOL" --rootfs "$work/pause" --ref "mcsched.test/e2e/pause:$pause_tag" --platform "$(platform)" \
    --entrypoint /pause --user 65532:65532 --docker-archive "$OUT/e2e-pause.tar" >/dev/null
  say "mcsched.test/e2e/pause:$pause_tag: $OUT/e2e-pause.tar ($(size_of "$OUT/e2e-pause.tar"))"
  "$TOOL" --rootfs "$work/agnhost" --ref "mcsched.test/e2e/agnhost:$agnhost_tag" --platform "$(platform)" \
    --entrypoint /agnhost --docker-archive "$OUT/e2e-agnhost.tar" >/dev/null
  say "mcsched.test/e2e/agnhost:$agnhost_tag: $OUT/e2e-agnhost.tar ($(size_of "$OUT/e2e-agnhost.tar"))"
  # The suite's pods (e2epod.MakePod) run `/bin/sh -c ...` in busybox: Debian's static
  # build with its applets linked in /bin, as the upstream image has them.
  cp /bin/busybox "$work/busybox/bin/busybox"
  local applet
  for applet in $("$work/busybox/bin/busybox" --list); do
    [[ $applet == busybox ]] || ln -s busybox "$work/busybox/bin/$applet"
  done
  "$TOOL" --rootfs "$work/busybox" --ref "mcsched.test/e2e/busybox:$busybox_tag" --platform "$(platform)" \
    --cmd sh --docker-archive "$OUT/e2e-busybox.tar" >/dev/null
  say "mcsched.test/e2e/busybox:$busybox_tag: $OUT/e2e-busybox.tar ($(size_of "$OUT/e2e-busybox.tar"))"
}

case "${1:-}" in
  agent) agent ;;
  test) test_images ;;
  conformance) conformance_images ;;
  *) die "usage: scripts/image.sh agent|test|conformance" ;;
esac
