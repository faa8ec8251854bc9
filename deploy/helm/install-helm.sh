#!/usr/bin/env bash
# Installs helm, pinned, for the chart's tests, and prints its path.
#
# helm is built from source with the Go toolchain (go install), as its own
# release builds are, so that nothing but the Go module proxy is needed; the
# binary is kept outside the repository, under
# ${SLUICE_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-tools}, and reused
# by later runs. helm is never a dependency of Sluice's Go modules. The
# first build takes about three minutes on two cores (downloads included);
# later runs print the path at once.
set -euo pipefail

version=v3.22.0
# The Kubernetes version that helm template assumes without --kube-version:
# that of the k8s.io modules helm $version is built with, as its Makefile sets.
k8s_major=1
k8s_minor=37

tools="${SLUICE_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-tools}"
dir="$tools/helm-$version"
bin="$dir/helm"
if [ ! -x "$bin" ]; then
  mkdir -p "$dir"
  echo "install-helm: building helm $version into $dir (once)" >&2
  ldflags="-w -s -X helm.sh/helm/v3/internal/version.version=$version"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags="$ldflags -X $pkg.k8sVersionMajor=$k8s_major -X $pkg.k8sVersionMinor=$k8s_minor"
  done
  # In a temporary directory: go install pkg@version ignores any go.mod,
  # and the build writes into GOBIN only once it has succeeded.
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-trimpath \
    go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$version")
  mv "$tmp/helm" "$bin"
fi
echo "$bin"
