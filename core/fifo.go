package core

import (
	"context"
	"errors"
)

// FIFO hands deltas over in exactly the order they arrived, across keys, as
// client-go's RealFIFO does: a consumer never sees key B's later change
// before key A's earlier one. It is the informer's default queue.
type FIFO[T any] struct {
	queueBase
	items  []Delta[T]
	head   int
	flight []Delta[T] // the run Pop's process holds
	// flightMin is the version of the first change in flight (0: none).
	flightMin ResourceVersion
	// cursor is at or before the first change among the pending deltas:
	// deltas arrive in version order, so that change has the smallest
	// pending version (see minChangeLocked).
	cursor   int
	known    KeyLister[T]
	scratch  []Delta[T]
	maxBatch int
}

// NewFIFO returns an empty in-order queue. known is the consumer's cache,
// used by Replace to infer deletes and by Resync; it may be nil.
func NewFIFO[T any](known KeyLister[T]) *FIFO[T] {
	return &FIFO[T]{queueBase: newQueueBase(), known: known, maxBatch: 256}
}

func (f *FIFO[T]) pending() []Delta[T] { return f.items[f.head:] }

func (f *FIFO[T]) appendLocked(d Delta[T]) {
	queuedDelta(&f.wm, &d)
	f.items = append(f.items, d)
	if !f.populated {
		f.initialCount++
	}
}

// addWindow bounds how far a queue runs ahead of its consumer on the
// watch path, as listWindow does on the list path: before queueing a watch
// batch the reflector waits (waitRoom) while this many deltas (DeltaFIFO:
// keys) are pending. A source faster than the handlers then waits in its
// Emit instead of piling changes up in memory: measured on
// bench.BenchmarkPipeline, an unbounded queue grew to the whole stream and
// made most of the garbage of the run (its slice regrown by copying), and
// the collections it caused cost a quarter of the CPU.
const addWindow = 4096

// roomWaiter is implemented by both queues; a Queue of another kind is
// simply not waited for.
type roomWaiter interface {
	// waitRoom returns once fewer than addWindow deltas are pending, the
	// queue is closed (Add then queues as before), or ctx ends (its
	// error).
	waitRoom(ctx context.Context) error
}

// waitRoomLocked waits, with q.mu held, while full reports the queue full.
func (q *queueBase) waitRoomLocked(ctx context.Context, full func() bool) error {
	for full() && !q.closed {
		if err := q.waitLocked(ctx, q.room); err != nil {
			if errors.Is(err, ErrQueueClosed) {
				return nil
			}
			return err
		}
	}
	return nil
}

func (f *FIFO[T]) waitRoom(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waitRoomLocked(ctx, func() bool { return len(f.items)-f.head >= addWindow })
}

// Add implements Queue. Deletes without an object are queued as they are:
// the consumer, seeing deltas in order, looks the last state up in its
// cache when it processes them.
func (f *FIFO[T]) Add(deltas []Delta[T], rv ResourceVersion) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range deltas {
		f.wm.advanceChange(deltas[i].RV)
		f.appendLocked(deltas[i])
	}
	f.wm.advance(rv)
	notify(f.signal)
	f.changedLocked()
	return nil
}

// Replace implements Queue. The listed objects are queued as they arrive;
// the deletes it infers follow them.
func (f *FIFO[T]) Replace(ctx context.Context, list ListFunc[T]) error {
	f.mu.Lock()
	f.wm.beginList(f.appliedLocked())
	// The first list into an empty queue and cache has nothing to compare
	// with: it keeps no set of the keys it saw.
	var seen map[string]struct{}
	if len(f.pending()) > 0 || f.inflight || !knownEmpty(f.known) {
		seen = map[string]struct{}{}
	}
	f.mu.Unlock()

	rv, err := list(func(d Delta[T]) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		for len(f.items)-f.head >= listWindow {
			if err := f.waitLocked(ctx, f.room); err != nil {
				return err
			}
		}
		d.Type, d.HasObject, d.FinalStateUnknown = DeltaReplaced, true, false
		if seen != nil {
			seen[d.Key] = struct{}{}
		}
		f.appendLocked(d)
		// Woken for every object, the consumer took one or two at a
		// time, and the wake-ups cost more than applying them (an
		// initial sync's profile, BenchmarkPostgresScale): it is woken
		// once a batch is waiting, and by the list's end for the rest.
		if len(f.items)-f.head >= min(f.maxBatch, listWindow/2) {
			notify(f.signal)
		}
		return nil
	})

	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.changedLocked()
	notify(f.signal)
	if err != nil {
		f.wm.abortList()
		return err
	}
	if seen != nil {
		f.inferDeletesLocked(seen, rv)
	}
	f.wm.endList(rv)
	f.populated = true
	return nil
}

