#!/usr/bin/env bash
# test-sets.sh splits the module's packages for `make test`, so that each is
# tested exactly once: under the race detector when it is in RACE_PKGS,
# without it otherwise; and never from go test's cache (-count=1) when it is
# in NOCACHE_PKGS. Both lists come from the Makefile, as ./dir entries.
#
# Usage: hack/test-sets.sh check
#            fail when a listed package is not in `go list ./...` or is
#            listed twice; print how many packages each set has
#        hack/test-sets.sh list plain|race|all cached|nocache
#            print that set's packages, one a line (all: plain and race)
#        hack/test-sets.sh run plain|race|all cached|nocache -- COMMAND...
#            run COMMAND with the set's packages appended (nothing when empty)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mod="$(go list -m)"
mapfile -t all < <(go list -f '{{.ImportPath}}' ./... | sed "s|^$mod/|./|")
declare -A known=() race=() nocache=()
for p in "${all[@]}"; do known[$p]=1; done

bad=0
read_list() { # name, the array to fill, entries...
  local name=$1 arr=$2 p
  shift 2
  local -n set=$arr
  for p in "$@"; do
    p="./${p#./}"
    if [ -z "${known[$p]:-}" ]; then
      echo "test-sets: $name lists $p, which is not a package of the module (go list ./...): fix the Makefile" >&2
      bad=1
    elif [ -n "${set[$p]:-}" ]; then
      echo "test-sets: $name lists $p twice" >&2
      bad=1
    fi
    set[$p]=1
  done
}
# shellcheck disable=SC2086
read_list RACE_PKGS race ${RACE_PKGS:-}
# shellcheck disable=SC2086
read_list NOCACHE_PKGS nocache ${NOCACHE_PKGS:-}
[ "$bad" = 0 ] || exit 1

# in_set KIND CACHE PKG: is PKG in that set? Every package is in exactly one
# of plain/race and one of cached/nocache, so in exactly one of the four.
in_set() {
  local r=no c=no
  [ -n "${race[$3]:-}" ] && r=yes
  [ -n "${nocache[$3]:-}" ] && c=yes
  case "$1/$2" in
    plain/cached) [ $r = no ] && [ $c = no ] ;;
    plain/nocache) [ $r = no ] && [ $c = yes ] ;;
    race/cached) [ $r = yes ] && [ $c = no ] ;;
    race/nocache) [ $r = yes ] && [ $c = yes ] ;;
    all/cached) [ $c = no ] ;;
    all/nocache) [ $c = yes ] ;;
    *) echo "test-sets: no set '$1 $2' (plain|race|all cached|nocache)" >&2; exit 2 ;;
  esac
}
members() { local p; for p in "${all[@]}"; do if in_set "$1" "$2" "$p"; then echo "$p"; fi; done; }

case "${1:-}" in
  check)
    total=0
    for k in plain race; do
      for c in cached nocache; do
        n=$(members $k $c | wc -l)
        total=$((total + n))
        printf 'test-sets: %-5s %-7s %3d packages\n' $k $c "$n"
      done
    done
    if [ "$total" != "${#all[@]}" ]; then
      echo "test-sets: the sets hold $total packages, go list ./... has ${#all[@]}" >&2
      exit 1
    fi ;;
  list) members "$2" "$3" ;;
  run)
    kind=$2 cache=$3
    shift 3
    [ "${1:-}" = "--" ] && shift
    mapfile -t pkgs < <(members "$kind" "$cache")
    if [ ${#pkgs[@]} -eq 0 ]; then exit 0; fi
    echo "test-sets: $kind $cache, ${#pkgs[@]} packages: $*" >&2
    exec "$@" "${pkgs[@]}" ;;
  *) sed -n '2,13p' "$0" >&2; exit 2 ;;
esac
