#!/usr/bin/env bash
# Installs and starts what the test suite talks to: a Redis on 127.0.0.1:6379 (left
# alone if one already answers) and the node clients under clients/node (npm ci).
set -euo pipefail
cd "$(dirname "$0")/.."

redis_up() { (exec 3<>/dev/tcp/127.0.0.1/6379 && printf 'PING\r\n' >&3 && head -c5 <&3 | grep -q PONG) 2>/dev/null; }

if ! redis_up; then
  if ! command -v redis-server >/dev/null 2>&1; then
    echo "test-deps: installing redis-server (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
  fi
  echo "test-deps: starting redis-server on 127.0.0.1:6379"
  mkdir -p /tmp/camproxy-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/camproxy-redis --logfile /tmp/camproxy-redis/redis.log
  for _ in $(seq 1 50); do redis_up && break; sleep 0.1; done
  redis_up || { echo "test-deps: redis did not start; see /tmp/camproxy-redis/redis.log" >&2; exit 1; }
fi

if ! command -v node >/dev/null 2>&1; then
  echo "test-deps: installing nodejs and npm (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
# npm ci only when the lockfile changed since the last install. clients/duckdb is
# DuckDB reading the partitioned Parquet export (replay.TestParquetPartitionedInDuckDB).
for client in clients/node clients/duckdb; do
  stamp=$client/node_modules/.camproxy-lock
  if [ ! -f "$stamp" ] || ! cmp -s $client/package-lock.json "$stamp"; then
    echo "test-deps: npm ci in $client"
    (cd $client && npm ci --no-audit --no-fund --loglevel=error)
    cp $client/package-lock.json "$stamp"
  fi
done

# bash-completion: the bash script `camproxy completion bash` prints builds on it, as
# on every distribution's interactive bash (cmd/camproxy.TestCompletionInBash).
if [ ! -f /usr/share/bash-completion/bash_completion ]; then
  echo "test-deps: installing bash-completion (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq bash-completion >/dev/null
fi

# tmux: the coding agents' interactive UIs run under it (app/side_calls_harness_test.go),
# and pgrep (procps) finds their processes to stop them.
if ! command -v tmux >/dev/null 2>&1 || ! command -v pgrep >/dev/null 2>&1; then
  echo "test-deps: installing tmux (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq tmux procps >/dev/null
fi

# Headless Chromium for the report's screenshot test and the dashboard test (app.TestDashboardInChromium),
# which make test requires with CAMPROXY_REQUIRE_CHROMIUM=1. Debian's package.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  echo "test-deps: installing chromium (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
