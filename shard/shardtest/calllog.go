package shardtest

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// CallLog records every piece of work done for a key: which replica, under
// which shard term, from when to when (one clock: the replicas run in one
// process). Check finds two replicas working on one key at overlapping
// times, which exclusive ownership forbids.
type CallLog struct {
	mu    sync.Mutex
	calls []Call
}

// Call is one piece of work on a key.
type Call struct {
	Key, Replica string
	Term         uint64
	Start, End   time.Time
}

// Add records c.
func (l *CallLog) Add(c Call) {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

// Check fails t for each key two replicas worked on at overlapping times
// (the first five are described), logs the counts and returns them: calls,
// keys worked on by several replicas in turn (a test that meant to move
// shards and moved none can tell), and overlaps.
func (l *CallLog) Check(t testing.TB) (calls, shared, overlaps int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	byKey := map[string][]Call{}
	for _, c := range l.calls {
		byKey[c.Key] = append(byKey[c.Key], c)
	}
	for key, cs := range byKey {
		replicas := map[string]bool{}
		for _, c := range cs {
			replicas[c.Replica] = true
		}
		if len(replicas) > 1 {
			shared++
		}
		slices.SortFunc(cs, func(a, b Call) int { return a.Start.Compare(b.Start) })
		// Sweep: the latest end so far, and whose it was.
		var last Call
		for i, c := range cs {
			if i > 0 && c.Replica != last.Replica && c.Start.Before(last.End) {
				overlaps++
				if overlaps <= 5 {
					t.Errorf("key %q handled by %s (term %d) from %v to %v and by %s (term %d) from %v to %v",
						key, last.Replica, last.Term, last.Start.Format(time.StampMicro), last.End.Format(time.StampMicro),
						c.Replica, c.Term, c.Start.Format(time.StampMicro), c.End.Format(time.StampMicro))
				}
			}
			if i == 0 || c.End.After(last.End) {
				last = c
			}
		}
	}
	t.Logf("checker: %d handler calls on %d keys, %d keys handled by several replicas in turn, %d overlaps", len(l.calls), len(byKey), shared, overlaps)
	return len(l.calls), shared, overlaps
}
