package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/shard"
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

// settled waits until the live replicas own, between them, every shard
// exactly once, each exactly the shards Assign gives it over their IDs,
// and returns the owner of each shard.
func settled(t *testing.T, shards int, rs ...*replica) []string {
	t.Helper()
	var members []shard.Member
	for _, r := range rs {
		members = append(members, shard.Member{ID: r.s.ID()})
	}
	want, err := shard.Assign(shards, members)
	if err != nil {
		t.Fatal(err)
	}
	informertest.Eventually(t, fmt.Sprintf("%d replicas to own their assigned shards", len(rs)), func() bool {
		for _, r := range rs {
			got := slices.Sorted(maps.Keys(r.s.Owned()))
			if !slices.Equal(got, shard.Owned(want, r.s.ID())) {
				return false
			}
		}
		return true
	})
	return want
}

// handlerLog records every piece of work done for a key: which replica,
// under which term, from when to when. check finds two replicas working
// on one key at overlapping times.
type handlerLog struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	key, replica string
	term         uint64
	start, end   time.Time
}

func (l *handlerLog) add(c call) {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

func (l *handlerLog) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	byKey := map[string][]call{}
	for _, c := range l.calls {
		byKey[c.key] = append(byKey[c.key], c)
	}
	overlaps, shared := 0, 0
	for key, cs := range byKey {
		replicas := map[string]bool{}
		for _, c := range cs {
			replicas[c.replica] = true
		}
		if len(replicas) > 1 {
			shared++
		}
		slices.SortFunc(cs, func(a, b call) int { return a.start.Compare(b.start) })
		// Sweep: the latest end so far, and whose it was.
		var last call
		for i, c := range cs {
			if i > 0 && c.replica != last.replica && c.start.Before(last.end) {
				overlaps++
				if overlaps <= 5 {
					t.Errorf("key %q handled by %s (term %d) from %v to %v and by %s (term %d) from %v to %v",
						key, last.replica, last.term, last.start.Format(time.StampMicro), last.end.Format(time.StampMicro),
						c.replica, c.term, c.start.Format(time.StampMicro), c.end.Format(time.StampMicro))
				}
			}
			if i == 0 || c.end.After(last.end) {
				last = c
			}
		}
	}
	t.Logf("checker: %d handler calls on %d keys, %d keys handled by several replicas in turn, %d overlaps", len(l.calls), len(byKey), shared, overlaps)
	if shared == 0 {
		t.Fatal("checker: no key was handled by two replicas in turn: the test moved nothing")
	}
}