// inferDeletesLocked queues a FinalStateUnknown delete for every key that
// is in flight, queued or cached and was not listed.
func (f *FIFO[T]) inferDeletesLocked(seen map[string]struct{}, rv ResourceVersion) {
	lastQueued := map[string]*Delta[T]{}
	var order []string
	for _, run := range [][]Delta[T]{f.flight, f.pending()} {
		for i := range run {
			d := &run[i]
			if _, dup := lastQueued[d.Key]; !dup {
				order = append(order, d.Key)
			}
			lastQueued[d.Key] = d
		}
	}
	for _, k := range order {
		if _, ok := seen[k]; ok {
			continue
		}
		last := *lastQueued[k]
		switch last.Type {
		case DeltaDeleted:
			continue // on its way out already
		case DeltaSync:
			delete(lastQueued, k) // key-only: the cache has its state
			continue
		}
		f.appendLocked(Delta[T]{Type: DeltaDeleted, Key: k, Object: last.Object, HasObject: last.HasObject, FinalStateUnknown: true, RV: rv})
	}
	if f.known == nil {
		return
	}
	f.known.Range(func(k string, obj T) bool {
		if _, ok := seen[k]; ok {
			return true
		}
		if _, ok := lastQueued[k]; ok {
			return true
		}
		f.appendLocked(Delta[T]{Type: DeltaDeleted, Key: k, Object: obj, HasObject: true, FinalStateUnknown: true, RV: rv})
		return true
	})
}

// minChangeLocked returns the smallest version of a change in flight or
// pending. Changes are queued in version order, so it is the first change
// of the run in flight, or else the first pending change; the cursor makes
// finding it O(1) amortized, however many list or sync deltas lie ahead.
func (f *FIFO[T]) minChangeLocked() (ResourceVersion, bool) {
	if f.flightMin > 0 {
		return f.flightMin, true
	}
	f.cursor = max(f.cursor, f.head)
	for f.cursor < len(f.items) && !f.items[f.cursor].change() {
		f.cursor++
	}
	if f.cursor == len(f.items) {
		return 0, false
	}
	return f.items[f.cursor].RV, true
}

func (f *FIFO[T]) appliedLocked() ResourceVersion { return f.wm.applied(f.minChangeLocked()) }

// AppliedVersion implements Queue.
func (f *FIFO[T]) AppliedVersion() ResourceVersion {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.appliedLocked()
}

// Resync implements Queue.
func (f *FIFO[T]) Resync() error {
	return resync(&f.queueBase, f.known, func() func(string) bool {
		queued := make(map[string]struct{}, len(f.pending()))
		for _, d := range f.pending() {
			queued[d.Key] = struct{}{}
		}
		return func(k string) bool { _, ok := queued[k]; return ok }
	}, f.appendLocked)
}

// Pop implements Queue: it hands over up to 256 consecutive deltas, more
// when needed to keep the deltas of one version (one source transaction)
// together. A run never straddles the end of the initial list, so
// isInInitialList holds for all of it.
func (f *FIFO[T]) Pop(ctx context.Context, process PopProcessFunc[T]) error {
	f.popMu.Lock()
	defer f.popMu.Unlock()
	f.mu.Lock()
	for f.head == len(f.items) {
		if err := f.waitLocked(ctx, f.signal); err != nil {
			f.mu.Unlock()
			return err
		}
	}
	n := min(len(f.items)-f.head, f.maxBatch)
	initial := f.initialLocked()
	if f.initialCount > 0 && n >= f.initialCount {
		n = f.initialCount
	} else {
		// Never split a transaction: the consumer applies a run under one
		// lock, so readers see a transaction whole.
		for f.head+n < len(f.items) {
			d, prev := &f.items[f.head+n], &f.items[f.head+n-1]
			if !d.change() || !prev.change() || d.RV != prev.RV {
				break
			}
			n++
		}
	}
	batch := append(f.scratch[:0], f.items[f.head:f.head+n]...)
	clear(f.items[f.head : f.head+n])
	f.head += n
	if f.head == len(f.items) {
		f.items, f.head, f.cursor = f.items[:0], 0, 0
	} else if f.head > 1024 && f.head*2 > len(f.items) {
		m := copy(f.items, f.items[f.head:])
		clear(f.items[m:])
		f.cursor = max(f.cursor-f.head, 0)
		f.items, f.head = f.items[:m], 0
	}
	notify(f.room)
	f.inflight, f.flight, f.flightMin = true, batch, 0
	for i := range batch {
		if batch[i].change() {
			f.flightMin = max(batch[i].RV, 1)
			break
		}
	}
	f.mu.Unlock()

	err := process(batch, initial)

	f.mu.Lock()
	f.inflight, f.flight, f.flightMin = false, nil, 0
	if errors.Is(err, ErrRequeue) {
		// Back at the front, in order: the queue promises arrival order.
		// The deltas never left the watermark.
		rest := append(batch, f.items[f.head:]...)
		f.items = append(f.items[:0], rest...)
		f.head, f.cursor = 0, 0
	} else {
		if f.initialCount > 0 {
			f.initialCount -= n
		}
		for k := range batch {
			doneDelta(&f.wm, &batch[k])
		}
		f.changedLocked()
	}
	clear(batch)
	f.scratch = batch[:0]
	f.mu.Unlock()
	return err
}

// Len implements Queue: the number of pending deltas.
func (f *FIFO[T]) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.items) - f.head
}
