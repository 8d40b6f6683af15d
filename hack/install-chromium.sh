#!/usr/bin/env bash
# install-chromium.sh makes sure a headless Chromium is on the machine for
# the browser tests (the trace UI's end-to-end test drives it through
# chromedp). Chromium cannot be downloaded from its project here; Debian's
# package can, with apt-get, as root. Idempotent: prints the binary's path.
#
# Usage: hack/install-chromium.sh           install if missing, print the path
#        hack/install-chromium.sh --print   print the path only (empty when missing)
set -euo pipefail

find_chromium() {
  for b in "${CHROMIUM:-}" chromium chromium-browser google-chrome; do
    [ -n "$b" ] && command -v "$b" >/dev/null 2>&1 && { command -v "$b"; return 0; }
  done
  return 1
}

if path="$(find_chromium)"; then
  echo "$path"
  exit 0
fi
if [ "${1:-}" = "--print" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "[install-chromium] no Chromium found and not root: install Debian's chromium package (apt-get install chromium), or set CHROMIUM to a Chromium binary" >&2
  exit 1
fi
echo "[install-chromium] installing Debian's chromium package (apt-get, once)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends chromium >&2
find_chromium
