package core

import (
	"context"
	"errors"
)

// DeltaFIFO is client-go's DeltaFIFO, typed: it groups pending deltas per
// key and pops keys in the order they first became pending, so a consumer
// sees the whole recent history of one key at once. Double deletes collapse
// (keeping the one that knows the final state); Replace infers typed
// FinalStateUnknown deletes for keys that vanished; Resync skips keys with
// pending deltas.
type DeltaFIFO[T any] struct {
	queueBase
	items  map[string][]Delta[T]
	queue  []string
	known  KeyLister[T]
	flight []Delta[T] // the deltas Pop's process holds, all of one key
	// changes holds the version of every change queued or in flight:
	// per-key grouping pops out of version order.
	changes versionSet
}

func (f *DeltaFIFO[T]) queued(d *Delta[T]) {
	queuedDelta(&f.wm, d)
	if d.change() {
		f.changes.add(d.RV)
	}
}

func (f *DeltaFIFO[T]) done(d *Delta[T]) {
	doneDelta(&f.wm, d)
	if d.change() {
		f.changes.remove(d.RV)
	}
}

func (f *DeltaFIFO[T]) appliedLocked() ResourceVersion { return f.wm.applied(f.changes.min()) }

// AppliedVersion implements Queue.
func (f *DeltaFIFO[T]) AppliedVersion() ResourceVersion {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.appliedLocked()
}

// NewDeltaFIFO returns an empty DeltaFIFO. known is the consumer's cache
// (the informer's Indexer); nil means the queue knows only what it holds,
// so Replace cannot infer deletes of keys already popped and Resync does
// nothing. With known set, a delete of a key neither known nor queued is
// dropped, as in client-go. Without it the delete is queued: unlike
// client-go, which drops it, a queue that cannot tell whether its consumer
// saw the key prefers a redundant delete to a lost one.
func NewDeltaFIFO[T any](known KeyLister[T]) *DeltaFIFO[T] {
	return &DeltaFIFO[T]{
		queueBase: newQueueBase(),
		items:     map[string][]Delta[T]{},
		known:     known,
	}
}

func (f *DeltaFIFO[T]) queueLocked(d Delta[T]) {
	deltas, exists := f.items[d.Key]
	f.queued(&d)
	deltas = append(deltas, d)
	if dropped, ok := dedupDeltas(&deltas); ok {
		f.done(&dropped)
	}
	if !exists {
		f.queue = append(f.queue, d.Key)
		if !f.populated {
			f.initialCount++
		}
	}
	f.items[d.Key] = deltas
}

// dedupDeltas collapses two trailing deletes into one, keeping the newer
// unless only the older knows the final state (client-go isDeletionDup),
// and returns the one it dropped.
func dedupDeltas[T any](ds *[]Delta[T]) (dropped Delta[T], ok bool) {
	s := *ds
	n := len(s)
	if n < 2 {
		return dropped, false
	}
	a, b := &s[n-2], &s[n-1]
	if a.Type != DeltaDeleted || b.Type != DeltaDeleted {
		return dropped, false
	}
	if (b.FinalStateUnknown && !a.FinalStateUnknown) || (!b.HasObject && a.HasObject) {
		dropped = *b
	} else {
		dropped, *a = *a, *b
	}
	var zero Delta[T]
	s[n-1] = zero
	*ds = s[:n-1]
	return dropped, true
}

func (f *DeltaFIFO[T]) waitRoom(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waitRoomLocked(ctx, func() bool { return len(f.queue) >= addWindow })
}

// Add implements Queue.
func (f *DeltaFIFO[T]) Add(deltas []Delta[T], rv ResourceVersion) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range deltas {
		d := deltas[i]
		f.wm.advanceChange(d.RV)
		if d.Type == DeltaDeleted {
			if last, pending := f.lastDeltaLocked(d.Key); pending {
				if !d.HasObject && last.HasObject {
					d.Object, d.HasObject = last.Object, true
				}
			} else if f.known != nil {
				// client-go drops a delete for a key nobody knows: no
				// consumer ever saw it, so there is nothing to undo.
				obj, ok := f.known.Get(d.Key)
				if !ok {
					continue
				}
				if !d.HasObject {
					d.Object, d.HasObject = obj, true
				}
			}
		}
		f.queueLocked(d)
	}
	f.wm.advance(rv)
	notify(f.signal)
	f.changedLocked()
	return nil
}

// lastDeltaLocked returns key's newest delta the cache does not hold yet:
// queued, or being applied by Pop's process (Pop lets go of the lock
// meanwhile, so the cache cannot tell of it).
func (f *DeltaFIFO[T]) lastDeltaLocked(key string) (Delta[T], bool) {
	if ds, ok := f.items[key]; ok {
		return ds[len(ds)-1], true
	}
	if len(f.flight) > 0 && f.flight[0].Key == key {
		return f.flight[len(f.flight)-1], true
	}
	return Delta[T]{}, false
}

