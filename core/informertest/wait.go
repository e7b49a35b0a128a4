package informertest

import (
	"context"
	"testing"
	"time"
)

// TB is the part of testing.TB this package uses: *testing.T, *testing.B
// and *testing.F satisfy it, and so does a harness that turns failures into
// reports of its own (the reliability suite counts them as divergences).
// Fatalf must not return: testing.T's stops the test's goroutine.
type TB interface {
	Helper()
	Name() string
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

var _ TB = testing.TB(nil)

// Timeout bounds every wait of this package: a deadline for a wedged test,
// never a performance target (no assertion here depends on how long
// anything takes). A test whose own deadline (go test -timeout) comes
// sooner gets a wait that ends a few seconds before it, so that the failure
// names what was awaited instead of dumping every goroutine.
const Timeout = time.Minute

// waitContext returns a context bounded by Timeout, or by t's deadline
// minus a margin when that comes first.
func waitContext(t TB) (context.Context, context.CancelFunc) {
	d := Timeout
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := dt.Deadline(); ok {
			if left := time.Until(deadline) - 5*time.Second; left < d {
				d = max(left, time.Second)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	return context.WithValue(ctx, budgetKey{}, d), cancel
}

type budgetKey struct{}

// budget is how long a wait of waitContext was allowed, for its message.
func budget(ctx context.Context) time.Duration {
	d, _ := ctx.Value(budgetKey{}).(time.Duration)
	return d.Round(time.Second)
}

// Eventually waits until cond returns true and fails the test (Fatalf)
// when it has not after Timeout, naming what was awaited. It polls cond,
// first every millisecond and then less often, so use it for a condition
// nothing signals; Recorder, Spy and Errors have waits that wake on the
// change itself. Call it from the test's goroutine.
func Eventually(t TB, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := waitContext(t)
	defer cancel()
	if !poll(ctx, cond) {
		t.Fatalf("informertest: gave up after %s waiting for %s", budget(ctx), what)
	}
}

// poll calls cond until it holds or ctx ends.
func poll(ctx context.Context, cond func() bool) bool {
	delay := time.Millisecond
	for {
		if cond() {
			return true
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return cond()
		case <-timer.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// notifier wakes waiters on every change without a goroutine per waiter:
// changed is closed and replaced under the owner's lock.
type notifier struct{ ch chan struct{} }

func (n *notifier) wait() <-chan struct{} {
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) notify() {
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}
