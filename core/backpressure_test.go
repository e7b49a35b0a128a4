package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/dbinformer/dbinformer/core/driver"
)

// playLW lists nothing and plays n changes of distinct keys in batches of
// batch, then waits for its context. It records, before each Emit, how many
// deltas the queue held, and the error Emit returned last.
type playLW struct {
	n, batch int
	qlen     func() int
	mu       sync.Mutex
	maxLen   int
	emitted  int
	emitErr  error
}

func (p *playLW) List(context.Context, driver.ListSink[string]) (ResourceVersion, error) {
	return 0, nil
}

func (p *playLW) Watch(ctx context.Context, from ResourceVersion, opts driver.WatchOptions[string]) error {
	for i := int(from); i < p.n; i += p.batch {
		evs := make([]driver.Event[string], 0, p.batch)
		for j := i; j < min(i+p.batch, p.n); j++ {
			evs = append(evs, driver.Event[string]{Type: driver.Added, Key: fmt.Sprint("k", j), Object: "v", HasObject: true, RV: ResourceVersion(j + 1)})
		}
		p.mu.Lock()
		p.maxLen = max(p.maxLen, p.qlen())
		p.mu.Unlock()
		err := opts.Emit(evs)
		p.mu.Lock()
		p.emitErr = err
		if err == nil {
			p.emitted += len(evs)
		}
		p.mu.Unlock()
		if err != nil {
			return err
		}
	}
	<-ctx.Done()
	return driver.Stopped(ctx)
}

// Nobody pops: the watch fills the queue up to the window and then waits in
// Emit, so a source faster than its consumer does not pile its changes up
// in memory; cancelling ends the wait, and nothing more is queued.
func TestWatchWaitsForRoom(t *testing.T) {
	bothQueues(t, func(t *testing.T, known *Indexer[string], q Queue[string]) {
		lw := &playLW{n: 3 * addWindow, batch: 64, qlen: q.Len}
		r := NewReflector[string](lw, q, InformerOptions[string]{ErrorHandler: func(error) {}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		eventually(t, "a full window", func() bool { return q.Len() >= addWindow })
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
		if q.Len() != addWindow {
			t.Fatalf("the queue holds %d deltas, want the window, %d (the watch must wait for room)", q.Len(), addWindow)
		}
		lw.mu.Lock()
		defer lw.mu.Unlock()
		if lw.emitted != addWindow || !errors.Is(lw.emitErr, context.Canceled) {
			t.Fatalf("the watch emitted %d changes, last Emit error %v; want %d and context.Canceled", lw.emitted, lw.emitErr, addWindow)
		}
	})
}

// A handler slower than the source: the queue stays within the window (a
// batch is queued only while fewer than addWindow deltas are pending) while
// the watch waits, and every change still arrives, in order.
func TestSlowHandlerHoldsTheWatchBack(t *testing.T) {
	bothModes(t, func(t *testing.T, deltaFIFO bool) {
		lw := &playLW{n: 3*addWindow + 17, batch: 100}
		inf := NewSharedIndexInformer[string](lw, InformerOptions[string]{DeltaFIFO: deltaFIFO, ErrorHandler: func(err error) { t.Error(err) }})
		lw.qlen = inf.queue.Len
		gate := make(chan struct{})
		got := make(chan string, lw.n)
		_, err := inf.AddEventHandlerWithOptions(ResourceEventHandlerFuncs[string]{AddFunc: func(key, _ string, _ bool) {
			<-gate
			got <- key
		}}, HandlerOptions{MaxPending: 1})
		must(t, err)
		started(t, inf)
		eventually(t, "a full window", func() bool { return inf.queue.Len() >= addWindow })
		close(gate)
		for i := range lw.n {
			if k := <-got; k != fmt.Sprint("k", i) {
				t.Fatalf("change %d: got key %s, want k%d", i, k, i)
			}
		}
		lw.mu.Lock()
		defer lw.mu.Unlock()
		if lw.maxLen >= addWindow+lw.batch {
			t.Fatalf("the queue held %d deltas, more than the window %d and one batch of %d", lw.maxLen, addWindow, lw.batch)
		}
	})
}
