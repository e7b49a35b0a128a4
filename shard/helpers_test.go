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

// changedSignals checks that a join, a release and a graceful leave of
// one session wake another's Changed at once. first names the signal a
// new session gives once it watches (for whatever it missed before).
// Without the backend's signal nothing ever comes: each wait is a
// liveness guard, not a timing.
func changedSignals(t *testing.T, b shard.Backend, first string) {
	t.Helper()
	ctx := context.Background()
	join := func(id string) shard.Session {
		s, err := b.Join(ctx, shard.Member{ID: id, Weight: 1}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	watcher := join("watcher")
	defer func() { _ = watcher.Close(ctx) }()
	signalled := func(what string) {
		t.Helper()
		select {
		case <-watcher.Changed():
		case <-time.After(time.Minute):
			t.Fatalf("%s: no signal on Changed", what)
		}
	}
	signalled(first)
	a := join("a")
	signalled("a joined")
	term, ok, err := a.Acquire(ctx, 3)
	if err != nil || !ok {
		t.Fatalf("acquire shard 3: %v, %v", ok, err)
	}
	if err := a.Release(ctx, 3, term); err != nil {
		t.Fatal(err)
	}
	signalled("a released shard 3")
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	signalled("a left")
}
