# syntax=docker/dockerfile:1
# The mcsched-agent image, published as ghcr.io/mcsched/mcsched-agent:v<version>:
#
#   docker build -t ghcr.io/mcsched/mcsched-agent:v0.1.0 .
#
# Not built or tested in this repository's CI machine, which has no container engine;
# `make test` runs the agent as a plain process instead.

# Builder: the whole workspace is copied (cargo needs every member's Cargo.toml), only the
# agent is built, with the versions pinned in Cargo.lock.
FROM rust:1.95 AS builder
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p mcsched-agent \
    && cp target/release/mcsched-agent /mcsched-agent

# Runtime: glibc and libgcc only (rustls and ring, no OpenSSL), no shell, non-root.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /mcsched-agent /mcsched-agent
COPY LICENSE /LICENSE
USER 65532:65532
# The secure port: /healthz, /readyz, /metrics and the explanations (HTTPS).
EXPOSE 10259
ENTRYPOINT ["/mcsched-agent"]
