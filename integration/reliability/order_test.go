package reliability_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// swapOnce wraps a ListerWatcher whose first watch hands over its first
// two batches in reverse order, as a broken adapter might.
type swapOnce[T any] struct {
	core.ListerWatcher[T]
	mu      sync.Mutex
	swapped bool
}

func (s *swapOnce[T]) Watch(ctx context.Context, from core.ResourceVersion) (core.Watcher[T], error) {
	w, err := s.ListerWatcher.Watch(ctx, from)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.swapped {
		return w, nil
	}
	s.swapped = true
	return &swapWatcher[T]{Watcher: w}, nil
}

type swapWatcher[T any] struct {
	core.Watcher[T]
	held [][]core.Event[T]
}

func (w *swapWatcher[T]) Next(ctx context.Context) ([]core.Event[T], error) {
	for w.held == nil {
		// The first two changes, whether they came in one batch or two,
		// are handed over second first.
		var got []core.Event[T]
		for len(got) < 2 {
			b, err := w.Watcher.Next(ctx)
			if err != nil {
				return nil, err
			}
			for _, ev := range b {
				if ev.Type != core.Bookmark {
					got = append(got, ev)
				}
			}
		}
		w.held = [][]core.Event[T]{got[1:], got[:1]}
	}
	if len(w.held) == 0 {
		return w.Watcher.Next(ctx)
	}
	b := w.held[0]
	w.held = w.held[1:]
	return b, nil
}

// An adapter that delivers two changes out of version order: the informer
// detects it (*core.OrderError naming key and versions) and does not apply
// the late one on top of the newer state; and the change that arrived late
// is not lost either: the cache comes to equal etcd.
func TestOutOfOrderWatchIsDetectedAndRepaired(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	ctx := testCtx(t)
	lw, err := etcdinformer.NewPrefix(ctx, c, "/order", etcdinformer.Options[string]{
		Codec: core.CodecFuncs[string]{DecodeFunc: func(b []byte) (string, error) { return string(b), nil }}})
	if err != nil {
		t.Fatal(err)
	}
	e := &errs{}
	inf := core.NewSharedIndexInformer[string](&swapOnce[string]{ListerWatcher: lw}, core.InformerOptions[string]{
		Name: "order", ErrorHandler: e.add, Backoff: core.Backoff{Initial: 10 * time.Millisecond},
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = inf.Run(runCtx) }()
	defer func() { stop(); <-done }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	var head core.ResourceVersion
	for _, kv := range [][2]string{{"a", "a1"}, {"b", "b1"}} {
		r, err := c.Put(ctx, "/order/"+kv[0], kv[1])
		if err != nil {
			t.Fatal(err)
		}
		head = core.ResourceVersion(r.Header.Revision)
	}
	if err := inf.WaitFor(ctx, head); err != nil {
		t.Fatal(err)
	}
	// b is applied before a arrives late: the report may follow WaitFor.
	var oe *core.OrderError
	found := func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, err := range e.list {
			if errors.As(err, &oe) {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(time.Minute)
	for !found() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if oe == nil || oe.Key != "a" || oe.RV >= oe.After {
		t.Fatalf("out-of-order delivery not reported as an OrderError for key a (got %v)", oe)
	}
	if _, ok := inf.Lister().Get("b"); !ok {
		t.Error(`"b", which arrived in order, is missing from the cache`)
	}
	// The late change must not be lost. WaitFor(head) may return between
	// the two batches (nothing can know of a change that has not arrived
	// yet), so this waits for the repair: the reflector relists on an
	// OrderError, since resuming the watch from the applied version would
	// skip the late change for good.
	deadline = time.Now().Add(time.Minute)
	for {
		_, okA := inf.Lister().Get("a")
		_, okB := inf.Lister().Get("b")
		if okA && okB {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the out-of-order delivery the cache never held both keys (a: %v, b: %v): the late change was lost", okA, okB)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
