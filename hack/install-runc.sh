#!/usr/bin/env bash
# install-runc.sh makes sure runc, the OCI runtime the dev cluster's
# containerd nodes start containers with, is on the machine. It cannot be
# downloaded from its project here; Debian's package can, with apt-get, as
# root. Idempotent: prints the binary's path.
#
# Usage: hack/install-runc.sh           install if missing, print the path
#        hack/install-runc.sh --print   print the path only (empty when missing)
set -euo pipefail

find_runc() {
  for b in "${RUNC:-}" runc; do
    [ -n "$b" ] && command -v "$b" >/dev/null 2>&1 && { command -v "$b"; return 0; }
  done
  return 1
}

if path="$(find_runc)"; then
  echo "$path"
  exit 0
fi
if [ "${1:-}" = "--print" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "[install-runc] no runc found and not root: install Debian's runc package (apt-get install runc), or set RUNC to a runc binary" >&2
  exit 1
fi
echo "[install-runc] installing Debian's runc package (apt-get, once)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends runc >&2
find_runc
