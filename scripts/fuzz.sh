#!/usr/bin/env bash
# Runs every fuzz target of the project for a fixed time each.
#   scripts/fuzz.sh 10s     (make test runs a short pass)
#   scripts/fuzz.sh 5m      (make fuzz)
# Go fuzzes one target of one package per invocation, so they run in turn.
# New crashers are written to the package's testdata/fuzz and fail the run.
#
# -fuzzminimizetime: go test minimizes every new *interesting* input, not
# only crashers, for up to 60s each by default, and those executions are not
# counted: a 10s pass of FuzzIndexer made 10,017 execs in its first 3s and
# none after (both workers minimizing). 100 executions per minimization keep
# the workers fuzzing; a crasher is still minimized that much.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-10s}
minimize=${FUZZ_MINIMIZE:-100x}
GO=${GO:-go}
targets=(
  "./core FuzzIndexer"
  "./core FuzzQueues"
  "./core/workqueue FuzzQueue"
)
for t in "${targets[@]}"; do
  set -- $t
  echo "fuzz $1 $2 for $time"
  "$GO" test -run '^$' -fuzz "^$2\$" -fuzztime "$time" -fuzzminimizetime "$minimize" "$1"
done
