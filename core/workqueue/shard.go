package workqueue

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

const (
	fDirty      uint32 = 1 << iota // needs processing: queued, or re-added while processing
	fProcessing                    // handed out by Get, Done not yet called
	fWaiting                       // has a live entry in the delay heap
)

// itemState is everything the queue knows about one key. It is found by
// index: through its shard's keyIndex, and from ready-queue slots and delay
// entries, so Get needs no lookup. States never move: they live in chunks
// that are never copied. Indexes rather than pointers keep the chunks free
// of pointers for the garbage collector, which would otherwise resolve one
// interior pointer per slot, entry and index slot at every cycle; and since
// the key is here, slots, delay entries and index slots hold no pointer at
// all and are not scanned.
//
// A state is guarded by its key's shard lock, except that Get marks a
// queued item processing holding the queue's lock alone (see takeLocked).
// Invariant: seq != 0 exactly
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
type itemState[K comparable] struct {
	key   K
	seq   uint64 // seq of the live ready-queue slot, 0 if none
	wseq  uint64 // seq of the live delay-heap entry
	at    int64  // ready time of the live delay-heap entry
	prio  int    // priority the item is queued, or will be re-queued, at
	wprio int    // priority the delayed add will use
	// flags is written under the shard's lock (and mu, for every change
	// but the two an Add or Done of a processing item makes), except by
	// takeLocked, which holds mu alone and stores it atomically; readers
	// holding only the shard's lock load it atomically (loadFlags).
	flags uint32
}

// loadFlags reads flags holding only the shard's lock. It is a plain load
// on amd64 and arm64.
func (st *itemState[K]) loadFlags() uint32 { return atomic.LoadUint32(&st.flags) }

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
	// finished counts this shard's items marked Done; Get counts the items
	// it hands out in Queue.taken, under mu.
	finished int
	// idled counts the Dones that left a state idle since the last sweep
	// (an upper bound on the idle states it could free).
	idled int
	_     [64]byte // keeps the next shard's lock off this cache line
}

// State allocation, under the queue's lock: a new key is always queued or
// delayed, which takes that lock anyway, so states come from one bump
// allocator in the order keys first arrive, which is also the order a FIFO
// hands them out. Chunk 0 holds states 0-63 and chunk c ≥ 1 the next
// 64<<(c-1), so a small queue stays small, and growing allocates a chunk
// rather than copying one: a state's address never changes, and a reader
// holding a shard lock never races with the allocator.
const (
	chunk0Bits = 6
	numChunks  = 32 - chunk0Bits
	sweepSlack = 1024
)

func stateLoc(idx int32) (c, off int) {
	u := uint32(idx)
	if u < 1<<chunk0Bits {
		return 0, int(u)
	}
	c = bits.Len32(u >> chunk0Bits)
	return c, int(u - 1<<(chunk0Bits+c-1))
}

func chunkLen(c int) int {
	if c == 0 {
		return 1 << chunk0Bits
	}
	return 1 << (chunk0Bits + c - 1)
}

// stateTable holds every state of a queue. A chunk's slice header is
// written once, under the queue's lock, before any index into it is handed
// out, and a state is only read under its shard's lock.
type stateTable[K comparable] struct {
	chunks [numChunks][]itemState[K]
	next   int32 // states ever allocated
}

func (t *stateTable[K]) at(idx int32) *itemState[K] {
	c, off := stateLoc(idx)
	return &t.chunks[c][off]
}

// has reports whether idx is allocated: after a ShutDown that emptied the
// table, a Taken's index may not be.
func (t *stateTable[K]) has(idx int32) bool {
	c, off := stateLoc(idx)
	return off < len(t.chunks[c])
}

func (t *stateTable[K]) alloc() int32 {
	idx := t.next
	if c, off := stateLoc(idx); off == 0 {
		t.chunks[c] = make([]itemState[K], chunkLen(c))
	}
	t.next++
	return idx
}

func (q *Queue[K]) state(idx int32) *itemState[K] { return q.table.at(idx) }

func (q *Queue[K]) newStateLocked() int32 {
	q.states++
	if q.states > q.sweepAt {
		q.sweepDue = true
	}
	if n := len(q.free); n > 0 {
		idx := q.free[n-1]
		q.free = q.free[:n-1]
		return idx
	}
	return q.table.alloc()
}

// acquireLocked returns item's state index, holding both locks, allocating
// a state for a key the shard does not track yet.
func (q *Queue[K]) acquireLocked(sh *shard[K], item K, h uint64) int32 {
	slot, found := sh.index.findOrInsert(h, item, &q.table)
	if !found {
		slot.ref = q.newStateLocked() + 1
		q.state(slot.ref - 1).key = item
	}
	return slot.ref - 1
}

// sweepLocked frees the idle states, holding mu and no shard lock. It runs
// once the states in use exceed sweepAt, which it sets to twice what is
// left (and at least 1024 more): between two sweeps at least as many states
// are allocated as the sweep visits, so its cost is constant per Add. It
// only scans when Dones since the last scan could have left half the
// states idle, so a queue that only grows (delayed items piling up) pays
// nothing. Freed states may still be pointed at by stale slots and delay
// entries; their seq no longer matches, as with any stale entry.
func (q *Queue[K]) sweepLocked() {
	q.sweepDue = false
	q.lockShards()
	defer q.unlockShards()
	idled := 0
	for i := range q.shards {
		idled += q.shards[i].idled
	}
	if 2*idled < q.states {
		q.sweepAt = 2*q.states + q.slack
		return
	}
	var idle []int32
	for i := range q.shards {
		sh := &q.shards[i]
		idle = idle[:0]
		for _, s := range sh.index.slots {
			if s.ref != 0 && q.state(s.ref-1).flags == 0 {
				idle = append(idle, s.ref-1)
			}
		}
		for _, idx := range idle {
			st := q.state(idx)
			sh.index.delete(q.hash(st.key), st.key, &q.table)
			*st = itemState[K]{}
			q.free = append(q.free, idx)
		}
		q.states -= len(idle)
		sh.idled = 0
	}
	q.sweepAt = 2*q.states + q.slack
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
