package workqueue

import "sync"

const (
	fDirty      uint8 = 1 << iota // needs processing: queued, or re-added while processing
	fProcessing                   // handed out by Get, Done not yet called
	fWaiting                      // has a live entry in the delay heap
)

// itemState is everything the queue knows about one key. It is found
// through its shard's keyIndex, and ready-queue slots and delay entries
// point at it, so Get needs no lookup. States never move: they are carved
// from chunks that are never copied.
//
// A state is guarded by its key's shard lock. Invariant: seq != 0 exactly
// when the item has a live ready-queue slot, which is exactly when it is
// dirty and not processing. seq and wseq are only set with the queue's lock
// held as well, so a slot or delay entry is live iff its seq is its item's
// current one.
//
// A key whose flags drop to 0 keeps its state ("idle"): a controller adds
// the same keys again and again, and keeping them spares an index delete
// and insert per item. Idle states are swept once they could make up half
// of the states (see sweepLocked), so memory stays proportional to the
// keys in use.
type itemState struct {
	seq   uint64 // seq of the live ready-queue slot, 0 if none
	wseq  uint64 // seq of the live delay-heap entry
	at    int64  // ready time of the live delay-heap entry
	prio  int    // priority the item is queued, or will be re-queued, at
	wprio int    // priority the delayed add will use
	flags uint8
}

// shard owns the index of the keys whose hash falls in it, and their
// states, under its own lock. Sharding is what lets an Add of an item that
// is already queued — most Adds, in a controller whose informer reports a
// key many times before a worker takes it — and a Done that queues nothing
// touch no lock but their shard's, instead of queueing behind every
// producer and worker on the one lock that guards the ready order.
//
// Lock order: the queue's lock, then one shard's. A goroutine holding a
// shard lock only ever TryLocks the queue's lock; when that fails it lets
// go of the shard and takes both in order. Only the holder of the queue's
// lock takes several shard locks (see Queue.lockShards).
type shard[K comparable] struct {
	mu    sync.Mutex
	index keyIndex[K]
	// processing counts this shard's items handed out and not yet Done.
	processing int
	_          [64]byte // keeps the next shard's lock off this cache line
}

// State allocation, under the queue's lock: a new key is always queued or
// delayed, which takes that lock anyway, so states come from one bump
// allocator in the order keys first arrive, which is also the order a FIFO
// hands them out.
const (
	firstChunk = 16
	maxChunk   = 1024
)

func (q *Queue[K]) newStateLocked() *itemState {
	q.states++
	if q.states > q.sweepAt {
		q.sweepDue = true
	}
	if n := len(q.free); n > 0 {
		st := q.free[n-1]
		q.free = q.free[:n-1]
		return st
	}
	if len(q.chunk) == 0 {
		q.chunkSize = min(max(2*q.chunkSize, firstChunk), maxChunk)
		q.chunk = make([]itemState, q.chunkSize)
	}
	st := &q.chunk[0]
	q.chunk = q.chunk[1:]
	return st
}

// acquireLocked returns item's state, holding both locks, allocating a zero
// state for a key the shard does not track yet.
func (q *Queue[K]) acquireLocked(sh *shard[K], item K, h uint64) *itemState {
	slot, found := sh.index.findOrInsert(h, item)
	if !found {
		slot.st = q.newStateLocked()
	}
	return slot.st
}

// sweepLocked frees the idle states, holding mu and no shard lock. It runs
// once the states in use exceed sweepAt, which it sets to twice what is
// left (and at least 1024 more): between two sweeps at least as many states
// are allocated as the sweep visits, so its cost is constant per Add.
// Freed states may still be pointed at by stale slots and delay entries;
// their seq no longer matches, as with any stale entry.
func (q *Queue[K]) sweepLocked() {
	q.sweepDue = false
	q.lockShards()
	var idle []indexSlot[K]
	for i := range q.shards {
		sh := &q.shards[i]
		idle = idle[:0]
		for _, s := range sh.index.slots {
			if s.st != nil && s.st.flags == 0 {
				idle = append(idle, s)
			}
		}
		for _, s := range idle {
			sh.index.delete(s.hash, s.key)
			*s.st = itemState{}
			q.free = append(q.free, s.st)
		}
		q.states -= len(idle)
	}
	q.unlockShards()
	q.sweepAt = 2*q.states + maxChunk
}

// lockShards takes every shard's lock, holding mu. That cannot deadlock: a
// goroutine holding a shard lock never waits for another lock (it only
// TryLocks mu), and only the holder of mu takes more than one shard lock.
func (q *Queue[K]) lockShards() {
	for i := range q.shards {
		q.shards[i].mu.Lock()
	}
}

func (q *Queue[K]) unlockShards() {
	for i := range q.shards {
		q.shards[i].mu.Unlock()
	}
}
