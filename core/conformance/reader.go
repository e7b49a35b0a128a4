package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// reader is one running watch: its Emit queues copies of the batches, and
// the case reads them one event at a time, checking, batch by batch, the
// ordering rules of the contract.
type reader[T any] struct {
	e        *env[T]
	from     core.ResourceVersion
	ctx      context.Context // the watch's
	cancel   context.CancelFunc
	hook     func(ctx context.Context, batch []driver.Event[T]) error
	progress chan struct{}
	notify   chan struct{} // a batch was queued or Watch returned
	done     chan struct{} // closed once Watch returned

	inEmit atomic.Int32 // Emit calls running now

	mu       sync.Mutex
	queued   [][]driver.Event[T] // emitted, not yet read by the case
	emits    int                 // Emit calls
	err      error               // what Watch returned
	returned bool
	faults   []string // contract violations seen inside Emit
	reported int      // faults already reported

	// Read by the case's goroutine only.
	floor   core.ResourceVersion // a change must be above it: last RV of earlier batches, or a bookmark
	buf     []driver.Event[T]
	next    int // index in e.writes of the next write this watch must deliver
	batches int // batches read
}

// emit is the watch's Emit: it runs on the adapter's goroutine, so it only
// records; the case checks what it recorded.
func (r *reader[T]) emit(batch []driver.Event[T]) error {
	if r.inEmit.Add(1) != 1 {
		r.fault("Emit called while another Emit call of the same watch was running")
	}
	defer r.inEmit.Add(-1)
	r.mu.Lock()
	r.emits++
	if r.returned {
		r.faults = append(r.faults, fmt.Sprintf("Emit called with %d events after Watch returned", len(batch)))
	}
	if len(batch) == 0 {
		r.faults = append(r.faults, "Emit called with an empty batch")
	}
	// The adapter may reuse the slice once Emit returns.
	r.queued = append(r.queued, slices.Clone(batch))
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	if r.hook != nil {
		return r.hook(r.ctx, batch)
	}
	return nil
}

func (r *reader[T]) fault(msg string) {
	r.mu.Lock()
	r.faults = append(r.faults, msg)
	r.mu.Unlock()
}

// reportEmitFaults reports, once each, the violations Emit recorded.
func (r *reader[T]) reportEmitFaults() {
	r.mu.Lock()
	faults := r.faults[r.reported:]
	r.reported = len(r.faults)
	r.mu.Unlock()
	for _, f := range faults {
		r.e.t.Errorf("Watch(%d): %s", r.from, f)
	}
}

// result waits at most d for Watch to return; ok is false if it did not.
func (r *reader[T]) result(d time.Duration) (err error, ok bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-r.done:
	case <-timer.C:
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err, true
}

// stop cancels the watch and checks that Watch returns, with an error
// matching driver.ErrWatchStopped and the context's cause.
func (r *reader[T]) stop() {
	e := r.e
	e.t.Helper()
	r.cancel()
	err, ok := r.result(e.caps.timeout())
	if !ok {
		e.t.Fatalf("Watch(%d) did not return within %s after its context was cancelled", r.from, e.caps.timeout())
	}
	e.checkStopped(fmt.Sprintf("Watch(%d)", r.from), err, r.ctx)
	r.reportEmitFaults()
}

// checkStopped checks what a Watch whose context ended returned.
func (e *env[T]) checkStopped(what string, err error, ctx context.Context) {
	e.t.Helper()
	switch {
	case err == nil:
		e.t.Errorf("%s returned nil after its context ended; want an error matching core.ErrWatchStopped (core.Stopped(ctx))", what)
	case !errors.Is(err, driver.ErrWatchStopped):
		e.t.Errorf("%s returned %q after its context ended; want an error matching core.ErrWatchStopped (core.Stopped(ctx))", what, err)
	case !errors.Is(err, context.Cause(ctx)):
		e.t.Errorf("%s returned %q after its context ended; want it to match the context's cause %q too (core.Stopped(ctx))", what, err, context.Cause(ctx))
	}
}

