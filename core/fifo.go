package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
)

// DeltaType says what a Delta does to the cache.
type DeltaType uint8

const (
	// DeltaAdded: a watch reported the key as new.
	DeltaAdded DeltaType = iota + 1
	// DeltaUpdated: a watch reported a new state of the key.
	DeltaUpdated
	// DeltaDeleted: the key is gone.
	DeltaDeleted
	// DeltaReplaced: a (re)list reported the key; the consumer decides
	// between add and update by looking at its cache.
	DeltaReplaced
	// DeltaSync: a periodic resync replays the cached state; nothing
	// changed at the source.
	DeltaSync
)

// String returns client-go's name for the delta type.
func (t DeltaType) String() string {
	switch t {
	case DeltaAdded:
		return "Added"
	case DeltaUpdated:
		return "Updated"
	case DeltaDeleted:
		return "Deleted"
	case DeltaReplaced:
		return "Replaced"
	case DeltaSync:
		return "Sync"
	}
	return "DeltaType(" + strconv.Itoa(int(t)) + ")"
}

// Delta is one change handed from a queue to its consumer. It is a value,
// never boxed, so queuing allocates nothing per change.
type Delta[T any] struct {
	Type DeltaType
	Key  string
	// Object is the new state, or for DeltaDeleted the last known state
	// when HasObject is true.
	Object T
	// HasObject is false only for a DeltaDeleted whose last state neither
	// the source nor the queue knew; the informer then takes the object from
	// its cache.
	HasObject bool
	// FinalStateUnknown marks client-go's DeletedFinalStateUnknown: a
	// delete inferred by Replace because the key vanished while the watch
	// was down. Object is the last state this side saw, which may be older
	// than the state the source deleted.
	FinalStateUnknown bool
	// RV is the version at which the change happened; for DeltaReplaced the
	// version of the list; for DeltaSync the queue's version when the resync
	// ran.
	RV ResourceVersion
}

// PopProcessFunc consumes one popped run of deltas. For DeltaFIFO the run is
// all the pending deltas of one key, oldest first; for FIFO it is a run of
// consecutive deltas of any keys in arrival order. isInInitialList is true
// while the queue is still handing over its first Replace. The slice is only
// valid during the call.
type PopProcessFunc[T any] func(deltas []Delta[T], isInInitialList bool) error

// ErrRequeue, returned (or wrapped) by a PopProcessFunc, puts the popped
// deltas back into the queue (DeltaFIFO: at the back unless newer deltas for
// the key arrived meanwhile, as in client-go; FIFO: at the front, keeping
// order).
var ErrRequeue = errors.New("dbinformer: requeue")

// ErrQueueClosed is returned by Pop once a closed queue is empty.
var ErrQueueClosed = errors.New("dbinformer: queue closed")

// Queue sits between a Reflector (producer) and an informer (consumer). The
// two implementations are DeltaFIFO (client-go's per-key grouping) and FIFO
// (arrival order, like client-go's newer RealFIFO); the informer works with
// either.
type Queue[T any] interface {
	// Add enqueues the changes of one watch batch, in version order.
	// Bookmark events enqueue nothing but advance the queue's version.
	Add(events []Event[T]) error
	// Replace enqueues a full list taken at version rv: a DeltaReplaced per
	// object and a FinalStateUnknown DeltaDeleted for each key the consumer
	// (or the queue) still holds that the list lacks.
	Replace(list []Event[T], rv ResourceVersion) error
	// Resync enqueues a DeltaSync for every cached key that has no pending
	// delta.
	Resync() error
	// Pop blocks until there is something to process, ctx is done, or the
	// queue is closed and empty (ErrQueueClosed). It must not be called
	// concurrently with itself.
	Pop(ctx context.Context, process PopProcessFunc[T]) error
	// HasSynced reports whether the first Replace has been entirely popped
	// and processed.
	HasSynced() bool
	// AppliedVersion is the highest version V such that every change up to
	// V (and every bookmark) has been popped and processed.
	AppliedVersion() ResourceVersion
	// Len counts pending deltas (DeltaFIFO: pending keys).
	Len() int
	// Close wakes Pop; what is queued can still be popped.
	Close()
}

