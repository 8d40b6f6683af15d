#!/usr/bin/env bash
# build-node.sh builds what a real node of the dev cluster runs besides the
# kubelet (hack/build-k8s.sh builds that one): containerd, its runc shim and
# ctr, the reference CNI plugins the node's pod network uses (bridge,
# host-local, loopback) and the pause binary the sandbox image is made of —
# all from their pinned Go modules and the kubernetes module's pause.c,
# because prebuilt binaries cannot be downloaded on our machines. runc itself
# is Debian's package (hack/install-runc.sh).
#
# The files land in a cache outside the clone,
#   ${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}/node/<containerd>-<cni>-b<build>/
#     containerd containerd-shim-runc-v2 ctr pause cni/{bridge,host-local,loopback}
# Idempotent (a finished file is never rebuilt) and safe to interrupt (each
# file is built to a temporary name and renamed).
#
# Usage: hack/build-node.sh           build what is missing, print the directory
#        hack/build-node.sh --print   print the directory only (no build)
set -euo pipefail

CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
CNI_PLUGINS_VERSION="${CNI_PLUGINS_VERSION:-v1.10.0}"
K8S_VERSION="${K8S_VERSION:-v1.37.2}" # pause.c comes from this kubernetes module
NODE_BUILD=1                          # bump when the build flags change, so caches rebuild
CACHE="${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}"
OUT="$CACHE/node/$CONTAINERD_VERSION-$CNI_PLUGINS_VERSION-b$NODE_BUILD"
SRC="$CACHE/node/src"

log() { printf '[build-node] %s\n' "$*" >&2; }

if [ "${1:-}" = "--print" ]; then
  echo "$OUT"
  exit 0
fi

want=(containerd containerd-shim-runc-v2 ctr pause cni/bridge cni/host-local cni/loopback)
missing=()
for f in "${want[@]}"; do
  [ -x "$OUT/$f" ] || missing+=("$f")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$OUT"
  exit 0
fi
log "building ${missing[*]} (containerd $CONTAINERD_VERSION, CNI plugins $CNI_PLUGINS_VERSION) into $OUT"
log "the first build takes about 5 minutes on 2 cores; later runs reuse the cache"
mkdir -p "$OUT/cni"

export GOFLAGS=-mod=mod GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
goversion="$(go env GOVERSION | sed 's/^go//; s/\([0-9]*\.[0-9]*\).*/\1/')"

# module DIR MODULE VERSION: enter a build module in $SRC/DIR that requires MODULE@VERSION.
module() {
  mkdir -p "$SRC/$1"
  cd "$SRC/$1"
  if ! grep -q "$2 $3\$" go.mod 2>/dev/null; then
    printf 'module clawfarm.dev/%s-build\n\ngo %s\n' "$1" "$goversion" >go.mod
    rm -f go.sum
    go get "$2@$3" >&2
  fi
}

# build OUTFILE TAGS LDFLAGS PACKAGE
build() {
  [ -x "$OUT/$1" ] && return
  log "go build $4"
  go build -trimpath -tags "$2" -ldflags "$3" -o "$OUT/.$(basename "$1").tmp" "$4"
  mv "$OUT/.$(basename "$1").tmp" "$OUT/$1"
}

build_containerd() {
  local m=github.com/containerd/containerd/v2
  module containerd "$m" "$CONTAINERD_VERSION"
  local ld="-s -w -X $m/version.Version=$CONTAINERD_VERSION -X $m/version.Revision=clawfarm-b$NODE_BUILD"
  # No snapshotters that need cgo or kernel features this machine lacks.
  local tags="no_btrfs no_devmapper no_zfs osusergo netgo"
  build containerd "$tags" "$ld" "$m/cmd/containerd"
  build ctr "$tags" "$ld" "$m/cmd/ctr"
  build containerd-shim-runc-v2 "$tags no_grpc" "$ld" "$m/cmd/containerd-shim-runc-v2"
}

build_cni() {
  local m=github.com/containernetworking/plugins
  module cni-plugins "$m" "$CNI_PLUGINS_VERSION"
  local ld="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION"
  build cni/bridge "" "$ld" "$m/plugins/main/bridge"
  build cni/loopback "" "$ld" "$m/plugins/main/loopback"
  build cni/host-local "" "$ld" "$m/plugins/ipam/host-local"
}

# The sandbox image's one binary, compiled static from the kubernetes
# module's own source (the dev cluster packs it into an image and pushes it
# to its registry, because registry.k8s.io cannot be reached).
build_pause() {
  [ -x "$OUT/pause" ] && return
  local dir
  dir="$(GOFLAGS= go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  [ -f "$dir/build/pause/linux/pause.c" ] || { log "no build/pause/linux/pause.c in k8s.io/kubernetes@$K8S_VERSION"; exit 1; }
  log "cc -static pause.c"
  gcc -Os -Wall -Werror -static -DVERSION="clawfarm-$K8S_VERSION" -o "$OUT/.pause.tmp" "$dir/build/pause/linux/pause.c"
  strip "$OUT/.pause.tmp"
  mv "$OUT/.pause.tmp" "$OUT/pause"
}

(build_containerd)
(build_cni)
(build_pause)

"$OUT/containerd" --version 2>/dev/null | sed 's/^/[build-node] /' >&2 || true
echo "$OUT"
