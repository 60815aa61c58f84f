# camproxy: a static binary on distroless, non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/camproxy ./cmd/camproxy

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/camproxy /camproxy
USER nonroot:nonroot
EXPOSE 8080 9090
ENTRYPOINT ["/camproxy"]
CMD ["serve"]
