#!/bin/sh
# Abuse protection before and after: the ordinary decision (no lists, no
# penalty, no outcome counting) of the in-memory store and of the HTTP
# middleware, built from the commit before counting by outcome, lists,
# penalties and concurrency leases landed (BASE) and from the working tree,
# run alternately in one session; then the penalty and list checks
# themselves, from the working tree. Prints benchstat's comparison of the
# ordinary decision (base against head) and the head-only rows.
# Usage: bench/abuse/run.sh [ROUNDS] [BENCHTIME]   (from the repository root)
set -eu
BASE=${BASE:-72c80b8}
ROUNDS=${1:-10}
BT=${2:-300000x}
# benchstat, pinned: installed into a temporary directory, never a
# dependency of Sluice's modules.
BENCHSTAT=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
tmp=$(mktemp -d)
cleanup() { git worktree remove --force "$tmp/base" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
GOBIN="$tmp/bin" go install "$BENCHSTAT"
git worktree add --detach -q "$tmp/base" "$BASE"
for side in base head; do
  src=.
  [ $side = head ] || src="$tmp/base"
  (cd "$src" && go test -c -o "$tmp/$side-memstore.test" ./memstore &&
    go test -c -o "$tmp/$side-httplimit.test" ./httplimit)
done
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(date -u '+%F %H:%M') UTC; base $BASE, head $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with uncommitted changes)')"
echo "command: bench/abuse/run.sh $ROUNDS $BT"
ordinary='^BenchmarkAllow$/^(gcra|fixed_window)/(hot|random100k)$'
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS" >&2
  for side in base head; do
    "$tmp/$side-memstore.test" -test.run '^$' -test.bench "$ordinary" -test.benchtime "$BT" -test.benchmem -test.cpu 1 >>"$tmp/$side.txt"
    "$tmp/$side-httplimit.test" -test.run '^$' -test.bench '^BenchmarkMiddleware$' -test.benchtime "$BT" -test.benchmem -test.cpu 1 >>"$tmp/$side.txt"
  done
  "$tmp/head-memstore.test" -test.run '^$' -test.bench '^BenchmarkPenalty$' -test.benchtime "$BT" -test.benchmem -test.cpu 1 >>"$tmp/features.txt"
  "$tmp/head-httplimit.test" -test.run '^$' -test.bench '^BenchmarkLists$' -test.benchtime "$BT" -test.benchmem -test.cpu 1 >>"$tmp/features.txt"
done
echo "== the ordinary decision: $BASE (base) against the working tree (head)"
"$tmp/bin/benchstat" -ignore pkg base="$tmp/base.txt" head="$tmp/head.txt"
echo
echo "== penalty and list checks (working tree)"
"$tmp/bin/benchstat" "$tmp/features.txt"