var (
	_ Queue[int] = (*DeltaFIFO[int])(nil)
	_ Queue[int] = (*FIFO[int])(nil)
)

// queueBase holds what both queues share: wake-up, close, the version
// watermark and the initial population count.
type queueBase struct {
	mu         sync.Mutex
	popMu      sync.Mutex
	signal     chan struct{}
	closedCh   chan struct{}
	closed     bool
	enqueuedRV ResourceVersion
	// in-flight: popped and being processed.
	inflight    bool
	inflightMin ResourceVersion
	populated   bool
	// A Replace's deltas carry the list's version, but each stands for
	// changes at any version up to it: while any of them is queued or in
	// flight, nothing above replFloor (what was applied before the list)
	// may count as applied.
	replPending int
	replFloor   ResourceVersion
	// initialCount counts what of the first Replace is still unprocessed.
	initialCount int
}

func newQueueBase() queueBase {
	return queueBase{signal: make(chan struct{}, 1), closedCh: make(chan struct{})}
}

func (q *queueBase) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *queueBase) bumpLocked(rv ResourceVersion) {
	if rv > q.enqueuedRV {
		q.enqueuedRV = rv
	}
}

// waitLocked is entered and left with q.mu held.
func (q *queueBase) waitLocked(ctx context.Context) error {
	if q.closed {
		return ErrQueueClosed
	}
	q.mu.Unlock()
	var err error
	select {
	case <-q.signal:
	case <-q.closedCh:
	case <-ctx.Done():
		err = ctx.Err()
	}
	q.mu.Lock()
	return err
}

func (q *queueBase) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.closedCh)
	}
}

func (q *queueBase) HasSynced() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.populated && q.initialCount == 0
}

// appliedLocked turns "the oldest unprocessed version" into "everything
// below it is applied".
func (q *queueBase) appliedLocked(pending bool, minPending ResourceVersion) ResourceVersion {
	v := q.appliedOrderLocked(pending, minPending)
	if q.replPending > 0 && q.replFloor < v {
		return q.replFloor
	}
	return v
}

// startReplaceLocked is called by Replace before it queues anything, with
// what appliedLocked says then.
func (q *queueBase) startReplaceLocked(applied ResourceVersion) {
	if q.replPending == 0 || applied < q.replFloor {
		q.replFloor = applied
	}
}

func (q *queueBase) appliedOrderLocked(pending bool, minPending ResourceVersion) ResourceVersion {
	if q.inflight && (!pending || q.inflightMin < minPending) {
		minPending, pending = q.inflightMin, true
	}
	if !pending {
		return q.enqueuedRV
	}
	if minPending == 0 {
		return 0
	}
	return minPending - 1
}

func minRV[T any](ds []Delta[T]) ResourceVersion {
	m := ds[0].RV
	for _, d := range ds[1:] {
		if d.RV < m {
			m = d.RV
		}
	}
	return m
}

func eventDelta[T any](ev *Event[T]) (Delta[T], error) {
	d := Delta[T]{Key: ev.Key, Object: ev.Object, HasObject: ev.HasObject, RV: ev.RV}
	switch ev.Type {
	case Added:
		d.Type, d.HasObject = DeltaAdded, true
	case Modified:
		d.Type, d.HasObject = DeltaUpdated, true
	case Deleted:
		d.Type = DeltaDeleted
	default:
		return d, fmt.Errorf("dbinformer: key %q at version %d: unexpected event type %v", ev.Key, ev.RV, ev.Type)
	}
	return d, nil
}

// DeltaFIFO is client-go's DeltaFIFO, typed: it groups pending deltas per
// key and pops keys in the order they first became pending, so a consumer
// sees the whole recent history of one key at once. Double deletes collapse
// (keeping the one that knows the final state); Replace infers typed
// FinalStateUnknown deletes for keys that vanished; Resync skips keys with
// pending deltas.
type DeltaFIFO[T any] struct {
	queueBase
	items    map[string][]Delta[T]
	queue    []string
	known    KeyLister[T]
	requeued map[string]struct{}
	replKeys map[string]struct{} // keys whose pending deltas include one of a Replace
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
		requeued:  map[string]struct{}{},
		replKeys:  map[string]struct{}{},
	}
}

