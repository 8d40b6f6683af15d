#!/usr/bin/env bash
# build-versitygw.sh builds the pinned Versity S3 Gateway, an S3-compatible
# object server over a plain directory (github.com/versity/versitygw), from
# its Go module — prebuilt binaries cannot be downloaded on our machines —
# into a cache outside the clone:
# ${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}/versitygw/<version>/versitygw.
# The trace server's S3 store is tested against it. Idempotent; safe to
# interrupt (the binary is built to a temporary name and renamed).
#
# Usage: hack/build-versitygw.sh           build if missing, print the binary's path
#        hack/build-versitygw.sh --print   print the path only (no build)
set -euo pipefail

VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
VERSITYGW_BUILD=1 # bump when the build flags change, so caches rebuild
CACHE="${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}"
OUT="$CACHE/versitygw/$VERSITYGW_VERSION-b$VERSITYGW_BUILD"

if [ "${1:-}" = "--print" ]; then
  echo "$OUT/versitygw"
  exit 0
fi
if [ -x "$OUT/versitygw" ]; then
  echo "$OUT/versitygw"
  exit 0
fi
echo "[build-versitygw] building the Versity S3 Gateway $VERSITYGW_VERSION into $OUT (a few minutes, once)" >&2
mkdir -p "$OUT"
tmp="$(mktemp -d "$OUT/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOFLAGS=-mod=mod
GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
mv "$tmp/versitygw" "$OUT/versitygw"
echo "[build-versitygw] $VERSITYGW_VERSION built" >&2
echo "$OUT/versitygw"
