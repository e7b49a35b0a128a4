package core

import (
	"context"
	"fmt"

	"github.com/dbinformer/dbinformer/core/driver"
)

// apply checks and queues one watch batch. Nothing of a batch that breaks
// the version order is queued: a transaction is applied whole or not at
// all, and the watch restarts from the last version fully applied.
func (r *Reflector[T]) apply(ctx context.Context, batch []driver.Event[T]) error {
	last := r.LastSyncResourceVersion()
	prev, top := last, last
	var marked ResourceVersion // the highest bookmark
	for i := range batch {
		ev := &batch[i]
		top = max(top, ev.RV)
		if ev.Type == driver.Bookmark {
			marked = max(marked, ev.RV)
			// A stale bookmark says nothing new; the queue keeps the
			// highest version it saw.
			continue
		}
		if ev.RV <= last || ev.RV < prev {
			return &OrderError{Source: r.cfg.name, Key: ev.Key, RV: ev.RV, After: prev}
		}
		prev = ev.RV
	}
	// Back-pressure: wait while the queue is far ahead of its consumer.
	if w, ok := r.q.(roomWaiter); ok {
		if err := w.waitRoom(ctx); err != nil {
			return err
		}
	}
	// Only the watch's goroutine calls apply; the lock keeps the scratch
	// slice's owner plain to the race detector.
	r.mu.Lock()
	deltas := r.deltas[:0]
	if r.watchFail.count > 0 {
		// The watch works again: earlier failures no longer say why a
		// wait waits.
		r.watchFail = failures{}
	}
	r.mu.Unlock()
	for i := range batch {
		if batch[i].Type == driver.Bookmark {
			continue
		}
		// A change that does not decode becomes a delete of its key (or
		// stops the reflector, by the UndecodablePolicy): the key never
		// keeps a state the source has moved past.
		d, ok, stop := r.admit(ctx, &batch[i])
		if stop != nil {
			clear(deltas)
			r.mu.Lock()
			r.deltas = deltas[:0]
			r.mu.Unlock()
			return stop
		}
		if ok {
			deltas = append(deltas, d)
		}
	}
	// Everything up to handed was handed to the queue: the batch's top,
	// or, from a source that may have skipped a superseded change before
	// one of these, its bookmark only.
	handed := top
	if r.skips {
		handed = marked
	}
	if err := r.q.Add(deltas, handed); err != nil {
		r.cfg.rep.report(ctx, fmt.Errorf("%s: %w", r.cfg.name, err))
	}
	clear(deltas)
	r.mu.Lock()
	r.deltas = deltas[:0]
	r.mu.Unlock()
	r.lastRV.Store(uint64(top))
	return nil
}
