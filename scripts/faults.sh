#!/usr/bin/env bash
# make faults: runs the fault tests and prints the matrix they measured — each row's
# outcomes are what the test saw, and the run fails if any test fails.
set -uo pipefail
cd "$(dirname "$0")/.."
RUN='TestHardening|TestUpstreamFaultMatrix|TestCAMFailsOpen|TestRedisOutage|TestReplayDiskFull|TestSinksDownLoseNothing|TestClientDisconnectCancelsUpstream|TestShutdownDrainsStreams|TestSIGTERMDrainsStreams|TestSIGKILLLeavesReadableBuffer|TestFleetOn'
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -count=1 -v -run "$RUN" ./app/ ./cmd/camproxy/ ./proxy/ ./admin/ ./internal/fleet/ >"$out" 2>&1
status=$?
printf '%-9s  %-42s  %-70s  %s\n' COMPONENT FAULT AGENT REPLAY
grep -o $'FAULT\t.*' "$out" | while IFS=$'\t' read -r _ comp fault agent rec; do
  printf '%-9s  %-42s  %-70s  %s\n' "$comp" "$fault" "$agent" "${rec:--}"
done
echo
grep -E '^(--- FAIL|FAIL|ok )' "$out"
if [ "$status" -ne 0 ]; then
  echo "make faults: a fault test failed; its output:" >&2
  grep -B2 -A20 -- '--- FAIL' "$out" >&2
fi
exit "$status"