// fill reads the next batch the watch emitted, waiting for it until ctx
// ends. It fails when Watch returned with nothing left to read.
func (r *reader[T]) fill(ctx context.Context) error {
	for {
		r.reportEmitFaults()
		r.mu.Lock()
		if len(r.queued) > 0 {
			batch := r.queued[0]
			r.queued = r.queued[1:]
			r.mu.Unlock()
			r.check(batch)
			r.batches++
			r.buf = append(r.buf, batch...)
			return nil
		}
		returned, err := r.returned, r.err
		r.mu.Unlock()
		if returned {
			if err == nil {
				return fmt.Errorf("Watch returned nil, which it never may")
			}
			return fmt.Errorf("Watch returned: %w", err)
		}
		select {
		case <-r.notify:
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *reader[T]) check(batch []driver.Event[T]) {
	t := r.e.t
	t.Helper()
	if len(batch) == 0 {
		return // reported by emit
	}
	prev := r.floor
	for _, ev := range batch {
		switch ev.Type {
		case driver.Bookmark:
			if ev.RV < prev {
				t.Errorf("Watch(%d): Bookmark at RV %d after RV %d: versions went backwards", r.from, ev.RV, prev)
			}
			if ev.Key != "" {
				t.Errorf("Watch(%d): Bookmark at RV %d has key %q", r.from, ev.RV, ev.Key)
			}
			r.floor = max(r.floor, ev.RV)
		case driver.Added, driver.Modified, driver.Deleted:
			if ev.RV <= r.from {
				t.Errorf("Watch(%d): %s %q at RV %d is not after the watch's start", r.from, ev.Type, ev.Key, ev.RV)
			}
			if ev.RV <= r.floor && ev.RV > r.from {
				t.Errorf("Watch(%d): %s %q at RV %d is not after RV %d, already delivered by an earlier batch or bookmark", r.from, ev.Type, ev.Key, ev.RV, r.floor)
			}
			if ev.RV < prev {
				t.Errorf("Watch(%d): %s %q at RV %d follows RV %d in the same batch", r.from, ev.Type, ev.Key, ev.RV, prev)
			}
			if ev.Key == "" {
				t.Errorf("Watch(%d): %s at RV %d has an empty key", r.from, ev.Type, ev.RV)
			}
			if ev.Err != nil {
				t.Errorf("Watch(%d): %s %q at RV %d has Err: %v", r.from, ev.Type, ev.Key, ev.RV, ev.Err)
			}
		default:
			t.Errorf("Watch(%d): event %q at RV %d has unknown type %s", r.from, ev.Key, ev.RV, ev.Type)
		}
		prev = max(prev, ev.RV)
	}
	r.floor = max(r.floor, prev)
}

// nextEvent returns the next event, bookmarks included, waiting at most d.
func (r *reader[T]) nextEvent(d time.Duration) (driver.Event[T], error) {
	if len(r.buf) == 0 {
		ctx, cancel := context.WithTimeout(r.e.ctx, d)
		defer cancel()
		for len(r.buf) == 0 {
			if err := r.fill(ctx); err != nil {
				return driver.Event[T]{}, err
			}
		}
	}
	ev := r.buf[0]
	r.buf = r.buf[1:]
	return ev, nil
}

// nextChange returns the next event that is not a bookmark.
func (r *reader[T]) nextChange() (driver.Event[T], error) {
	ctx, cancel := context.WithTimeout(r.e.ctx, r.e.caps.timeout())
	defer cancel()
	for {
		for len(r.buf) > 0 {
			ev := r.buf[0]
			r.buf = r.buf[1:]
			if ev.Type != driver.Bookmark {
				return ev, nil
			}
		}
		if err := r.fill(ctx); err != nil {
			return driver.Event[T]{}, err
		}
	}
}

// expect reads the events of e.writes[r.next:upTo] and reports the first
// mismatch. It returns false when the watch did not deliver them.
func (r *reader[T]) expect(upTo int) bool {
	e := r.e
	e.t.Helper()
	for ; r.next < upTo; r.next++ {
		w := e.writes[r.next]
		ev, err := r.nextChange()
		if err != nil {
			e.t.Errorf("Watch(%d): waiting for the event of %s: %v", r.from, w, err)
			return false
		}
		if msg := e.mismatch(ev, w); msg != "" {
			e.t.Errorf("Watch(%d): want the event of %s, got %s: %s", r.from, w, describe(e, ev), msg)
			return false
		}
	}
	return true
}

// expectAll reads the events of every write made so far.
func (r *reader[T]) expectAll() bool {
	r.e.t.Helper()
	return r.expect(len(r.e.writes))
}

// expectNoMore checks that nothing but the expected writes arrives: it
// makes one more write and requires its event to be the very next change,
// so an event repeated or invented after the last expected one shows up
// without waiting for a timeout.
func (r *reader[T]) expectNoMore() bool {
	e := r.e
	e.t.Helper()
	if !r.expectAll() {
		return false
	}
	e.sentinel++
	e.put(fmt.Sprintf("end-%d", e.sentinel), 1)
	return r.expectAll()
}

func describe[T any](e *env[T], ev driver.Event[T]) string {
	s := fmt.Sprintf("%s %q at RV %d", ev.Type, ev.Key, ev.RV)
	if ev.HasObject {
		s += fmt.Sprintf(" (version %d)", e.h.Version(ev.Object))
	}
	return s
}

// mismatch says how ev differs from the event write w must produce, or ""
// when it matches.
func (e *env[T]) mismatch(ev driver.Event[T], w write) string {
	if want := e.eventKey(w.key); ev.Key != want {
		return fmt.Sprintf("key %q, want %q (an event is missing, repeated or out of order)", ev.Key, want)
	}
	switch {
	case ev.Type == w.typ:
	case w.typ != driver.Deleted && !e.caps.DistinguishesUpdate && (ev.Type == driver.Added || ev.Type == driver.Modified):
	default:
		return fmt.Sprintf("type %s, want %s", ev.Type, w.typ)
	}
	if e.caps.ExactWriteRV {
		if ev.RV != w.rv {
			return fmt.Sprintf("RV %d, want the write's RV %d", ev.RV, w.rv)
		}
	} else if e.caps.BatchStartRV {
		// After the previous batch: the reader's floor checks it.
		if ev.RV > w.rv {
			return fmt.Sprintf("RV %d, want one at most %d (the write's RV)", ev.RV, w.rv)
		}
	} else if ev.RV <= w.after || ev.RV > w.rv {
		return fmt.Sprintf("RV %d, want one after %d (the previous write) and at most %d (the write's RV)", ev.RV, w.after, w.rv)
	}
	if ev.Type == driver.Deleted {
		if e.caps.DeletesCarryObject && !ev.HasObject {
			return "the delete has no object, want the last object (Capabilities.DeletesCarryObject)"
		}
	} else if !ev.HasObject {
		return "HasObject is false"
	}
	if ev.HasObject {
		if n := e.h.Version(ev.Object); n != w.n {
			return fmt.Sprintf("object at version %d, want %d", n, w.n)
		}
	}
	return ""
}
