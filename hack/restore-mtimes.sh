#!/usr/bin/env bash
# restore-mtimes.sh gives each tracked file of a clean checkout the time of
# the last commit that changed it as its modification time. go test's cache
# keys a file a test opens on its path, size and modification time; a fresh
# clone stamps every file with the moment of the clone, so without this no
# test that reads a file of the repository would ever come from the cache on
# CI, which runs on a fresh clone. .ci/run calls it; it does nothing when the
# work tree has changes (their times must stay what the editor made them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "restore-mtimes: the work tree has changes; file times left as they are" >&2
  exit 0
fi
# git log gives each commit's time, then the files it changed, newest first:
# the first time seen for a file is its last change. In a shallow clone the
# oldest commit seems to add every file, so they share its time, which is
# still the same in every clone of that commit.
git log --format='format:@%ct' --name-only --no-renames HEAD |
  awk '/^@[0-9]+$/ { ts = substr($0, 2); next }
       NF && !($0 in seen) { seen[$0] = 1; print ts "\t" $0 }' |
  while IFS=$'\t' read -r ts file; do
    if [ -e "$file" ]; then touch -h -d "@$ts" -- "$file"; fi
  done
