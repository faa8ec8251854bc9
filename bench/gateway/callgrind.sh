#!/bin/sh
# Instructions per request of the gateway's roles, counted by callgrind:
# deterministic whatever else loads the machine, so that a change of the
# proxy path can be measured before and after on a busy machine.
#
# Usage: bench/gateway/callgrind.sh N GW...   (from the repository root)
#
# GW are builds of bench/gateway's command (cd bench && go build -o FILE
# ./gateway), say of two commits. For each and each role (the plain proxy,
# and sluice serve with the quickstart's rules on the memory store), it
# runs the role under callgrind in front of a native upstream, sends 2,000
# requests to warm it, zeroes the counters, sends N more (clients.lua's mix
# over 8 connections, every answer checked to be 200) and prints the
# instructions counted per request, with the callgrind output kept for
# callgrind_annotate.
set -eu
N=$1; shift
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind not found (Debian: apt-get install valgrind)" >&2; exit 1; }
out=${OUT:-/tmp/sluice-callgrind}
mkdir -p "$out"
tmp=$(mktemp -d)
pids=""
cleanup() { [ -z "$pids" ] || kill $pids 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
UP=127.0.0.1:18181
sed -e "s|listen: 127.0.0.1:8080.*|listen: 127.0.0.1:18183|" \
    -e "s|admin: 127.0.0.1:9090.*|admin: 127.0.0.1:19183|" \
    -e "s|^upstream: .*|upstream: http://$UP|" \
    -e "s|trusted_proxies: \[\].*|trusted_proxies: [127.0.0.1/32]|" examples/quickstart.yaml > "$tmp/sluice.yaml"
first=$1
"$first" -role upstream -listen $UP & pids="$pids $!"
wait_port() { for _ in $(seq 600); do "$first" -role load -target "$1" -n 1 -c 1 2>/dev/null && return 0; sleep 0.2; done; return 1; }
i=0
for gw in "$@"; do
  i=$((i + 1))
  for role in proxy sluice; do
    case $role in
      proxy) addr=127.0.0.1:18182; args="-role proxy -listen $addr -upstream http://$UP" ;;
      sluice) addr=127.0.0.1:18183; args="-role sluice -config $tmp/sluice.yaml" ;;
    esac
    file="$out/callgrind.$i.$role"
    rm -f "$file" "$file".*
    # Go's asynchronous preemption signals trip callgrind's signal handling.
    GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$file" --dump-instr=no "$gw" $args 2>"$tmp/vg.log" & vg=$!
    wait_port $addr
    "$first" -role load -target $addr -n 2000 -c 8
    callgrind_control -z $vg >/dev/null 2>&1
    "$first" -role load -target $addr -n "$N" -c 8
    callgrind_control -d $vg >/dev/null 2>&1
    kill -KILL $vg; wait $vg 2>/dev/null || true
    ir=$(awk '/^summary:/ {print $2}' "$file.1") # the dump after zeroing
    echo "$i $gw $role: $(awk -v ir="$ir" -v n="$N" 'BEGIN {printf "%.0f", ir / n}') instructions/request ($ir over $N; $file.1)"
  done
done
