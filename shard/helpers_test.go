package shard_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/shard"
	"github.com/dbinformer/dbinformer/shard/shardtest"
)

// replica is one Sharder running in the test.
type replica struct {
	s      *shard.Sharder
	cancel context.CancelFunc
	done   chan error
}

func (r *replica) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	begin := time.Now()
	defer func() { t.Logf("replica %s stopped in %v", r.s.ID(), time.Since(begin)) }()
	if err := <-r.done; err != nil {
		t.Errorf("replica %s: Run returned %v, want nil", r.s.ID(), err)
	}
	r.cancel = nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p[:len(p)-1])); return len(p), nil }

// start runs a Sharder over b; stopped at the end of the test.
func start(t *testing.T, b shard.Backend, opts shard.Options) *replica {
	t.Helper()
	r := newReplica(t, b, opts)
	r.run(t)
	return r
}

// newReplica returns a Sharder over b, not running yet.
func newReplica(t *testing.T, b shard.Backend, opts shard.Options) *replica {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	s, err := shard.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &replica{s: s}
}

// run runs r until the test ends (or stop).
func (r *replica) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- r.s.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
}

// settled waits until the live replicas own their assigned shards
// (shardtest.Settled) and returns the owner of each shard.
func settled(t *testing.T, shards int, rs ...*replica) []string {
	t.Helper()
	var live []*shard.Sharder
	for _, r := range rs {
		live = append(live, r.s)
	}
	return shardtest.Settled(t, shards, live...)
}
