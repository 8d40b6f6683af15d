#!/usr/bin/env bash
# build-k8s.sh builds the pinned Kubernetes control plane (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl), the kubelet of the dev
# cluster's real nodes and etcd from their Go modules, because prebuilt
# binaries cannot be downloaded on our machines. The kubelet is built in the
# same module as the control plane, so it reuses most of its packages.
#
# The binaries land in a cache outside the clone,
#   ${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}/k8s/<k8s-version>/
# and bin/k8s in the clone points there, so a fresh clone on the same machine
# reuses them. It is idempotent (a finished binary is never rebuilt), safe to
# interrupt (each binary is linked to a temporary name and renamed), and stamps
# the real versions in so `kubectl version` and API discovery tell the truth.
#
# Usage: hack/build-k8s.sh            build what is missing, print the directory
#        hack/build-k8s.sh --print    print the directory only (no build)
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
CACHE="${CLAWFARM_CACHE:-$HOME/.cache/clawfarm}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$CACHE/k8s/$K8S_VERSION"
SRC="$CACHE/k8s/src-$K8S_VERSION"

log() { printf '[build-k8s] %s\n' "$*" >&2; }

link_bin() {
  mkdir -p "$ROOT/bin"
  if [ "$(readlink "$ROOT/bin/k8s" 2>/dev/null)" != "$CACHE/k8s" ]; then
    rm -rf "$ROOT/bin/k8s"
    ln -s "$CACHE/k8s" "$ROOT/bin/k8s"
  fi
}

if [ "${1:-}" = "--print" ]; then
  echo "$OUT"
  exit 0
fi

mkdir -p "$OUT"
link_bin

want=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet)
missing=()
for b in "${want[@]}"; do
  [ -x "$OUT/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$OUT"
  exit 0
fi
log "building ${missing[*]} (Kubernetes $K8S_VERSION, etcd $ETCD_VERSION) into $OUT"
log "the first build takes 10-20 minutes on 2 cores; later runs reuse the cache"

export GOFLAGS=-mod=mod GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

# --- Kubernetes -----------------------------------------------------------
build_k8s() {
  mkdir -p "$SRC/kubernetes"
  cd "$SRC/kubernetes"
  if [ ! -f go.sum ] || ! grep -q "k8s.io/kubernetes $K8S_VERSION" go.mod 2>/dev/null; then
    log "resolving k8s.io/kubernetes@$K8S_VERSION and its staging modules"
    local gomod
    gomod="$(cd "$SRC" && GOFLAGS= go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    [ -n "$gomod" ] || { log "cannot download k8s.io/kubernetes@$K8S_VERSION"; exit 1; }
    local staging="v0.${K8S_VERSION#v1.}"
    {
      echo "module clawfarm.dev/k8s-build"
      echo
      echo "go $(go env GOVERSION | sed 's/^go//; s/\([0-9]*\.[0-9]*\).*/\1/')"
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      # Every staging module k8s.io/kubernetes replaces with ./staging/... maps
      # to its published v0.x twin.
      grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" |
        awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
    } >go.mod.tmp
    mv go.mod.tmp go.mod
    rm -f go.sum
    for c in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
      go get "k8s.io/kubernetes/cmd/$c@$K8S_VERSION" >&2
    done
  fi
  # (A cache resolved before the kubelet was built here gains the kubelet's
  # modules through -mod=mod at its build.)
  local commit minor
  commit="$(GOFLAGS= go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"Hash": "\(.*\)".*/\1/p' | head -1)"
  minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
  local ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld="$ld -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
  done
  local cmds=() pkgs=()
  for c in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
    [ -x "$OUT/$c" ] && continue
    cmds+=("$c")
    pkgs+=("k8s.io/kubernetes/cmd/$c")
  done
  [ ${#cmds[@]} -eq 0 ] && return
  # One go build for all of them: while one binary links (on one core),
  # the other core compiles the next one's packages.
  log "go build ${cmds[*]} (this is the slow part)"
  local tmp="$OUT/.build.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  go build -trimpath -ldflags "$ld" -o "$tmp/" "${pkgs[@]}"
  for c in "${cmds[@]}"; do
    mv "$tmp/$c" "$OUT/$c"
    log "built $OUT/$c"
  done
  rmdir "$tmp"
}

# --- etcd -----------------------------------------------------------------
build_etcd() {
  [ -x "$OUT/etcd" ] && return
  mkdir -p "$SRC/etcd"
  cd "$SRC/etcd"
  if [ ! -f go.sum ] || ! grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION" go.mod 2>/dev/null; then
    log "resolving go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    printf 'module clawfarm.dev/etcd-build\n\ngo %s\n' "$(go env GOVERSION | sed 's/^go//; s/\([0-9]*\.[0-9]*\).*/\1/')" >go.mod
    rm -f go.sum
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
  fi
  local commit
  commit="$(GOFLAGS= go mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION" | sed -n 's/.*"Hash": "\(.*\)".*/\1/p' | head -1)"
  log "go build etcd"
  go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${commit:0:8}" \
    -o "$OUT/.etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$OUT/.etcd.tmp" "$OUT/etcd"
  log "built $OUT/etcd"
}

(build_etcd)
(build_k8s)

"$OUT/kubectl" version --client 2>/dev/null | sed 's/^/[build-k8s] /' >&2 || true
"$OUT/etcd" --version 2>/dev/null | head -1 | sed 's/^/[build-k8s] /' >&2 || true
echo "$OUT"