// Replace implements Queue. The listed objects are queued as they arrive;
// the deletes it infers follow them.
func (f *DeltaFIFO[T]) Replace(ctx context.Context, list ListFunc[T]) error {
	f.mu.Lock()
	f.wm.beginList(f.appliedLocked())
	var seen map[string]struct{}
	if len(f.queue) > 0 || f.inflight || !knownEmpty(f.known) {
		seen = map[string]struct{}{}
	}
	f.mu.Unlock()

	rv, err := list(func(d Delta[T]) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		for len(f.queue) >= listWindow {
			if err := f.waitLocked(ctx, f.room); err != nil {
				return err
			}
		}
		d.Type, d.HasObject, d.FinalStateUnknown = DeltaReplaced, true, false
		if seen != nil {
			seen[d.Key] = struct{}{}
		}
		f.queueLocked(d)
		notify(f.signal)
		return nil
	})

	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.changedLocked()
	if err != nil {
		f.wm.abortList()
		return err
	}
	if seen != nil {
		f.inferDeletesLocked(seen, rv)
	}
	f.wm.endList(rv)
	f.populated = true
	notify(f.signal)
	return nil
}

// inferDeletesLocked queues a FinalStateUnknown delete for every key that
// is in flight, queued or cached and was not listed.
func (f *DeltaFIFO[T]) inferDeletesLocked(seen map[string]struct{}, rv ResourceVersion) {
	keys := f.queue
	if len(f.flight) > 0 {
		if k := f.flight[0].Key; f.items[k] == nil {
			keys = append(keys[:len(keys):len(keys)], k)
		}
	}
	for _, k := range keys {
		if _, ok := seen[k]; ok {
			continue
		}
		pending := f.items[k]
		if pending == nil { // in flight only
			pending = f.flight
			if pending[len(pending)-1].Type == DeltaDeleted {
				continue // on its way out already
			}
		}
		last := pending[len(pending)-1]
		if last.Type == DeltaSync {
			// Key-only: take the state from the cache, if it has any.
			if f.known == nil {
				continue
			}
			obj, ok := f.known.Get(k)
			if !ok {
				continue
			}
			last.Object, last.HasObject = obj, true
		}
		f.queueLocked(Delta[T]{Type: DeltaDeleted, Key: k, Object: last.Object, HasObject: last.HasObject, FinalStateUnknown: true, RV: rv})
	}
	if f.known == nil {
		return
	}
	f.known.Range(func(k string, obj T) bool {
		if _, ok := seen[k]; ok {
			return true
		}
		if _, ok := f.items[k]; ok {
			return true
		}
		f.queueLocked(Delta[T]{Type: DeltaDeleted, Key: k, Object: obj, HasObject: true, FinalStateUnknown: true, RV: rv})
		return true
	})
}

// Resync implements Queue.
func (f *DeltaFIFO[T]) Resync() error {
	return resync(&f.queueBase, f.known, func() func(string) bool {
		return func(k string) bool { _, ok := f.items[k]; return ok }
	}, f.queueLocked)
}

// Pop implements Queue.
func (f *DeltaFIFO[T]) Pop(ctx context.Context, process PopProcessFunc[T]) error {
	f.popMu.Lock()
	defer f.popMu.Unlock()
	f.mu.Lock()
	for len(f.queue) == 0 {
		if err := f.waitLocked(ctx, f.signal); err != nil {
			f.mu.Unlock()
			return err
		}
	}
	key := f.queue[0]
	f.queue[0] = ""
	f.queue = f.queue[1:]
	deltas := f.items[key]
	delete(f.items, key)
	initial := f.initialLocked()
	counts := f.initialCount > 0
	notify(f.room)
	f.inflight, f.flight = true, deltas
	f.mu.Unlock()

	err := process(deltas, initial)

	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight, f.flight = false, nil
	if counts {
		f.initialCount--
	}
	if errors.Is(err, ErrRequeue) {
		if _, exists := f.items[key]; !exists {
			// Back at the end; the deltas never left the watermark.
			f.items[key] = deltas
			f.queue = append(f.queue, key)
			return err
		}
	}
	// Processed, or dropped because newer deltas of the key arrived
	// meanwhile (client-go).
	for k := range deltas {
		f.done(&deltas[k])
	}
	f.changedLocked()
	return err
}

// Len implements Queue: the number of keys with pending deltas.
func (f *DeltaFIFO[T]) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.queue)
}

// ListKeys returns the keys with pending deltas, in pop order.
func (f *DeltaFIFO[T]) ListKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.queue...)
}

// Deltas returns a copy of the pending deltas of key.
func (f *DeltaFIFO[T]) Deltas(key string) ([]Delta[T], bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ds, ok := f.items[key]
	return append([]Delta[T](nil), ds...), ok
}
