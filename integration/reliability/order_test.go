package reliability_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
)

// swapOnce wraps a ListerWatcher whose first watch hands over its first
// two changes in reverse order, in two batches, as a broken adapter might.
type swapOnce[T any] struct {
	driver.ListerWatcher[T]
	mu      sync.Mutex
	swapped bool
}

func (s *swapOnce[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	s.mu.Lock()
	first := !s.swapped
	s.swapped = true
	s.mu.Unlock()
	if !first {
		return s.ListerWatcher.Watch(ctx, from, opts)
	}
	var held []driver.Event[T]
	done := false
	emit := opts.Emit
	opts.Emit = func(b []driver.Event[T]) error {
		if done {
			return emit(b)
		}
		for _, ev := range b {
			if ev.Type != driver.Bookmark {
				held = append(held, ev)
			}
		}
		if len(held) < 2 {
			return nil
		}
		// The first two changes, whether they came in one batch or two,
		// are handed over second first.
		done = true
		if err := emit(held[1:2]); err != nil {
			return err
		}
		if err := emit(held[:1]); err != nil {
			return err
		}
		if len(held) > 2 {
			return emit(held[2:])
		}
		return nil
	}
	return s.ListerWatcher.Watch(ctx, from, opts)
}

// A source that delivers two changes out of version order: the informer
// detects it (*core.OrderError naming key and versions) and does not apply
// the late one on top of the newer state; and the change that arrived late
// is not lost either: the cache comes to equal the source.
func TestOutOfOrderWatchIsDetectedAndRepaired(t *testing.T) {
	src := memory.New[string](memory.Options{})
	inf, errs := informertest.Run[string](t, &swapOnce[string]{ListerWatcher: src}, core.InformerOptions[string]{
		Backoff: core.Backoff{Initial: 10 * time.Millisecond},
	})
	src.Put("a", "a1")
	head := src.Put("b", "b1")
	informertest.WaitFor(t, inf, head)
	// b is applied before a arrives late: the report may follow WaitFor.
	oe := informertest.As[*core.OrderError](t, errs)
	if oe.Key != "a" || oe.RV >= oe.After {
		t.Fatalf("out-of-order delivery reported as %v, want an OrderError for key a", oe)
	}
	if _, ok := inf.Lister().Get("b"); !ok {
		t.Error(`"b", which arrived in order, is missing from the cache`)
	}
	// The late change must not be lost. WaitFor(head) may return between
	// the two batches (nothing can know of a change that has not arrived
	// yet), so this waits for the repair: the reflector relists on an
	// OrderError, since resuming the watch from the applied version would
	// skip the late change for good.
	informertest.Eventually(t, "the late change repaired (a and b cached)", func() bool {
		_, okA := inf.Lister().Get("a")
		_, okB := inf.Lister().Get("b")
		return okA && okB
	})
	if err := errs.Find(func(err error) bool { return errors.Is(err, driver.ErrPermanent) }); err != nil {
		t.Errorf("an out-of-order delivery was reported as permanent: %v", err)
	}
}
