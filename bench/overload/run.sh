#!/bin/sh
# Overload benchmark: no protection, a static concurrency limit and an
# adaptive one, at 1×, 2× and 5× an upstream's capacity and with the
# capacity halved halfway, ROUNDS rounds interleaved; see main.go and
# bench/notes/overload.md.
# Usage: bench/overload/run.sh [ROUNDS] [flags of main.go]   (from the repository root)
set -eu
command -v go >/dev/null || { echo "run.sh: go not found" >&2; exit 1; }
ROUNDS=${1:-3}
[ $# -gt 0 ] && shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/sluice" ./cmd/sluice
(cd bench && go build -o "$tmp/overload" ./overload)
echo "commit $(git rev-parse --short HEAD); command: bench/overload/run.sh $ROUNDS $*"
nice "$tmp/overload" -sluice "$tmp/sluice" -rounds "$ROUNDS" "$@"