func (f *DeltaFIFO[T]) queueReplacedLocked(d Delta[T]) {
	if _, ok := f.replKeys[d.Key]; !ok {
		f.replKeys[d.Key] = struct{}{}
		f.replPending++
	}
	f.queueLocked(d)
}

func (f *DeltaFIFO[T]) queueLocked(d Delta[T]) {
	deltas, exists := f.items[d.Key]
	deltas = dedupDeltas(append(deltas, d))
	if !exists {
		f.queue = append(f.queue, d.Key)
	}
	f.items[d.Key] = deltas
}

// dedupDeltas collapses two trailing deletes into one, keeping the newer
// unless only the older knows the final state (client-go isDeletionDup).
func dedupDeltas[T any](ds []Delta[T]) []Delta[T] {
	n := len(ds)
	if n < 2 {
		return ds
	}
	a, b := &ds[n-2], &ds[n-1]
	if a.Type != DeltaDeleted || b.Type != DeltaDeleted {
		return ds
	}
	if (b.FinalStateUnknown && !a.FinalStateUnknown) || (!b.HasObject && a.HasObject) {
		var zero Delta[T]
		ds[n-1] = zero
		return ds[:n-1]
	}
	*a = *b
	var zero Delta[T]
	ds[n-1] = zero
	return ds[:n-1]
}

// Add implements Queue.
func (f *DeltaFIFO[T]) Add(events []Event[T]) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var firstErr error
	for i := range events {
		ev := &events[i]
		f.bumpLocked(ev.RV)
		if ev.Type == Bookmark {
			continue
		}
		d, err := eventDelta(ev)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if d.Type == DeltaDeleted {
			pending, queued := f.items[d.Key]
			if !d.HasObject && queued {
				if last := pending[len(pending)-1]; last.HasObject {
					d.Object, d.HasObject = last.Object, true
				}
			}
			if !queued && f.known != nil {
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
	f.wake()
	return firstErr
}

// Replace implements Queue.
func (f *DeltaFIFO[T]) Replace(list []Event[T], rv ResourceVersion) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startReplaceLocked(f.appliedVersionLocked())
	keys := make(map[string]struct{}, len(list))
	for i := range list {
		keys[list[i].Key] = struct{}{}
		f.queueReplacedLocked(Delta[T]{Type: DeltaReplaced, Key: list[i].Key, Object: list[i].Object, HasObject: true, RV: rv})
	}
	for _, k := range f.queue {
		if _, ok := keys[k]; ok {
			continue
		}
		pending := f.items[k]
		last := pending[len(pending)-1]
		f.queueReplacedLocked(Delta[T]{Type: DeltaDeleted, Key: k, Object: last.Object, HasObject: last.HasObject, FinalStateUnknown: true, RV: rv})
	}
	if f.known != nil {
		for _, k := range f.known.ListKeys() {
			if _, ok := keys[k]; ok {
				continue
			}
			if _, ok := f.items[k]; ok {
				continue
			}
			obj, ok := f.known.Get(k)
			f.queueReplacedLocked(Delta[T]{Type: DeltaDeleted, Key: k, Object: obj, HasObject: ok, FinalStateUnknown: true, RV: rv})
		}
	}
	f.bumpLocked(rv)
	if !f.populated {
		f.populated = true
		f.initialCount = len(f.queue)
	}
	f.wake()
	return nil
}

// Resync implements Queue.
func (f *DeltaFIFO[T]) Resync() error {
	if f.known == nil {
		return nil
	}
	keys := f.known.ListKeys()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		// A key with pending deltas will be processed anyway, and syncing
		// it now would replay a state older than what is queued.
		if _, ok := f.items[k]; ok {
			continue
		}
		obj, ok := f.known.Get(k)
		if !ok {
			continue
		}
		f.queueLocked(Delta[T]{Type: DeltaSync, Key: k, Object: obj, HasObject: true, RV: f.enqueuedRV})
	}
	f.wake()
	return nil
}

