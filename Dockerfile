# syntax=docker/dockerfile:1
# The mcsched-agent image, published as ghcr.io/mcsched/mcsched-agent:v<version>
# (scripts/image-ref.sh prints it), for a machine with Docker or BuildKit:
#
#   docker build -t "$(scripts/image-ref.sh)" .
#   docker buildx build --platform linux/amd64,linux/arm64 -t "$(scripts/image-ref.sh)" --push .
#
# `make image` builds the same image with no container engine and no registry (the root
# filesystem from scripts/image-rootfs.sh, packed by tools/image): same files, user,
# working directory, environment, port and entrypoint.

# Builder: the whole workspace is copied (cargo needs every member's Cargo.toml), only the
# agent is built, with the versions pinned in Cargo.lock; then the image's root filesystem
# is laid out by the script `make image` uses.
# The v1.37 API's .proto files and Go types, which mcsched-wire's build script reads
# (the release tests/controlplane/go.mod pins); the builder has no Go.
FROM golang:1.26 AS k8s-modules
# mcsched-wire's release of the two modules (tests/release.rs checks they agree).
ARG K8S_API_VERSION=v0.37.2
RUN go mod download "k8s.io/api@${K8S_API_VERSION}" "k8s.io/apimachinery@${K8S_API_VERSION}" \
    && cp -r "$(go env GOMODCACHE)/k8s.io/api@${K8S_API_VERSION}" /k8s-api \
    && cp -r "$(go env GOMODCACHE)/k8s.io/apimachinery@${K8S_API_VERSION}" /k8s-apimachinery

FROM rust:1.95 AS builder
COPY --from=k8s-modules /k8s-api /k8s-api
COPY --from=k8s-modules /k8s-apimachinery /k8s-apimachinery
ENV MCSCHED_K8S_API_DIR=/k8s-api MCSCHED_K8S_APIMACHINERY_DIR=/k8s-apimachinery
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p mcsched-agent \
    && bash scripts/image-rootfs.sh target/release/mcsched-agent LICENSE /rootfs

# Runtime: the agent, glibc and libgcc only (rustls and ring, no OpenSSL), CA
# certificates, passwd/group with nonroot (65532); no shell, non-root.
FROM scratch
COPY --from=builder /rootfs/ /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
WORKDIR /home/nonroot
# The secure port: /healthz, /readyz, /metrics and the mcsched.io API (HTTPS).
EXPOSE 10259
ENTRYPOINT ["/mcsched-agent"]
