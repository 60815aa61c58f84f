#!/usr/bin/env bash
# Shows that a release build is reproducible: builds the same tree twice with
# scripts/release-build.sh, from two copies at different paths and, unless told
# otherwise, with two empty Go build caches (as two machines would), then compares
# the archives, the SBOMs and SHA256SUMS byte for byte. Exit 1 on any difference.
#   scripts/reproduce.sh [-o DIR] [OS/ARCH ...]    linux/amd64 by default; -o keeps the first build's files in DIR
# REPRODUCE_CACHE=shared reuses this machine's build cache (seconds instead of a full
# compile; `make test` does this, deploy/release_test.go).
# The copies are of the tracked files as they are now (uncommitted edits included,
# untracked files not).
set -euo pipefail
cd "$(dirname "$0")/.."
keep=
if [ "${1:-}" = "-o" ]; then keep=$2; shift 2; fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(linux/amd64)
go=${GO:-go}
export VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
export COMMIT=${COMMIT:-$(git rev-parse HEAD)}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
snapshot=$(git stash create 2>/dev/null || true)  # a commit of the tracked files as they are, or nothing when clean
# One build after the other. On the shared cache the second is then links, an archive
# and an SBOM only: side by side, two builds on a cache that lacks a package (the
# SBOM tool's, on a fresh CI machine) both compiled it, and `make test` is CPU-bound.
# Two fresh caches are two full compiles, each of which already uses every core.
for m in one two/another-machine; do
  src=$work/$m/src
  mkdir -p "$src"
  git archive --format=tar "${snapshot:-HEAD}" | tar -x -C "$src"
  cache=$("$go" env GOCACHE)
  [ "${REPRODUCE_CACHE:-fresh}" = shared ] || cache=$work/$m/gocache
  echo "reproduce: building in $src (GOCACHE=$cache)"
  build() { (cd "$src" && GOCACHE=$cache GO=$go ./scripts/release-build.sh -o "$work/$m/dist" "${targets[@]}" >/dev/null); }
  build || { echo "reproduce: a build failed" >&2; exit 1; }
done
status=0
for f in "$work/one/dist"/SHA256SUMS "$work/one/dist"/*.tar.gz "$work/one/dist"/*.zip "$work/one/dist"/*.cdx.json; do
  [ -e "$f" ] || continue
  b=$(basename "$f")
  if cmp -s "$f" "$work/two/another-machine/dist/$b"; then
    echo "reproduce: same bytes  $(sha256sum "$f" | cut -c1-16)…  $b"
  else
    echo "reproduce: DIFFERENT   $b"; status=1
  fi
done
if [ -n "$keep" ]; then mkdir -p "$keep" && cp -R "$work/one/dist/." "$keep/"; fi
exit $status
