#!/usr/bin/env bash
# The agent image's root filesystem, the same for `make image` and the Dockerfile:
#
#   scripts/image-rootfs.sh BINARY LICENSE DIR
#
#   /mcsched-agent                         the release binary (the entrypoint)
#   /LICENSE
#   /lib/..., /lib64/...                   the shared libraries `ldd` lists for it (glibc,
#                                          libgcc_s, the loader), at the paths ldd names
#   /etc/ssl/certs/ca-certificates.crt     CA certificates (SSL_CERT_FILE points here)
#   /etc/passwd, /etc/group                root and nonroot (65532), as distroless has them
#   /home/nonroot, /tmp                    empty (the root filesystem is mounted read-only)
#
# Nothing else: no shell, no package manager. A statically linked binary gets no libraries.
set -euo pipefail

die() {
  echo "image-rootfs.sh: error: $*" >&2
  exit 1
}

[[ $# -eq 3 ]] || die "usage: scripts/image-rootfs.sh BINARY LICENSE DIR"
binary=$1
license=$2
root=$3
[[ -x "$binary" ]] || die "$binary is not an executable file"
[[ -f "$license" ]] || die "$license does not exist"
certs=/etc/ssl/certs/ca-certificates.crt
[[ -s "$certs" ]] || die "$certs is missing: install the ca-certificates package"
command -v ldd >/dev/null || die "ldd is not on PATH (it comes with libc-bin)"

rm -rf "$root"
mkdir -p "$root/etc/ssl/certs" "$root/home/nonroot" "$root/tmp"
chmod 0755 "$root" "$root/etc" "$root/etc/ssl" "$root/etc/ssl/certs" "$root/home" "$root/home/nonroot"
chmod 1777 "$root/tmp"

install -m 0755 "$binary" "$root/mcsched-agent"
install -m 0644 "$license" "$root/LICENSE"
install -m 0644 "$certs" "$root/etc/ssl/certs/ca-certificates.crt"
printf '%s\n' \
  'root:x:0:0:root:/root:/sbin/nologin' \
  'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$root/etc/passwd"
printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$root/etc/group"
chmod 0644 "$root/etc/passwd" "$root/etc/group"

# `ldd` prints "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and the loader as
# "/lib64/ld-linux-x86-64.so.2 (0x...)"; each file is copied (symbolic links resolved) to
# the path the binary will look it up at. linux-vdso has no file.
if ldd "$binary" >/dev/null 2>&1; then
  ldd "$binary" | awk '
    $2 == "=>" && $3 ~ /^\// { print $3; next }
    $1 ~ /^\// { print $1 }
  ' | sort -u | while read -r lib; do
    [[ -e "$lib" ]] || die "ldd names $lib, which does not exist"
    mkdir -p "$root$(dirname "$lib")"
    install -m 0755 "$(readlink -f "$lib")" "$root$lib"
  done
fi
find "$root" -type d -exec chmod go-w {} + 2>/dev/null || true
chmod 1777 "$root/tmp"
echo "image-rootfs.sh: $root: $(find "$root" -type f | wc -l) files, $(du -sk "$root" | cut -f1) KiB"
