package bench_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// The benchmarks start informers, queues, watchers and servers on both
// sides; whatever they leave running would distort the rows that follow,
// so a run (the smoke run included) fails if anything is left.
func TestMain(m *testing.M) {
	if spec := os.Getenv(relayReplicaEnv); spec != "" {
		// This test binary, re-executed as a relay replica that
		// BenchmarkRelayFailover can kill -9 or SIGSTOP
		// (relayfailover_test.go).
		os.Exit(runRelayReplica(spec))
	}
	if spec := os.Getenv(shardMemberEnv); spec != "" {
		// A shard member that BenchmarkShardChurn can kill -9 or
		// SIGSTOP (shardchurn_test.go).
		os.Exit(runShardMember(spec))
	}
	if spec := os.Getenv(shardHeapEnv); spec != "" {
		// One downstream of BenchmarkShardRelayHeap, its heap its own
		// (shardrelay_test.go).
		os.Exit(runChild("downstream", spec, shardHeapChild))
	}
	if spec := os.Getenv(warmMemEnv); spec != "" {
		// One side of BenchmarkWarmRestartMemory, whose RSS is its
		// own (warmmemory_test.go).
		os.Exit(runWarmMemSide(spec))
	}
	if spec := os.Getenv(partialNATSEnv); spec != "" {
		// One side of BenchmarkPartialSync's NATS half, whose heap is
		// its own (filter_test.go).
		os.Exit(runChild("partial sync", spec, partialNATSChild))
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left after the benchmarks: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
