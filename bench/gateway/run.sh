#!/bin/sh
# Gateway benchmark: wrk against the upstream alone, a plain
# httputil.ReverseProxy, and sluice serve with the quickstart rules on the
# memory store and on Redis, interleaved over ROUNDS rounds.
# Usage: bench/gateway/run.sh [ROUNDS] [DURATION]   (from the repository root)
set -eu
for tool in wrk redis-server go; do
  command -v $tool >/dev/null || { echo "run.sh: $tool not found (Debian: apt-get install wrk redis-server)" >&2; exit 1; }
done
ROUNDS=${1:-3}
DUR=${2:-10s}
tmp=$(mktemp -d)
pids=""
cleanup() { [ -z "$pids" ] || kill $pids 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
go build -o "$tmp/sluice" ./cmd/sluice
(cd bench && go build -o "$tmp/baseline" ./gateway)
"$tmp/baseline" -role upstream -listen 127.0.0.1:18081 & pids="$pids $!"; pid_upstream=$!
"$tmp/baseline" -role proxy -listen 127.0.0.1:18082 -upstream http://127.0.0.1:18081 2>/dev/null & pids="$pids $!"; pid_proxy=$!
redis-server --port 18379 --bind 127.0.0.1 --save "" --appendonly no --daemonize no >/dev/null & pids="$pids $!"
for mode in memory redis; do
  port=18083; admin=19083; store="backend: memory"
  if [ $mode = redis ]; then port=18084; admin=19084; store='backend: redis
  redis: { url: "redis://127.0.0.1:18379/0" }'; fi
  sed -e "s|listen: 127.0.0.1:8080.*|listen: 127.0.0.1:$port|" \
      -e "s|admin: 127.0.0.1:9090.*|admin: 127.0.0.1:$admin|" \
      -e "s|^upstream: .*|upstream: http://127.0.0.1:18081|" \
      -e "s|  backend: memory.*|  $(echo "$store" | head -1)|" \
      -e "s|trusted_proxies: \[\].*|trusted_proxies: [127.0.0.1/32]|" examples/quickstart.yaml > "$tmp/$mode.yaml"
  if [ $mode = redis ]; then sed -i "s|^  backend: redis|  backend: redis\n  redis: { url: \"redis://127.0.0.1:18379/0\" }|" "$tmp/$mode.yaml"; fi
  "$tmp/sluice" serve --config "$tmp/$mode.yaml" 2>"$tmp/$mode.log" & pids="$pids $!"
  eval "pid_sluice_$mode=\$!"
done
sleep 2
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(date -u +%F); commit $(git rev-parse --short HEAD)"
echo "command: bench/gateway/run.sh $ROUNDS $DUR  (wrk -t1 -c64 -d$DUR --latency -s bench/gateway/clients.lua)"
for port in 18081 18082 18083 18084; do
  wrk -t1 -c64 -d2s -s bench/gateway/clients.lua "http://127.0.0.1:$port/" >/dev/null # warm-up
done
# cpu PID: the process's CPU time so far, in clock ticks.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for r in $(seq "$ROUNDS"); do
  for t in upstream:18081:$pid_upstream proxy:18082:$pid_proxy sluice-memory:18083:$pid_sluice_memory sluice-redis:18084:$pid_sluice_redis; do
    name=${t%%:*}; rest=${t#*:}; port=${rest%%:*}; pid=${rest#*:}
    c0=$(cpu "$pid")
    out=$(wrk -t1 -c64 -d"$DUR" --latency -s bench/gateway/clients.lua "http://127.0.0.1:$port/")
    c1=$(cpu "$pid")
    n=$(echo "$out" | awk '/requests in/ {print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p50=$(echo "$out" | awk '$1=="50%" {print $2}')
    p99=$(echo "$out" | awk '$1=="99%" {print $2}')
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $5}')
    # CPU of the target process alone, per request, in µs.
    us=$(awk -v c="$((c1 - c0))" -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", c * 1e6 / hz / n}')
    echo "round $r $name rps=$rps p50=$p50 p99=$p99 non2xx=${non2xx:-0} cpu_us_per_req=$us"
  done
done
