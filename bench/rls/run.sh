#!/bin/sh
# Rate-limit service benchmark: Sluice's Envoy RLS v3 service against
# envoyproxy/ratelimit itself, on one local Redis, with the same descriptor
# configuration (a fixed window per descriptor value, which both support),
# driven by the same gRPC load generator (bench/rls) at 1, 16 and 64
# concurrent callers, interleaved over ROUNDS rounds; plus Sluice's service
# on its in-memory store, which envoyproxy/ratelimit lacks. Reports
# decisions per second, p50 and p99 latency, and the CPU of each service
# process per decision. A no-op gRPC server of the same service (rlsload
# -serve) is measured beside them: the floor that the machine and the load
# generator leave any service; and a second one that sends every call the
# answer Sluice sends (rlsload -serve -answer-from), the floor of a service
# giving that answer; and a third that also counts every call in the same
# Redis with one pipelined INCRBY (rlsload -serve -answer-from -redis), the
# floor of a service that gives that answer and writes Redis once per
# decision. Sluice on Redis runs twice: in exact mode (the default, the
# same configuration as the peer's) and with the descriptor in lease mode
# (sync: lease, leasing keys from 10 decisions a second), which still
# never admits more than the limit. The CPU of redis-server per decision
# is reported for every row (0 for those that do not use it).
# Usage: bench/rls/run.sh [ROUNDS] [DURATION]   (from the repository root)
set -eu
# The peer, pinned: built with go install into a temporary directory, never
# a dependency of Sluice's modules.
PEER=github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36
for tool in redis-server go; do
  command -v $tool >/dev/null || { echo "run.sh: $tool not found (Debian: apt-get install redis-server)" >&2; exit 1; }
done
ROUNDS=${1:-3}
DUR=${2:-10s}
tmp=$(mktemp -d)
pids=""
cleanup() { [ -z "$pids" ] || kill $pids 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
GOBIN="$tmp/bin" go install "$PEER"
go build -o "$tmp/bin/sluice" ./cmd/sluice
(cd bench && go build -o "$tmp/bin/rlsload" ./rls)

mkdir -p "$tmp/runtime/ratelimit/config"
cat > "$tmp/runtime/ratelimit/config/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: client
    rate_limit:
      unit: minute
      requests_per_unit: 1000000
YAML
mkdir -p "$tmp/lease"
sed 's/requests_per_unit: 1000000/&\n      sync: lease/' "$tmp/runtime/ratelimit/config/bench.yaml" > "$tmp/lease/bench.yaml"
redis-server --port 18479 --bind 127.0.0.1 --save "" --appendonly no --daemonize no >/dev/null & pids="$pids $!"; pid_redis=$!
sleep 0.5
env RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
  USE_STATSD=false REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:18479 LOG_LEVEL=error \
  HOST=127.0.0.1 PORT=18480 GRPC_HOST=127.0.0.1 GRPC_PORT=18481 DEBUG_HOST=127.0.0.1 DEBUG_PORT=18482 \
  "$tmp/bin/service_cmd" >/dev/null 2>&1 & pids="$pids $!"; pid_peer=$!
"$tmp/bin/rlsload" -serve 127.0.0.1:18495 & pids="$pids $!"; pid_floor=$!
for mode in redis memory lease; do
  grpc=18491; admin=18492; store='store: { backend: redis, redis: { url: "redis://127.0.0.1:18479/0" } }'
  dir=$tmp/runtime/ratelimit/config
  if [ $mode = memory ]; then grpc=18493; admin=18494; store='store: { backend: memory }'; fi
  if [ $mode = lease ]; then
    grpc=18489; admin=18490; dir=$tmp/lease
    store='store: { backend: redis, redis: { url: "redis://127.0.0.1:18479/0", quota: { lease_rate: 10 } } }'
  fi
  cat > "$tmp/sluice-$mode.yaml" <<YAML
server: { admin: 127.0.0.1:$admin }
$store
service:
  grpc: 127.0.0.1:$grpc
  descriptors: $dir
YAML
  "$tmp/bin/sluice" serve --config "$tmp/sluice-$mode.yaml" 2>"$tmp/sluice-$mode.log" & pids="$pids $!"
  eval "pid_sluice_$mode=\$!"
done
sleep 2
# The second floor gives every call the answer Sluice (in memory) gave one:
# the least any service sending that answer must do.
"$tmp/bin/rlsload" -serve 127.0.0.1:18496 -answer-from 127.0.0.1:18493 & pids="$pids $!"; pid_floor_answer=$!
"$tmp/bin/rlsload" -serve 127.0.0.1:18497 -answer-from 127.0.0.1:18493 -redis 127.0.0.1:18479 & pids="$pids $!"; pid_floor_redis=$!
sleep 1
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(date -u '+%F %H:%M') UTC; commit $(git rev-parse --short HEAD)"
echo "command: bench/rls/run.sh $ROUNDS $DUR  (rlsload -c C -d $DUR -values 1000; peer $PEER)"
# cpu PID: the process's CPU time so far, in clock ticks.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for t in 18481 18491 18489 18493 18495 18496 18497; do "$tmp/bin/rlsload" -addr 127.0.0.1:$t -c 16 -d 2s >/dev/null; done # warm-up
for r in $(seq "$ROUNDS"); do
  for c in 1 16 64; do
    for t in envoy-ratelimit-redis:18481:$pid_peer sluice-redis:18491:$pid_sluice_redis sluice-redis-lease:18489:$pid_sluice_lease \
      sluice-memory:18493:$pid_sluice_memory floor-noop:18495:$pid_floor floor-answer:18496:$pid_floor_answer floor-redis:18497:$pid_floor_redis; do
      name=${t%%:*}; rest=${t#*:}; port=${rest%%:*}; pid=${rest#*:}
      c0=$(cpu "$pid"); r0=$(cpu "$pid_redis")
      out=$("$tmp/bin/rlsload" -addr 127.0.0.1:$port -c $c -d "$DUR" -warmup 0)
      c1=$(cpu "$pid"); r1=$(cpu "$pid_redis")
      n=$(echo "$out" | sed -n 's/.*calls=\([0-9]*\).*/\1/p')
      us=$(awk -v c="$((c1 - c0))" -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", c * 1e6 / hz / n}')
      rus=$(awk -v c="$((r1 - r0))" -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", c * 1e6 / hz / n}')
      echo "round $r c=$c $name $out cpu_us_per_decision=$us redis_cpu_us_per_decision=$rus"
    done
  done
done
