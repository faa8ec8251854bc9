#!/bin/sh
# Gateway benchmark: wrk against the upstream alone, a plain
# httputil.ReverseProxy, and sluice serve with the quickstart rules on the
# memory store and on Redis, interleaved over ROUNDS rounds.
# Usage: bench/gateway/run.sh [ROUNDS] [DURATION]   (from the repository root)
set -eu
ROUNDS=${1:-3}
DUR=${2:-10s}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
go build -o "$tmp/sluice" ./cmd/sluice
(cd bench && go build -o "$tmp/baseline" ./gateway)
"$tmp/baseline" -role upstream -listen 127.0.0.1:18081 & 
"$tmp/baseline" -role proxy -listen 127.0.0.1:18082 -upstream http://127.0.0.1:18081 &
redis-server --port 18379 --bind 127.0.0.1 --save "" --appendonly no --daemonize no >/dev/null &
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
  "$tmp/sluice" serve --config "$tmp/$mode.yaml" 2>"$tmp/$mode.log" &
done
sleep 2
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(date -u +%F); commit $(git rev-parse --short HEAD)"
echo "command: bench/gateway/run.sh $ROUNDS $DUR  (wrk -t1 -c64 -d$DUR --latency -s bench/gateway/clients.lua)"
for t in upstream:18081 proxy:18082 sluice-memory:18083 sluice-redis:18084; do
  wrk -t1 -c64 -d2s -s bench/gateway/clients.lua "http://127.0.0.1:${t#*:}/" >/dev/null # warm-up
done
for r in $(seq "$ROUNDS"); do
  for t in upstream:18081 proxy:18082 sluice-memory:18083 sluice-redis:18084; do
    out=$(wrk -t1 -c64 -d"$DUR" --latency -s bench/gateway/clients.lua "http://127.0.0.1:${t#*:}/")
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p50=$(echo "$out" | awk '$1=="50%" {print $2}')
    p99=$(echo "$out" | awk '$1=="99%" {print $2}')
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $5}')
    echo "round $r ${t%%:*} rps=$rps p50=$p50 p99=$p99 non2xx=${non2xx:-0}"
  done
done
