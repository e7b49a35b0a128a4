package core

import (
	"context"
	"errors"
	"strconv"
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
	// DeltaSync: a periodic resync replays the key's cached state; nothing
	// changed at the source. It carries only the key: the consumer reads
	// the state from its cache.
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
	// when HasObject is true. Empty for DeltaSync.
	Object T
	// HasObject is false for a DeltaSync and for a DeltaDeleted whose last
	// state neither the source nor the queue knew; the informer then takes
	// the object from its cache.
	HasObject bool
	// FinalStateUnknown marks client-go's DeletedFinalStateUnknown: a
	// delete inferred by Replace because the key vanished while the watch
	// was down. Object is the last state this side saw, which may be older
	// than the state the source deleted.
	FinalStateUnknown bool
	// Undecodable marks a DeltaDeleted that stands for a change the source
	// reported but that did not decode (see UndecodablePolicy): the key
	// leaves the cache rather than keep a state the source has moved past.
	// Handlers get it as a delete with finalStateUnknown.
	Undecodable bool
	// RV is the version at which the change happened; for an inferred
	// delete the version of the list; 0 for DeltaReplaced (the list's
	// version is known only once the list ends) and for DeltaSync.
	RV ResourceVersion
	// Fill completes Object from the cached object of Key when the watch
	// left values out of it (Event.Fill, with the reflector's Transform
	// applied after it). The informer calls it before caching Object.
	Fill func(cached T) (T, error)
}

// change reports whether d is a change reported by a watch, whose version
// holds the queue's applied version back until it is processed.
func (d *Delta[T]) change() bool {
	return d.Type >= DeltaAdded && d.Type <= DeltaDeleted && !d.FinalStateUnknown
}

// fromList reports whether d was queued by a Replace.
func (d *Delta[T]) fromList() bool { return d.Type == DeltaReplaced || d.FinalStateUnknown }

// PopProcessFunc consumes one popped run of deltas. For DeltaFIFO the run is
// all the pending deltas of one key, oldest first; for FIFO it is a run of
// consecutive deltas of any keys in arrival order. isInInitialList is true
// while the queue is still handing over its first list. The slice is only
// valid during the call.
type PopProcessFunc[T any] func(deltas []Delta[T], isInInitialList bool) error

// ListFunc runs one list for Queue.Replace: it hands every listed object to
// put (as a DeltaReplaced, in any order) and returns the list's version.
// If it fails, the queue keeps what was put and the replace is abandoned:
// no delete is inferred and the version does not move.
type ListFunc[T any] func(put func(Delta[T]) error) (ResourceVersion, error)

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
	// Add enqueues the changes of one watch batch, in version order, and
	// moves the queue's version to rv (at least the last delta's version;
	// more when the batch ended with a bookmark).
	Add(deltas []Delta[T], rv ResourceVersion) error
	// Replace streams a full list into the queue: list puts a DeltaReplaced
	// per object, blocking while the queue holds a bounded number of them
	// and the consumer works (so a list is never held whole). When list
	// returns, Replace queues a FinalStateUnknown DeltaDeleted for each key
	// the consumer (or the queue) still holds that the list lacked, and
	// moves the queue's version to the list's. It returns list's error, or
	// ctx's when it ended while put waited.
	Replace(ctx context.Context, list ListFunc[T]) error
	// Resync enqueues a key-only DeltaSync for every cached key that has
	// no pending delta.
	Resync() error
	// Pop blocks until there is something to process, ctx is done, or the
	// queue is closed and empty (ErrQueueClosed). It must not be called
	// concurrently with itself.
	Pop(ctx context.Context, process PopProcessFunc[T]) error
	// HasSynced reports whether the first list has been entirely popped
	// and processed.
	HasSynced() bool
	// AppliedVersion is the highest version V such that every change up to
	// V (and every bookmark) has been popped and processed.
	AppliedVersion() ResourceVersion
	// Changed returns a channel that is closed when AppliedVersion or
	// HasSynced may have changed since Changed was called.
	Changed() <-chan struct{}
	// Len counts pending deltas (DeltaFIFO: pending keys).
	Len() int
	// Close wakes Pop; what is queued can still be popped.
	Close()
}

var (
	_ Queue[int] = (*DeltaFIFO[int])(nil)
	_ Queue[int] = (*FIFO[int])(nil)
)
