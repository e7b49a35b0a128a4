package core

import (
	"context"
	"slices"
	"sort"
	"sync"
)

// watermark computes a queue's applied version: the highest version V such
// that every change up to V has been processed. It holds no lock; the
// queue that owns it calls it under its own.
//
// Three things hold the version back:
//   - the version of every change still queued or in flight: the queue
//     passes the smallest (FIFO finds it in arrival order, DeltaFIFO keeps
//     a versionSet);
//   - a list that is streaming, or whose deltas are still queued or in
//     flight (listing > 0): a listed object stands for every change up to
//     the list's version, so nothing above what was applied before the list
//     began (floor) counts as applied until the whole list is processed;
//   - the highest version handed to the queue (queued), which bookmarks and
//     finished lists move.
type watermark struct {
	queued  ResourceVersion
	listing int
	floor   ResourceVersion
	lists   uint64 // lists begun
	// bookmarksOnly: neither a change's version nor a finished list's
	// moves queued (see SupersededSkipper); bookmarks do.
	bookmarksOnly bool
}

// applied is the applied version, given the smallest version of a change
// queued or in flight (pending reports whether there is one).
func (w *watermark) applied(minChange ResourceVersion, pending bool) ResourceVersion {
	v := w.queued
	if pending && minChange <= v {
		v = max(minChange, 1) - 1
	}
	if w.listing > 0 && w.floor < v {
		v = w.floor
	}
	return v
}

// advance records that everything up to rv was handed to the queue.
func (w *watermark) advance(rv ResourceVersion) {
	if rv > w.queued {
		w.queued = rv
	}
}

// advanceChange records a change at rv handed to the queue: everything up
// to rv was, unless the source may have skipped a superseded change
// before it (bookmarksOnly).
func (w *watermark) advanceChange(rv ResourceVersion) {
	if !w.bookmarksOnly {
		w.advance(rv)
	}
}

// beginList records a list starting to stream when the applied version is
// applied; endList or abortList ends it.
func (w *watermark) beginList(applied ResourceVersion) {
	w.floor = applied
	w.listing++
	w.lists++
}

// endList records a list that ended at version rv. From a source that may
// skip superseded changes, a list proves its version no more than a change
// does (a key's message up to rv may have been skipped for a later one the
// watch delivers): the next bookmark moves the version.
func (w *watermark) endList(rv ResourceVersion) {
	w.listing--
	w.advanceChange(rv)
}

// abortList records a list that failed: what it queued still holds the
// version back until processed, but the version does not move to it.
func (w *watermark) abortList() { w.listing-- }

// queuedDelta records a delta entering the queue, doneDelta one leaving it
// (processed, or dropped by the queue). Only a list's deltas count here.
func queuedDelta[T any](w *watermark, d *Delta[T]) {
	if d.fromList() {
		w.listing++
	}
}

func doneDelta[T any](w *watermark, d *Delta[T]) {
	if d.fromList() {
		w.listing--
	}
}

// versionSet is a multiset of versions. Versions are nearly always added
// in ascending order (a watch delivers them so), which makes add and min
// O(1) and remove O(log n).
type versionSet struct {
	vs   []versionCount // ascending; entries before head are spent
	head int
}

type versionCount struct {
	rv ResourceVersion
	n  int
}

func (s *versionSet) add(rv ResourceVersion) {
	live := s.vs[s.head:]
	n := len(live)
	switch {
	case n > 0 && live[n-1].rv == rv:
		live[n-1].n++
	case n == 0 || live[n-1].rv < rv:
		s.vs = append(s.vs, versionCount{rv: rv, n: 1})
	default: // out of order: only a queue fed by hand does this
		i := sort.Search(n, func(i int) bool { return live[i].rv >= rv })
		if live[i].rv == rv {
			live[i].n++
			return
		}
		s.vs = slices.Insert(s.vs, s.head+i, versionCount{rv: rv, n: 1})
	}
}

func (s *versionSet) remove(rv ResourceVersion) {
	live := s.vs[s.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].rv >= rv })
	if i == len(live) || live[i].rv != rv || live[i].n == 0 {
		return
	}
	live[i].n--
	for s.head < len(s.vs) && s.vs[s.head].n == 0 {
		s.head++
	}
	if s.head == len(s.vs) {
		s.vs, s.head = s.vs[:0], 0
	} else if s.head > 1024 && s.head*2 > len(s.vs) {
		m := copy(s.vs, s.vs[s.head:])
		s.vs, s.head = s.vs[:m], 0
	}
}

// min returns the smallest version in the set.
func (s *versionSet) min() (ResourceVersion, bool) {
	if s.head == len(s.vs) {
		return 0, false
	}
	return s.vs[s.head].rv, true
}

// listWindow bounds the deltas a queue holds while a list streams into it:
// put blocks until the consumer has made room.
const listWindow = 4096

