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
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/camproxy ./cmd/camproxy

# static-debian12: CA certificates, tzdata and /etc/passwd, no shell, no libc.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="camproxy" \
      org.opencontainers.image.description="LLM gateway that adds task-specific context from a Context Augmentation Model" \
      org.opencontainers.image.source="https://github.com/camproxy/camproxy" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/camproxy /camproxy
# Numeric (distroless's nonroot), so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# 8080 data plane; 9090 admin: GET /healthz (alive), /readyz (ready), /metrics — what
# Kubernetes probes (the image has no shell for a Docker HEALTHCHECK); 8443 `inject serve`.
EXPOSE 8080 9090 8443
ENTRYPOINT ["/camproxy"]
CMD ["serve"]
