# Capstan's image: `make image` (docker or podman). Multi-stage: the Rust toolchain builds `capstan`,
# the runtime holds only what rendering runs (kubectl for `kubectl kustomize`, helm for `helm template`),
# CA certificates for HTTPS remotes, and runs as uid 65532. libgit2 is vendored: no git binary needed.
ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
RUN apt-get update && apt-get install -y --no-install-recommends pkg-config libssl-dev cmake make g++ \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
ARG CAPSTAN_REVISION=unknown
ENV CAPSTAN_REVISION=${CAPSTAN_REVISION}
RUN cargo build --release --locked --bin capstan && cp target/release/capstan /capstan

FROM debian:${DEBIAN_RELEASE}-slim AS tools
ARG KUBECTL_VERSION=v1.33.4
ARG HELM_VERSION=v3.18.6
ARG TARGETARCH=amd64
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
# Each download is checked against the checksum its publisher serves next to it.
RUN curl -fsSLo /kubectl "https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/${TARGETARCH}/kubectl" \
    && echo "$(curl -fsSL "https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/${TARGETARCH}/kubectl.sha256")  /kubectl" | sha256sum -c - \
    && chmod 0755 /kubectl
RUN curl -fsSLo /helm.tgz "https://get.helm.sh/helm-${HELM_VERSION}-linux-${TARGETARCH}.tar.gz" \
    && echo "$(curl -fsSL "https://get.helm.sh/helm-${HELM_VERSION}-linux-${TARGETARCH}.tar.gz.sha256sum" | cut -d' ' -f1)  /helm.tgz" | sha256sum -c - \
    && tar -xzf /helm.tgz -C / "linux-${TARGETARCH}/helm" && mv "/linux-${TARGETARCH}/helm" /helm

FROM debian:${DEBIAN_RELEASE}-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=tools /kubectl /usr/local/bin/kubectl
COPY --from=tools /helm /usr/local/bin/helm
COPY --from=build /capstan /usr/local/bin/capstan
# The chart mounts emptyDirs here (the Git cache and /tmp); the root filesystem stays read-only.
ENV HOME=/tmp CAPSTAN_CACHE_DIR=/var/cache/capstan
USER 65532:65532
EXPOSE 8080 9443
ENTRYPOINT ["/usr/local/bin/capstan"]
CMD ["run"]
