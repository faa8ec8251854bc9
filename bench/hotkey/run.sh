#!/bin/sh
# Hot-key benchmark: one global rule (a key every request touches) in the
# gateway on Redis, in sync modes exact, lease and async, against the same
# gateway on the in-memory store and a plain httputil.ReverseProxy, with
# wrk, interleaved over ROUNDS rounds. Reports requests per second, latency,
# the gateway's CPU per request, and Redis script calls per decision.
#
# Then admission: two gateways per mode share one Redis and one global
# fixed window of LIMIT requests (a day's window, so that the run stays in
# one), and wrk drives both at once until well past the limit. Exact and
# lease must admit at most LIMIT (lease's shortfall is what leases held
# back), async at most its bound.
# Usage: bench/hotkey/run.sh [ROUNDS] [DURATION]   (from the repository root)
set -eu
for tool in redis-server redis-cli go curl; do
  command -v $tool >/dev/null || { echo "run.sh: $tool not found (Debian: apt-get install redis-server redis-tools curl)" >&2; exit 1; }
done
if ! command -v wrk >/dev/null; then
  echo "run.sh: installing wrk from the system's packages" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk >/dev/null
fi
ROUNDS=${1:-3}
DUR=${2:-10s}
LIMIT=${LIMIT:-20000}
tmp=$(mktemp -d)
pids=""
cleanup() { [ -z "$pids" ] || kill $pids 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
go build -o "$tmp/sluice" ./cmd/sluice
(cd bench && go build -o "$tmp/baseline" ./gateway)
RPORT=18479
redis-server --port $RPORT --bind 127.0.0.1 --save "" --appendonly no --daemonize no >/dev/null & pids="$pids $!"
"$tmp/baseline" -role upstream -listen 127.0.0.1:18181 & pids="$pids $!"
"$tmp/baseline" -role proxy -listen 127.0.0.1:18182 -upstream http://127.0.0.1:18181 2>/dev/null & pids="$pids $!"; pid_proxy=$!

# gateway NAME PORT BACKEND SYNC ALGORITHM LIMIT PERIOD: writes and starts
# a sluice serve, setting pid_NAME.
gateway() {
  store="store: { backend: memory }"
  [ "$3" = memory ] || store="store: { backend: redis, redis: { url: \"redis://127.0.0.1:$RPORT/0\", timeout: 1s } }"
  cat > "$tmp/$1.yaml" <<YAML
server: { listen: 127.0.0.1:$2, admin: 127.0.0.1:$(($2 + 1000)) }
upstream: http://127.0.0.1:18181
$store
rules:
  - name: fleet-${1%_*}
    match: { path: /* }
    key: [global]
    algorithm: $5
    limit: $6
    period: $7
    sync: $4
YAML
  "$tmp/sluice" serve --config "$tmp/$1.yaml" 2>"$tmp/$1.log" & pids="$pids $!"
  eval "pid_$1=\$!"
}
# Throughput: a limit no run reaches.
gateway memory 18183 memory exact gcra 1000000000 1s
gateway exact 18184 redis exact gcra 1000000000 1s
gateway lease 18185 redis lease gcra 1000000000 1s
gateway async 18186 redis async gcra 1000000000 1s
sleep 2

calls() { redis-cli -p $RPORT info commandstats | awk -F'[:=,]' '/^cmdstat_(evalsha|eval):/ {n += $3} END {print n + 0}'; }
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(date -u '+%F %H:%M') UTC; commit $(git rev-parse --short HEAD)"
echo "command: bench/hotkey/run.sh $ROUNDS $DUR  (wrk -t1 -c64 -d$DUR --latency; LIMIT=$LIMIT)"
for port in 18182 18183 18184 18185 18186; do
  wrk -t1 -c64 -d2s "http://127.0.0.1:$port/" >/dev/null # warm-up
done
for r in $(seq "$ROUNDS"); do
  for t in proxy:18182:$pid_proxy memory:18183:$pid_memory exact:18184:$pid_exact lease:18185:$pid_lease async:18186:$pid_async; do
    name=${t%%:*}; rest=${t#*:}; port=${rest%%:*}; pid=${rest#*:}
    c0=$(cpu "$pid"); k0=$(calls)
    out=$(wrk -t1 -c64 -d"$DUR" --latency "http://127.0.0.1:$port/")
    c1=$(cpu "$pid"); k1=$(calls)
    n=$(echo "$out" | awk '/requests in/ {print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p50=$(echo "$out" | awk '$1=="50%" {print $2}')
    p99=$(echo "$out" | awk '$1=="99%" {print $2}')
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $5}')
    us=$(awk -v c="$((c1 - c0))" -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", c * 1e6 / hz / n}')
    perdec=$(awk -v k="$((k1 - k0))" -v n="$n" 'BEGIN {printf "%.4f", k / n}')
    echo "round $r $name rps=$rps p50=$p50 p99=$p99 non2xx=${non2xx:-0} cpu_us_per_req=$us redis_calls_per_req=$perdec"
  done
done

# Admission: two gateways per mode, one fixed window of LIMIT for the day.
for mode in exact lease async; do
  port=$((18200 + $(echo "exact lease async" | tr ' ' '\n' | grep -n "^$mode$" | cut -d: -f1) * 10))
  gateway "${mode}_a" $port redis "$mode" fixed_window "$LIMIT" 24h
  gateway "${mode}_b" $((port + 1)) redis "$mode" fixed_window "$LIMIT" 24h
done
sleep 2
for mode in exact lease async; do
  port=$((18200 + $(echo "exact lease async" | tr ' ' '\n' | grep -n "^$mode$" | cut -d: -f1) * 10))
  wrk -t1 -c32 -d"$DUR" "http://127.0.0.1:$port/" >"$tmp/adm-a.txt" &
  wa=$!
  wrk -t1 -c32 -d"$DUR" "http://127.0.0.1:$((port + 1))/" >"$tmp/adm-b.txt"
  wait $wa
  total=0; refused=0
  for f in "$tmp/adm-a.txt" "$tmp/adm-b.txt"; do
    total=$((total + $(awk '/requests in/ {print $1}' "$f")))
    refused=$((refused + $(awk '/Non-2xx/ {print $5}' "$f" | grep . || echo 0)))
  done
  admitted=$((total - refused))
  echo "admission $mode: limit=$LIMIT requests=$total admitted=$admitted over=$((admitted - LIMIT))"
done
