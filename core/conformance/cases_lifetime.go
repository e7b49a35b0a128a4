package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbinformer/dbinformer/core/driver"
)

// stopQuietly cancels the watch and waits for it without judging what it
// returns (it already ended on its own).
func (r *reader[T]) stopQuietly() {
	r.cancel()
	if _, ok := r.result(r.e.caps.timeout()); !ok {
		r.e.t.Fatalf("Watch(%d) did not return within %s after its context was cancelled", r.from, r.e.caps.timeout())
	}
	r.reportEmitFaults()
}

// cancelCase: cancelling the context given to Watch makes Watch return an
// error matching driver.ErrWatchStopped and the context's cause, whatever the
// watch was doing: waiting for a change, or blocked inside Emit (the
// consumer busy) when the context ended. Watch called with a context that
// is already done returns the same way. Afterwards no goroutine the watch
// started is left (Capabilities.StrictGoroutines), and Emit is never
// called again.
func cancelCase[T any](e *env[T]) {
	e.put("alpha", 1)

	// Idle: nothing pending.
	before := goroutines()
	r := e.watch(e.lastRV(), len(e.writes))
	e.put("bravo", 1)
	if !r.expectAll() { // the watch is running and caught up
		return
	}
	r.stop()
	e.checkGoroutines(before)
	r.reportEmitFaults() // an Emit from a goroutine that outlived Watch

	// Busy: blocked inside Emit when the context ends. Emit returns nil
	// once it sees the context done (the consumer took the batch as it was
	// told to stop), so nothing but the context says the watch must end.
	before = goroutines()
	entered := make(chan struct{})
	var once sync.Once
	r = e.watchWith(e.lastRV(), len(e.writes), func(ctx context.Context, batch []driver.Event[T]) error {
		once.Do(func() { close(entered) })
		<-ctx.Done()
		return nil
	})
	e.put("charlie", 1)
	timer := time.NewTimer(e.caps.timeout())
	select {
	case <-entered:
		timer.Stop()
	case <-timer.C:
		e.t.Fatalf("Watch(%d) did not emit the write %s within %s", r.from, e.writes[len(e.writes)-1], e.caps.timeout())
	}
	r.stop()
	e.checkGoroutines(before)
	r.reportEmitFaults()

	// Already done: a context cancelled, with a cause, before Watch.
	ctx, cancel := context.WithCancelCause(e.ctx)
	cancel(errCancelled)
	var emitted atomic.Bool // not e.t: a broken source may call Emit after the case ended
	err := e.lw.Watch(ctx, e.lastRV(), driver.WatchOptions[T]{Emit: func([]driver.Event[T]) error {
		emitted.Store(true)
		return nil
	}})
	e.checkStopped(fmt.Sprintf("Watch(%d) with a context already done", e.lastRV()), err, ctx)
	if emitted.Load() {
		e.t.Errorf("Watch(%d) called with a context already done emitted a batch", e.lastRV())
	}
}

var errCancelled = errors.New("conformance: cancelled on purpose")

// emitError: when Emit returns an error, Watch stops calling it and returns
// an error matching it.
func emitError[T any](e *env[T]) {
	e.put("alpha", 1)
	before := goroutines()
	boom := errors.New("conformance: the consumer refused the batch")
	r := e.watchWith(e.lastRV(), len(e.writes), func(context.Context, []driver.Event[T]) error { return boom })
	e.put("bravo", 1)
	e.put("charlie", 1)
	err, ok := r.result(e.caps.timeout())
	switch {
	case !ok:
		e.t.Errorf("Watch(%d) did not return within %s after Emit returned an error", r.from, e.caps.timeout())
		r.stopQuietly()
		return
	case err == nil:
		e.t.Errorf("Watch(%d) returned nil after Emit returned an error; want Emit's error", r.from)
	case !errors.Is(err, boom):
		e.t.Errorf("Watch(%d) returned %q after Emit returned %q; want an error matching Emit's", r.from, err, boom)
	}
	r.mu.Lock()
	emits := r.emits
	r.mu.Unlock()
	if emits != 1 {
		e.t.Errorf("Watch(%d) called Emit %d times; want it to stop at the first, which failed", r.from, emits)
	}
	e.checkGoroutines(before)
	r.reportEmitFaults()
}

// dropped: when the watched set is gone for good (Dropper: a dropped table,
// a deleted bucket or resource type), an open watch ends with an error
// matching driver.ErrPermanent, after emitting whatever it received before.
func dropped[T any](e *env[T]) {
	d, ok := e.h.(Dropper)
	if !ok {
		e.t.Logf("the Harness does not implement conformance.Dropper; permanent failures not checked")
		return
	}
	e.put("alpha", 1)
	r := e.watchAfter(0)
	e.put("bravo", 1)
	if !r.expectAll() {
		return
	}
	ctx, cancel := e.opCtx()
	defer cancel()
	if err := d.Drop(ctx); err != nil {
		e.t.Fatalf("Harness.Drop: %v", err)
	}
	err, ok := r.result(e.caps.timeout())
	switch {
	case !ok:
		e.t.Errorf("Watch(%d) did not return within %s after the watched set was dropped; want an error matching core.ErrPermanent", r.from, e.caps.timeout())
	case !errors.Is(err, driver.ErrPermanent):
		e.t.Errorf("Watch(%d) returned %v after the watched set was dropped; want an error matching core.ErrPermanent (core.Permanent)", r.from, err)
	}
	// Whatever it emitted before (the deletes some sources send first)
	// must still follow the ordering rules.
	for {
		r.mu.Lock()
		n := len(r.queued)
		r.mu.Unlock()
		if n == 0 {
			break
		}
		if err := r.fill(e.ctx); err != nil {
			break
		}
	}
	r.stopQuietly()
}

// checkGoroutines waits until no goroutine started since before is left,
// when the source promises it (Capabilities.StrictGoroutines). Goroutines
// are told apart by ID, which the runtime never reuses, so goroutines of
// earlier cases that end meanwhile cannot hide a new one.
func (e *env[T]) checkGoroutines(before map[string]string) {
	e.t.Helper()
	if !e.caps.StrictGoroutines {
		return
	}
	deadline := time.Now().Add(e.caps.timeout())
	for {
		var extra []string
		for id, stack := range goroutines() {
			if _, ok := before[id]; !ok && !e.ignoredGoroutine(stack) {
				extra = append(extra, stack)
			}
		}
		if len(extra) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Errorf("%d goroutines started during the watch remain after it ended (Capabilities.StrictGoroutines):\n%s",
				len(extra), strings.Join(extra, "\n\n"))
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env[T]) ignoredGoroutine(stack string) bool {
	for _, s := range e.caps.IgnoreGoroutines {
		if s != "" && strings.Contains(stack, s) {
			return true
		}
	}
	return false
}

// goroutines returns the stack of every goroutine by its ID.
func goroutines() map[string]string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	m := make(map[string]string)
	for _, g := range strings.Split(string(buf), "\n\n") {
		// Each stack starts "goroutine 123 [state]:".
		f := strings.Fields(g)
		if len(f) >= 2 && f[0] == "goroutine" {
			m[f[1]] = g
		}
	}
	return m
}
