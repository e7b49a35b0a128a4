#!/usr/bin/env bash
# Runs every fuzz target of the project for a fixed time each.
#   scripts/fuzz.sh 10s     (make test runs a short pass)
#   scripts/fuzz.sh 5m      (make fuzz)
# Go fuzzes one target of one package per invocation, so they run in turn.
# New crashers are written to the package's testdata/fuzz and fail the run.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-10s}
GO=${GO:-go}
targets=(
  "./core FuzzIndexer"
  "./core FuzzQueues"
  "./core/workqueue FuzzQueue"
)
for t in "${targets[@]}"; do
  set -- $t
  echo "fuzz $1 $2 for $time"
  "$GO" test -run '^$' -fuzz "^$2\$" -fuzztime "$time" "$1"
done
