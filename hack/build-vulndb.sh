#!/usr/bin/env bash
# build-vulndb.sh makes the Go vulnerability database that govulncheck reads,
# offline: vuln.go.dev cannot be reached from our machines, but the Go module
# proxy can, and it serves golang.org/x/vulndb — the database's source, whose
# data/osv holds every entry. The pinned version's entries are indexed (the
# repository's own cmd/indexdb) into a cache outside the clone,
# ${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}/vulndb/<version>/db, in the layout
# `govulncheck -db file://…` reads. Pinning the version keeps CI's answer the
# same from one run to the next; bump VULNDB_VERSION to learn of newer
# vulnerabilities (`go list -m golang.org/x/vulndb@latest`). Idempotent; safe
# to interrupt (built under a temporary name, then renamed).
#
# Usage: hack/build-vulndb.sh           build if missing, print the database's directory
#        hack/build-vulndb.sh --print   print the directory only (no build)
set -euo pipefail

VULNDB_VERSION="${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}"
CACHE="${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}"
OUT="$CACHE/vulndb/$VULNDB_VERSION"

if [ "${1:-}" = "--print" ]; then
  echo "$OUT/db"
  exit 0
fi
if [ -f "$OUT/db/index/db.json" ]; then
  echo "$OUT/db"
  exit 0
fi
echo "[build-vulndb] indexing golang.org/x/vulndb@$VULNDB_VERSION into $OUT (a minute, once)" >&2
mkdir -p "$OUT"
tmp="$(mktemp -d "$OUT/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOFLAGS=-mod=mod
src="$(cd "$tmp" && go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[ -d "$src/data/osv" ] || { echo "[build-vulndb] golang.org/x/vulndb@$VULNDB_VERSION has no data/osv" >&2; exit 1; }
GOBIN="$tmp/bin" go install "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION"
"$tmp/bin/indexdb" -vulns "$src/data/osv" -out "$tmp/db"
rm -rf "$OUT/db"
mv "$tmp/db" "$OUT/db"
echo "[build-vulndb] $(ls "$OUT/db/ID" | grep -c '\.json$') entries" >&2
echo "$OUT/db"
