#!/usr/bin/env bash
# build-registry.sh builds the pinned CNCF Distribution registry (the code
# behind the registry:2 image) from its Go module, since prebuilt binaries
# cannot be downloaded on our machines, into a cache outside the clone:
# ${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}/registry/<version>/registry. The
# dev cluster serves the project's images from it. Idempotent; safe to
# interrupt (the binary is built to a temporary name and renamed).
#
# Usage: hack/build-registry.sh           build if missing, print the binary's path
#        hack/build-registry.sh --print   print the path only (no build)
set -euo pipefail

REGISTRY_VERSION="${REGISTRY_VERSION:-v3.1.2}"
REGISTRY_BUILD=1 # bump when the build flags change, so caches rebuild
CACHE="${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}"
OUT="$CACHE/registry/$REGISTRY_VERSION-b$REGISTRY_BUILD"

if [ "${1:-}" = "--print" ]; then
  echo "$OUT/registry"
  exit 0
fi
if [ -x "$OUT/registry" ]; then
  echo "$OUT/registry"
  exit 0
fi
echo "[build-registry] building the Distribution registry $REGISTRY_VERSION into $OUT (a minute or two, once)" >&2
mkdir -p "$OUT"
tmp="$(mktemp -d "$OUT/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOFLAGS=-mod=mod
GOBIN="$tmp" go install -trimpath \
  -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION" \
  "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION"
mv "$tmp/registry" "$OUT/registry"
echo "[build-registry] $("$OUT/registry" --version)" >&2
echo "$OUT/registry"
