# syntax=docker/dockerfile:1
# camproxy: one static binary (gateway, sidecar and sidecar injector) on distroless,
# non-root. `make docker` builds and checks it stays under 40 MB.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=""
ARG TARGETOS TARGETARCH
# The release's own build (scripts/release-build.sh, which `make test` runs too).
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    VERSION=${VERSION} COMMIT=${COMMIT} ARCHIVE=0 ./scripts/release-build.sh -o /out "$TARGETOS/$TARGETARCH" && \
    mv /out/camproxy_*_"$TARGETOS"_"$TARGETARCH"/camproxy /out/camproxy

# static-debian12: CA certificates, tzdata and /etc/passwd, no shell, no libc.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="camproxy" \
      org.opencontainers.image.description="LLM gateway that adds task-specific context from a Context Augmentation Model" \
      org.opencontainers.image.source="https://github.com/camproxy/camproxy" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/camproxy /camproxy
# `docker run … serve` without --config: the built-in defaults bind 127.0.0.1, which
# nothing outside the container reaches, so the image's config binds every interface
# and puts the admin API (all but /healthz, /readyz, /metrics) behind
# CAMPROXY_ADMIN_TOKEN: without it camproxy names the fix and does not start.
COPY <<'EOF' /etc/camproxy-image.yaml
server:
  listen: "0.0.0.0:8080"
  admin_listen: "0.0.0.0:9090"
admin:
  token: "${CAMPROXY_ADMIN_TOKEN:-}"
  loopback_only: ${CAMPROXY_ADMIN_LOOPBACK_ONLY:-false}
EOF
ENV CAMPROXY_CONFIG=/etc/camproxy-image.yaml
# Numeric (distroless's nonroot), so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# 8080 data plane; 9090 admin: GET /healthz (alive), /readyz (ready), /metrics — what
# Kubernetes probes (the image has no shell for a Docker HEALTHCHECK); 8443 `inject serve`.
EXPOSE 8080 9090 8443
ENTRYPOINT ["/camproxy"]
CMD ["serve"]
