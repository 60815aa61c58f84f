#!/usr/bin/env bash
# The release's binaries: camproxy cross-compiled (static, trimmed, version-stamped)
# for every target, each in camproxy_VERSION_OS_ARCH.tar.gz (.zip for Windows) with its
# CycloneDX SBOM beside it (camproxy_VERSION_OS_ARCH.cdx.json, from the binary's own
# module list) and SHA256SUMS over both. The release workflow publishes, signs and
# attests what this writes, `make test` runs it (so a target that stops compiling fails
# before a tag does, and two runs are compared byte for byte), and the Dockerfile
# builds the image's binary with it. Needs Go only: no Docker, no network beyond the
# module cache.
#
# Reproducible: the same commit gives the same bytes on any machine with the same Go:
# -trimpath, no VCS stamp, an empty build ID, archives written by internal/relarchive
# (sorted, owner 0, every mtime SOURCE_DATE_EPOCH: the commit's time unless set), an
# SBOM without serial number or timestamp. scripts/reproduce.sh shows it.
#   scripts/release-build.sh [-o DIR] [OS/ARCH ...]     VERSION, COMMIT, SOURCE_DATE_EPOCH from the environment
set -euo pipefail
cd "$(dirname "$0")/.."

out=dist
if [ "${1:-}" = "-o" ]; then out=$2; shift 2; fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64)
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}
go=${GO:-go}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out/SHA256SUMS"
if [ "${ARCHIVE:-1}" = 1 ]; then
  # The tools, built once per run from go.mod's pinned versions (-trimpath: the SBOM
  # records the generator's hash, which must not depend on where it was built).
  tools=$(mktemp -d)
  trap 'rm -rf "$tools"' EXIT
  # Without cgo, as camproxy is built: the standard library compiled for it serves them.
  CGO_ENABLED=0 "$go" build -trimpath -o "$tools/" github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod ./internal/relarchive
fi
for t in "${targets[@]}"; do
  os=${t%/*} arch=${t#*/}
  name=camproxy_${version#v}_${os}_${arch}
  exe=camproxy; [ "$os" = windows ] && exe=camproxy.exe
  rm -rf "${out:?}/$name"
  mkdir -p "$out/$name"
  echo "release-build: $name"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$go" build -trimpath -buildvcs=false \
    -ldflags "-s -w -buildid= -X main.version=$version -X main.commit=$commit" -o "$out/$name/$exe" ./cmd/camproxy
  cp LICENSE* README.md "$out/$name/" 2>/dev/null || true
  if [ "${ARCHIVE:-1}" = 1 ]; then
    archive=$name.tar.gz; [ "$os" = windows ] && archive=$name.zip
    "$tools/relarchive" -mtime "$epoch" -o "$out/$archive" -C "$out" "$name"
    # bin mode: the modules the binary was linked from (its build info, what
    # `go version -m` prints), with the Go standard library as a component.
    "$tools/cyclonedx-gomod" bin -json -std -noserial -notimestamp -version "$version" \
      -output "$out/$name.cdx.json" "$out/$name/$exe"
    (cd "$out" && sha256sum "$archive" "$name.cdx.json" >>SHA256SUMS)
  fi
done
