#!/usr/bin/env bash
# ci-stages.sh is `make ci`: the checks CI runs, stage after stage, stopping
# at the first that fails, and then — failed or not — a table of how long
# each stage took. It exits non-zero when a stage failed.
#
# `make test` times its two halves itself (hack/stage.sh): "test", the
# packages outside RACE_PKGS, and "race", those under the race detector.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MAKE="${MAKE:-make}"

CI_STAGES="$(mktemp)"
export CI_STAGES
start=$(date +%s.%N)

# name|make targets; a stage with no name is timed by its own recipes.
stages=(
  "fmt/vet/static|verify-fmt vet staticcheck"
  "vulncheck|vulncheck"
  "generated|verify-generated"
  "chart|chart-check"
  "|test"
  "e2e|e2e"
)
# The rows of the table, in order; "test" and "race" come from make test.
rows=(fmt/vet/static vulncheck generated chart test race e2e)

table() {
  local rc=$? total
  total=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  echo
  echo "make ci: time per stage (seconds)"
  awk -v rows="${rows[*]}" -v total="$total" -v failed="${failed:-}" '
    { secs[$1] += $2; seen[$1] = 1; if ($3 != 0) bad[$1] = 1 }
    END {
      printf "  %-16s %8s  %s\n", "stage", "seconds", "result"
      n = split(rows, r, " ")
      for (i = 1; i <= n; i++) {
        s = r[i]
        if (!(s in seen)) { printf "  %-16s %8s  %s\n", s, "-", "not run"; continue }
        printf "  %-16s %8.1f  %s\n", s, secs[s], (s in bad) ? "FAILED" : "ok"
      }
      printf "  %-16s %8.1f  %s\n", "total", total, failed == "" ? "ok" : "FAILED in " failed
    }' "$CI_STAGES"
  rm -f "$CI_STAGES"
  exit $rc
}
trap table EXIT

failed=
for s in "${stages[@]}"; do
  name=${s%%|*} targets=${s#*|}
  # shellcheck disable=SC2086
  if [ -n "$name" ]; then
    hack/stage.sh "$name" -- "$MAKE" $targets
  else
    "$MAKE" $targets
  fi || { failed=${name:-$targets}; exit 1; }
done
