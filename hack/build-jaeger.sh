#!/usr/bin/env bash
# build-jaeger.sh builds the pinned Jaeger v2 (github.com/jaegertracing/jaeger,
# the all-in-one built on the OpenTelemetry Collector) from its Go module —
# prebuilt binaries cannot be downloaded on our machines — into a cache
# outside the clone:
# ${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}/jaeger/<version>/jaeger.
# The loop's OpenTelemetry export is tested against it (docs/otel.md).
# Jaeger's go.mod carries replace directives, so `go install pkg@version`
# refuses it: the build goes through a throwaway module that requires it as
# a tool. Idempotent; safe to interrupt (the binary is built to a temporary
# name and renamed).
#
# Usage: hack/build-jaeger.sh           build if missing, print the binary's path
#        hack/build-jaeger.sh --print   print the path only (no build)
set -euo pipefail

JAEGER_VERSION="${JAEGER_VERSION:-v1.75.0}"
JAEGER_BUILD=1 # bump when the build flags change, so caches rebuild
CACHE="${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}"
OUT="$CACHE/jaeger/$JAEGER_VERSION-b$JAEGER_BUILD"

if [ "${1:-}" = "--print" ]; then
  echo "$OUT/jaeger"
  exit 0
fi
if [ -x "$OUT/jaeger" ]; then
  echo "$OUT/jaeger"
  exit 0
fi
echo "[build-jaeger] building Jaeger $JAEGER_VERSION into $OUT (5 to 15 minutes, once)" >&2
mkdir -p "$OUT"
tmp="$(mktemp -d "$OUT/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off
(
  cd "$tmp"
  go mod init clawfarm.local/build-jaeger >/dev/null 2>&1
  go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION"
  go build -trimpath -ldflags "-s -w" -o "$tmp/jaeger.bin" github.com/jaegertracing/jaeger/cmd/jaeger
)
mv "$tmp/jaeger.bin" "$OUT/jaeger"
echo "[build-jaeger] $JAEGER_VERSION built" >&2
echo "$OUT/jaeger"