// Pop implements Queue.
func (f *DeltaFIFO[T]) Pop(ctx context.Context, process PopProcessFunc[T]) error {
	f.popMu.Lock()
	defer f.popMu.Unlock()
	f.mu.Lock()
	for len(f.queue) == 0 {
		if err := f.waitLocked(ctx); err != nil {
			f.mu.Unlock()
			return err
		}
	}
	key := f.queue[0]
	f.queue[0] = ""
	f.queue = f.queue[1:]
	deltas := f.items[key]
	delete(f.items, key)
	delete(f.requeued, key)
	_, repl := f.replKeys[key]
	delete(f.replKeys, key) // still counted in replPending while in flight
	initial := !(f.populated && f.initialCount == 0)
	counts := f.initialCount > 0
	f.inflight, f.inflightMin = true, minRV(deltas)
	f.mu.Unlock()

	err := process(deltas, initial)

	f.mu.Lock()
	f.inflight = false
	if counts {
		f.initialCount--
	}
	requeued := false
	if errors.Is(err, ErrRequeue) {
		if _, exists := f.items[key]; !exists {
			f.items[key] = deltas
			f.queue = append(f.queue, key)
			f.requeued[key] = struct{}{}
			requeued = true
		}
	}
	if repl {
		if requeued {
			f.replKeys[key] = struct{}{} // still counted
		} else {
			// Done. A Replace that queued the key again while it was in
			// flight counted it anew.
			f.replPending--
		}
	}
	f.mu.Unlock()
	return err
}

// AppliedVersion implements Queue.
func (f *DeltaFIFO[T]) AppliedVersion() ResourceVersion {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.appliedVersionLocked()
}

func (f *DeltaFIFO[T]) appliedVersionLocked() ResourceVersion {
	if len(f.queue) == 0 {
		return f.appliedLocked(false, 0)
	}
	// Keys are queued in the order they became pending and versions only
	// grow, so the head holds the oldest pending version, except for keys
	// put back by a requeue.
	m := f.items[f.queue[0]][0].RV
	if len(f.requeued) > 0 {
		for _, k := range f.queue {
			if rv := f.items[k][0].RV; rv < m {
				m = rv
			}
		}
	}
	return f.appliedLocked(true, m)
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

// FIFO hands deltas over in exactly the order they arrived, across keys, as
// client-go's RealFIFO does: a consumer never sees key B's later change
// before key A's earlier one. It is the informer's default queue.
type FIFO[T any] struct {
	queueBase
	items    []Delta[T]
	head     int
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

// Add implements Queue. Deletes without an object are queued as they are:
// the consumer, seeing deltas in order, looks the last state up in its
// cache when it processes them.
func (f *FIFO[T]) Add(events []Event[T]) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var firstErr error
	for i := range events {
		ev := &events[i]
		f.bumpLocked(ev.RV)
		if ev.Type == Bookmark {
			continue
		}
		d, err := eventDelta(ev)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		f.items = append(f.items, d)
	}
	f.wake()
	return firstErr
}

// Replace implements Queue. Inferred deletes come first, then the list, so
// that a key deleted and re-created while the watch was down is seen as a
// delete followed by an add.
func (f *FIFO[T]) Replace(list []Event[T], rv ResourceVersion) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startReplaceLocked(f.appliedVersionLocked())
	queuedBefore := len(f.items)
	keys := make(map[string]struct{}, len(list))
	for i := range list {
		keys[list[i].Key] = struct{}{}
	}
	lastQueued := map[string]int{}
	var order []string
	for i, d := range f.pending() {
		if _, seen := lastQueued[d.Key]; !seen {
			order = append(order, d.Key)
		}
		lastQueued[d.Key] = i
	}
	base := f.head
	for _, k := range order {
		if _, ok := keys[k]; ok {
			continue
		}
		last := f.items[base+lastQueued[k]]
		if last.Type == DeltaDeleted {
			continue
		}
		f.items = append(f.items, Delta[T]{Type: DeltaDeleted, Key: k, Object: last.Object, HasObject: last.HasObject, FinalStateUnknown: true, RV: rv})
	}
	if f.known != nil {
		for _, k := range f.known.ListKeys() {
			if _, ok := keys[k]; ok {
				continue
			}
			if _, ok := lastQueued[k]; ok {
				continue
			}
			obj, ok := f.known.Get(k)
			f.items = append(f.items, Delta[T]{Type: DeltaDeleted, Key: k, Object: obj, HasObject: ok, FinalStateUnknown: true, RV: rv})
		}
	}
	for i := range list {
		f.items = append(f.items, Delta[T]{Type: DeltaReplaced, Key: list[i].Key, Object: list[i].Object, HasObject: true, RV: rv})
	}
	f.replPending += len(f.items) - queuedBefore
	f.bumpLocked(rv)
	if !f.populated {
		f.populated = true
		f.initialCount = len(f.items) - f.head
	}
	f.wake()
	return nil
}

