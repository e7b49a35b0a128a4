package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dbinformer/dbinformer/core"
)

// Waiter is what read-your-writes needs of an informer: every
// *core.SharedIndexInformer[T] is one, whatever T.
type Waiter interface {
	Name() string
	WaitFor(ctx context.Context, rv core.ResourceVersion) error
}

// pendingWrite is a version the cache of w must reach before the next read.
type pendingWrite struct {
	w  Waiter
	rv core.ResourceVersion
}

// writes is one worker's record of the writes of the reconcile it runs,
// reached through the reconcile's context. It is reused from one
// reconcile to the next, so that recording nothing costs nothing.
type writes struct {
	// any is set when pending may be non-empty, so that a reconcile that
	// recorded nothing ends without taking mu.
	any     atomic.Bool
	mu      sync.Mutex
	pending []pendingWrite
}

type writesKey struct{}

// writeLog keeps, between two reconciles of a key, the writes the first
// made that no read has waited for yet: the next reconcile of the key
// waits for them before its first read.
type writeLog[K comparable] struct {
	n  atomic.Int64 // keys in m: most reconciles find none and skip the lock
	mu sync.Mutex
	m  map[K][]pendingWrite
}

func (l *writeLog[K]) init() { l.m = map[K][]pendingWrite{} }

// begin hands the key's carried-over writes to the worker's record.
func (l *writeLog[K]) begin(ws *writes, key K) {
	if l.n.Load() == 0 {
		return
	}
	l.mu.Lock()
	if p, ok := l.m[key]; ok {
		delete(l.m, key)
		l.n.Add(-1)
		ws.pending = append(ws.pending, p...)
		ws.any.Store(true)
	}
	l.mu.Unlock()
}

// end keeps what the reconcile wrote and did not wait for.
func (l *writeLog[K]) end(ws *writes, key K) {
	if !ws.any.Load() {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.any.Store(false)
	if len(ws.pending) == 0 {
		return
	}
	l.mu.Lock()
	if _, ok := l.m[key]; !ok {
		l.n.Add(1)
	}
	l.m[key] = append([]pendingWrite(nil), ws.pending...)
	l.mu.Unlock()
	ws.pending = ws.pending[:0]
}

// Wrote records, inside a reconcile, that it wrote to the source of w and
// the source returned version rv (an etcd revision, a Postgres commit LSN,
// a resourceVersion). The reconcile's next read through Get or after
// CatchUp sees that write — and so does the next reconcile of the same
// key, even if this one returns without reading again: no reconcile acts
// on the state from before its own key's write (controller-runtime's
// stale-cache problem). Outside a reconcile Wrote does nothing.
func Wrote(ctx context.Context, w Waiter, rv core.ResourceVersion) {
	ws, ok := ctx.Value(writesKey{}).(*writes)
	if !ok {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.any.Store(true)
	for i := range ws.pending {
		if ws.pending[i].w == w {
			ws.pending[i].rv = max(ws.pending[i].rv, rv)
			return
		}
	}
	ws.pending = append(ws.pending, pendingWrite{w: w, rv: rv})
}

// CatchUp waits until every informer written through (Wrote) has applied
// the writes this reconcile and the key's earlier reconciles recorded. An
// error names the informer and says why its cache is behind; the writes
// stay recorded, so a retry waits again.
func CatchUp(ctx context.Context) error {
	ws, ok := ctx.Value(writesKey{}).(*writes)
	if !ok {
		return nil
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for len(ws.pending) > 0 {
		p := ws.pending[len(ws.pending)-1]
		if err := p.w.WaitFor(ctx, p.rv); err != nil {
			return fmt.Errorf("controller: read-your-writes: informer %q has not applied version %d yet: %w", p.w.Name(), p.rv, err)
		}
		ws.pending = ws.pending[:len(ws.pending)-1]
	}
	return nil
}

// Get reads key from inf's cache after CatchUp: what the reconcile, or an
// earlier reconcile of its key, wrote is in what it reads.
func Get[T any](ctx context.Context, inf *core.SharedIndexInformer[T], key string) (T, bool, error) {
	if err := CatchUp(ctx); err != nil {
		var zero T
		return zero, false, err
	}
	obj, ok := inf.Lister().Get(key)
	return obj, ok, nil
}
