#!/usr/bin/env bash
# stage.sh NAME -- COMMAND... runs COMMAND and, when CI_STAGES names a file
# (hack/ci-stages.sh sets it), appends "NAME SECONDS EXIT-CODE" to it, so
# `make ci` can print how long each stage took. It exits as COMMAND did.
set -uo pipefail
name=$1
shift
[ "${1:-}" = "--" ] && shift
start=$(date +%s.%N)
"$@"
rc=$?
if [ -n "${CI_STAGES:-}" ]; then
  awk -v n="$name" -v s="$start" -v e="$(date +%s.%N)" -v rc=$rc 'BEGIN { printf "%s %.1f %d\n", n, e - s, rc }' >>"$CI_STAGES"
fi
exit $rc
