#!/usr/bin/env bash
# build-helm.sh builds the pinned helm CLI from its Go module (prebuilt
# binaries cannot be downloaded on our machines) into a cache outside the
# clone, ${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}/helm/<version>/helm, so a
# fresh clone on the same machine reuses it. Idempotent; safe to interrupt
# (the binary is built to a temporary name and renamed).
#
# Usage: hack/build-helm.sh           build if missing, print the binary's path
#        hack/build-helm.sh --print   print the path only (no build)
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
HELM_BUILD=2 # bump when the build flags change, so caches rebuild
CACHE="${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}"
OUT="$CACHE/helm/$HELM_VERSION-b$HELM_BUILD"

if [ "${1:-}" = "--print" ]; then
  echo "$OUT/helm"
  exit 0
fi
if [ -x "$OUT/helm" ]; then
  echo "$OUT/helm"
  exit 0
fi
echo "[build-helm] building helm $HELM_VERSION from helm.sh/helm/v3 into $OUT (a few minutes, once)" >&2
mkdir -p "$OUT"
tmp="$(mktemp -d "$OUT/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOFLAGS=-mod=mod
# Stamp the version, and the Kubernetes version the client libraries speak
# (as helm's own Makefile does), so `helm template` renders for 1.37, not 1.20.
K8S_MINOR="${K8S_MINOR:-37}"
GOBIN="$tmp" go install \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$K8S_MINOR \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$K8S_MINOR" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
mv "$tmp/helm" "$OUT/helm"
echo "[build-helm] $("$OUT/helm" version --short)" >&2
echo "$OUT/helm"