// Resync implements Queue.
func (f *FIFO[T]) Resync() error {
	if f.known == nil {
		return nil
	}
	keys := f.known.ListKeys()
	f.mu.Lock()
	defer f.mu.Unlock()
	var queued map[string]struct{}
	if p := f.pending(); len(p) > 0 {
		queued = make(map[string]struct{}, len(p))
		for _, d := range p {
			queued[d.Key] = struct{}{}
		}
	}
	for _, k := range keys {
		if _, ok := queued[k]; ok {
			continue
		}
		obj, ok := f.known.Get(k)
		if !ok {
			continue
		}
		f.items = append(f.items, Delta[T]{Type: DeltaSync, Key: k, Object: obj, HasObject: true, RV: f.enqueuedRV})
	}
	f.wake()
	return nil
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
		if err := f.waitLocked(ctx); err != nil {
			f.mu.Unlock()
			return err
		}
	}
	n := len(f.items) - f.head
	if n > f.maxBatch {
		n = f.maxBatch
	}
	initial := !(f.populated && f.initialCount == 0)
	if f.initialCount > 0 && n > f.initialCount {
		n = f.initialCount
	} else {
		// Never split a transaction: the consumer applies a run under one
		// lock, so readers see a transaction whole.
		// A relist is one version too, but may be huge; it is split.
		for f.head+n < len(f.items) {
			d := &f.items[f.head+n]
			if d.RV != f.items[f.head+n-1].RV || d.Type == DeltaSync || d.Type == DeltaReplaced || d.FinalStateUnknown {
				break
			}
			n++
		}
	}
	batch := append(f.scratch[:0], f.items[f.head:f.head+n]...)
	clear(f.items[f.head : f.head+n])
	f.head += n
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	} else if f.head > 1024 && f.head*2 > len(f.items) {
		m := copy(f.items, f.items[f.head:])
		clear(f.items[m:])
		f.items, f.head = f.items[:m], 0
	}
	f.inflight, f.inflightMin = true, minRV(batch)
	f.mu.Unlock()

	err := process(batch, initial)

	f.mu.Lock()
	f.inflight = false
	if errors.Is(err, ErrRequeue) {
		// Back at the front, in order: the queue promises arrival order.
		rest := append(batch, f.items[f.head:]...)
		f.items = append(f.items[:0], rest...)
		f.head = 0
	} else {
		if f.initialCount > 0 {
			f.initialCount -= n
		}
		for _, d := range batch {
			if d.Type == DeltaReplaced || d.FinalStateUnknown {
				f.replPending--
			}
		}
	}
	clear(batch)
	f.scratch = batch[:0]
	f.mu.Unlock()
	return err
}

// AppliedVersion implements Queue.
func (f *FIFO[T]) AppliedVersion() ResourceVersion {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.appliedVersionLocked()
}

func (f *FIFO[T]) appliedVersionLocked() ResourceVersion {
	if f.head == len(f.items) {
		return f.appliedLocked(false, 0)
	}
	return f.appliedLocked(true, f.items[f.head].RV)
}

// Len implements Queue: the number of pending deltas.
func (f *FIFO[T]) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.items) - f.head
}
