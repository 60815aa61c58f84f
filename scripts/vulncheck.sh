#!/usr/bin/env bash
# govulncheck (go.mod's tool, so offline from the module cache) against the
# vulnerability database built from the pinned golang.org/x/vulndb (scripts/vulndb.pin;
# internal/vulndb builds it once per version into bin/vulndb/VERSION), its JSON read by
# internal/vulngate, which decides what fails.
#   scripts/vulncheck.sh [-C DIR] [govulncheck flags and PATTERN ...]   DIR: another module (a fixture); PATTERN: ./... by default
# Exit 3 when a vulnerable function is reachable from the code; a vulnerable package
# imported or module required whose vulnerable code is never called is listed and does
# not fail. VULNCHECK_STDLIB=report lists reachable vulnerabilities of the Go standard
# library (fixed by a newer Go, not by go.mod) without failing; the default, fail, is
# what the release workflow runs on the newest Go patch release.
# VULNCHECK_TEXT=1 prints govulncheck's own text report instead (no gate).
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
dir=.
if [ "${1:-}" = "-C" ]; then dir=$2; shift 2; fi
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(./...)
db=$(GO=$go "$go" run ./internal/vulndb -pin scripts/vulndb.pin -cache bin/vulndb)
echo "vulncheck: $dir against the vulndb snapshot $(basename "$db"), $("$go" env GOVERSION)"
if [ "${VULNCHECK_TEXT:-}" = 1 ]; then
  exec "$go" tool govulncheck -db "file://$db" -C "$dir" -show traces,verbose "${args[@]}"
fi
gate=$(mktemp -d)
trap 'rm -rf "$gate"' EXIT
"$go" build -o "$gate/vulngate" ./internal/vulngate
"$go" tool govulncheck -db "file://$db" -C "$dir" -format json "${args[@]}" | "$gate/vulngate" -stdlib "${VULNCHECK_STDLIB:-fail}"
