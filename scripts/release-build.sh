#!/usr/bin/env bash
# The release's binaries: camproxy cross-compiled (static, trimmed, version-stamped)
# for every target, each in camproxy_VERSION_OS_ARCH.tar.gz (.zip for Windows) with
# SHA256SUMS beside them. The release workflow publishes what this writes, `make test`
# runs it (so a target that stops compiling fails before a tag does), and the
# Dockerfile builds the image's binary with it. Needs Go only: no Docker, no network
# beyond the module cache.
#   scripts/release-build.sh [-o DIR] [OS/ARCH ...]     VERSION, COMMIT from the environment
set -euo pipefail
cd "$(dirname "$0")/.."

out=dist
if [ "${1:-}" = "-o" ]; then out=$2; shift 2; fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64)
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}
go=${GO:-go}

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out/SHA256SUMS"
for t in "${targets[@]}"; do
  os=${t%/*} arch=${t#*/}
  name=camproxy_${version#v}_${os}_${arch}
  exe=camproxy; [ "$os" = windows ] && exe=camproxy.exe
  rm -rf "${out:?}/$name"
  mkdir -p "$out/$name"
  echo "release-build: $name"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$go" build -trimpath -buildvcs=false \
    -ldflags "-s -w -X main.version=$version -X main.commit=$commit" -o "$out/$name/$exe" ./cmd/camproxy
  cp LICENSE* README.md "$out/$name/" 2>/dev/null || true
  if [ "${ARCHIVE:-1}" = 1 ]; then
    if [ "$os" = windows ]; then
      (cd "$out" && rm -f "$name.zip" && python3 -c 'import shutil,sys; shutil.make_archive(sys.argv[1], "zip", ".", sys.argv[1])' "$name")
      archive=$name.zip
    else
      tar -C "$out" -czf "$out/$name.tar.gz" "$name"
      archive=$name.tar.gz
    fi
    (cd "$out" && sha256sum "$archive" >>SHA256SUMS)
  fi
done