// queueBase holds what both queues share: locks, wake-ups, close, the
// watermark, the change signal and the initial population count.
type queueBase struct {
	mu     sync.Mutex
	popMu  sync.Mutex
	signal chan struct{} // wakes Pop
	room   chan struct{} // wakes a Replace waiting for room
	closed bool
	done   chan struct{} // closed by Close
	wm     watermark
	// changed is closed when the applied version or the sync state may
	// have moved; it is replaced only when someone took it.
	changed      chan struct{}
	changedTaken bool
	// kick gets a token on every such change, for the one follower that
	// always listens (the informer), without a new channel each time.
	kick chan struct{}
	// inflight is set while Pop's process runs (the queue holds the
	// deltas in flight too, to infer deletes for their keys).
	inflight bool
	// populated is set when the first list ended; initialCount counts
	// what was queued before and is not processed yet.
	populated    bool
	initialCount int
}

func newQueueBase() queueBase {
	return queueBase{
		signal:  make(chan struct{}, 1),
		room:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
		kick:    make(chan struct{}, 1),
	}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (q *queueBase) changedLocked() {
	notify(q.kick)
	if q.changedTaken {
		close(q.changed)
		q.changed, q.changedTaken = make(chan struct{}), false
	}
}

// Changed implements Queue.
func (q *queueBase) Changed() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.changedTaken = true
	return q.changed
}

// kicks receives a token whenever Changed would be closed.
func (q *queueBase) kicks() <-chan struct{} { return q.kick }

// waitLocked waits for ch (signal or room); entered and left with q.mu
// held.
func (q *queueBase) waitLocked(ctx context.Context, ch chan struct{}) error {
	if q.closed {
		return ErrQueueClosed
	}
	q.mu.Unlock()
	var err error
	select {
	case <-ch:
	case <-q.done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	q.mu.Lock()
	return err
}

// Close implements Queue.
// bookmarksOnlySetter is implemented by both queues: neither a change's
// version nor a list's moves the applied version (see
// driver.SupersededSkipper); the reflector sets it before the queue is used.
type bookmarksOnlySetter interface{ setBookmarksOnly() }

// setBookmarksOnly implements bookmarksOnlySetter.
func (q *queueBase) setBookmarksOnly() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.wm.bookmarksOnly = true
}

func (q *queueBase) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.done)
	}
}

// listState returns how many lists the queue has begun, and whether one
// is being applied (streaming, or its objects queued or in flight).
func (q *queueBase) listState() (begun uint64, listing bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wm.lists, q.wm.listing > 0
}

// HasSynced implements Queue.
func (q *queueBase) HasSynced() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.populated && q.initialCount == 0
}

// initialLocked reports whether a pop now belongs to the initial list.
func (q *queueBase) initialLocked() bool { return !q.populated || q.initialCount > 0 }

// knownEmpty reports whether the consumer's cache holds nothing.
func knownEmpty[T any](known KeyLister[T]) bool {
	empty := true
	if known != nil {
		known.Range(func(string, T) bool { empty = false; return false })
	}
	return empty
}

// loadListLocked stands for a list at rv whose objects load put straight
// into the consumer's cache, without queueing a delta each (a warm start's
// checkpoint): with the queue idle and empty, and when load reports that
// it did, the queue is populated at rv, as after a Replace that the
// consumer has processed. Entered and left with q.mu held.
func (q *queueBase) loadListLocked(rv ResourceVersion, empty bool, load func() bool) bool {
	if !empty || q.inflight || !load() {
		return false
	}
	q.wm.advance(rv)
	q.populated = true
	q.changedLocked()
	return true
}

// listLoader is implemented by both queues (see loadListLocked).
type listLoader interface {
	loadList(rv ResourceVersion, load func() bool) bool
}

func (f *FIFO[T]) loadList(rv ResourceVersion, load func() bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loadListLocked(rv, len(f.pending()) == 0, load)
}

func (f *DeltaFIFO[T]) loadList(rv ResourceVersion, load func() bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loadListLocked(rv, len(f.queue) == 0, load)
}

// resync is Queue.Resync for both queues: under b's lock it queues a
// key-only DeltaSync for every key known holds that has no delta waiting
// (pending, built under the lock, tells), then wakes Pop. A key with
// waiting deltas is processed anyway, and syncing it now would replay a
// state older than what is queued. Without known it does nothing: the
// queue cannot tell what its consumer holds.
func resync[T any](b *queueBase, known KeyLister[T], pending func() func(key string) bool, queue func(Delta[T])) error {
	if known == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	waiting := pending()
	known.Range(func(k string, _ T) bool {
		if !waiting(k) {
			queue(Delta[T]{Type: DeltaSync, Key: k})
		}
		return true
	})
	notify(b.signal)
	return nil
}
