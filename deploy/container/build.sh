#!/usr/bin/env bash
# Builds the Sluice container image from the Containerfile at the
# repository's root: a static binary built by the Go toolchain, FROM
# scratch, so that no base image is pulled.
#
#   deploy/container/build.sh [IMAGE]
#
# IMAGE defaults to localhost/sluice:TAG, TAG being the binary's version
# ("+" spelled "-"). Environment:
#   GOARCH          the image's architecture (default: go env GOARCH)
#   CONTAINER_TOOL  podman or docker (default: podman where installed)
#   CA_BUNDLE       the CA certificates to copy in
#                   (default: /etc/ssl/certs/ca-certificates.crt)
# It prints the image's name on its last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

tool=${CONTAINER_TOOL:-}
if [ -z "$tool" ]; then
  if command -v podman >/dev/null 2>&1; then tool=podman
  elif command -v docker >/dev/null 2>&1; then tool=docker
  else echo "build.sh: neither podman nor docker is installed" >&2; exit 1
  fi
fi
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
if [ ! -s "$ca" ]; then
  echo "build.sh: no CA bundle at $ca (Debian's package ca-certificates, or set CA_BUNDLE)" >&2
  exit 1
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
goarch=${GOARCH:-$(go env GOARCH)}

# A static binary: no cgo, so no libc; -trimpath keeps the build machine's
# paths out; -s -w drop the symbol table and DWARF (stack traces keep their
# function names and lines). -buildvcs=auto is go build's default, spelled
# out over a GOFLAGS that turns it off, so the binary records its commit.
CGO_ENABLED=0 GOOS=linux GOARCH=$goarch \
  go build -trimpath -buildvcs=auto -ldflags='-s -w' -o "$ctx/sluice" ./cmd/sluice

# The labels come from the binary's own build information, so that they
# say what `sluice version` says.
info=$(go version -m "$ctx/sluice")
setting() { awk -v k="$1" '$1 == "build" && index($2, k "=") == 1 { print substr($2, length(k) + 2) }' <<<"$info"; }
version=$(awk '$1 == "mod" { print $3 }' <<<"$info")
revision=$(setting vcs.revision)
created=$(setting vcs.time)
if [ -z "$revision" ]; then
  # No version control information in the binary (a git worktree, for
  # one): the commit checked out still names the source.
  revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
fi

cp "$ca" "$ctx/ca-certificates.crt"
cp deploy/container/sluice.yaml LICENSE NOTICE "$ctx/"

# The license files of every module compiled in, and of Go itself (the
# standard library and runtime are in the binary too).
mkdir -p "$ctx/licenses/go"
cp "$(go env GOROOT)/LICENSE" "$(go env GOROOT)/PATENTS" "$ctx/licenses/go/"
while IFS=$'\t' read -r path dir; do
  [ -n "$path" ] || continue
  mkdir -p "$ctx/licenses/$path"
  found=$(find "$dir" -maxdepth 1 -type f \( -iname 'LICENSE*' -o -iname 'LICENCE*' -o -iname 'COPYING*' -o -iname 'NOTICE*' -o -iname 'PATENTS*' \))
  if [ -z "$found" ]; then
    echo "build.sh: $path has no license file in $dir" >&2
    exit 1
  fi
  while IFS= read -r f; do cp "$f" "$ctx/licenses/$path/"; done <<<"$found"
done < <(GOOS=linux GOARCH=$goarch go list -deps -f '{{with .Module}}{{if not .Main}}{{.Path}}{{"\t"}}{{.Dir}}{{end}}{{end}}' ./cmd/sluice | sort -u)
find "$ctx/licenses" -type f -exec chmod 0444 {} +

image=${1:-localhost/sluice:$(tr '+' '-' <<<"${version//[()]/}")}
args=(build --file Containerfile --tag "$image"
  --build-arg "VERSION=$version" --build-arg "REVISION=$revision")
if [ -n "${GOARCH:-}" ]; then
  args+=(--platform "linux/$goarch")
fi
if [ -n "$created" ]; then
  args+=(--label "org.opencontainers.image.created=$created")
fi
if [ "$tool" = podman ]; then
  # No intermediate images left behind; and, when the commit is known,
  # every timestamp in the image is the commit's, so that one commit
  # builds one image.
  args+=(--layers=false)
  [ -z "$created" ] || args+=(--timestamp "$(date -d "$created" +%s)")
fi
"$tool" "${args[@]}" "$ctx" >&2
echo "$image"
