package core

// Staging: the first list into an empty cache.
//
// Filing a million listed objects into a Go map cost the informer a cache
// miss per key, 0.4–0.6 µs each while the list's readers and Postgres kept
// the other core busy: most of what an informer added to a List's time
// (BenchmarkPostgresScale). So an initial list into an empty Indexer
// without index functions is staged instead: each object is appended to a
// page without a lookup, and the staged objects are filed (settleLocked)
// into a base, the warm start's open-addressing table that every CPU fills
// at once, when anything else touches the Indexer. The informer files them
// before it reports the sync, so that the time counts as the sync's; a
// reader during the list files what is there first, so it sees what it
// always did (the rest of the list then goes into the map, as before
// staging).
//
// An indexed cache is not staged. Staging it (index values kept per
// object, the indexes built in one pass at filing) measured no faster on
// BenchmarkInitialSync's ours-indexed side, 1.78–1.81 s against 1.78–1.99 s,
// and its peak heap grew from 271–285 MB to 333–342 MB: the index values
// waited in memory, and building the indexes moved from beside the list's
// decoding to after it.

// stagePageBits and minStagedBase shape an Indexer's staging: pages of
// 1024 objects, and a base only for 4096 objects or more.
const (
	stagePageBits = 10
	minStagedBase = 4096
)

// maxReserve bounds what reserve sizes a cache for: an estimate is only an
// estimate (Postgres's reltuples can be stale), and a far overestimate
// costs an empty map's memory.
const maxReserve = 1 << 23

// reserve takes a list's estimate of its size, n, for an empty indexer, so
// that a map the list goes into is made for it instead of growing (growing
// the map of a million-row list cost about 0.5 s of CPU in
// BenchmarkWarmStart's profile): an indexed cache's map now, and, for a
// staged list filed before it ends (a reader came), the map its rest goes
// into. A non-empty indexer is left alone.
func (s *Indexer[T]) reserve(n int64) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lenLocked() != 0 {
		return
	}
	n = min(n, maxReserve)
	if len(s.fns) > 0 && n >= asyncReserve {
		// Making the map touches every page of it (a million 150-byte
		// objects: 0.1–0.4 s), which the list's first row waited for
		// (BenchmarkUserProgram's start-up): it is made beside the list
		// instead, and the first update waits for what is left of it.
		r := &reservedItems[T]{done: make(chan struct{})}
		s.reserved.Store(r)
		go func() {
			r.items = newItems[T](int(n))
			close(r.done)
		}()
		return
	}
	if len(s.fns) > 0 {
		s.items = newItems[T](int(n))
		s.baseReplacedLocked()
		return
	}
	s.expect = int(n)
}

// asyncReserve is the least estimate whose map reserve makes beside the
// list rather than at once.
const asyncReserve = 1 << 16

// reservedItems is a map being made for a list's estimate.
type reservedItems[T any] struct {
	done  chan struct{}
	items items[T] // set before done is closed
}

// adoptReserved waits, without the lock, for the map reserve is making,
// and puts it in place if the indexer is still empty (else it is dropped:
// the objects already stored stay where they are).
func (s *Indexer[T]) adoptReserved() {
	r := s.reserved.Load()
	if r == nil {
		return
	}
	<-r.done
	s.mu.Lock()
	if s.reserved.CompareAndSwap(r, nil) && s.lenLocked() == 0 {
		s.items = r.items
		s.baseReplacedLocked()
	}
	s.mu.Unlock()
}

// stage appends an initial list's obj under key without looking key up,
// if the indexer has no index function and held nothing but staged
// objects; the caller vouches that key was not staged before (a list names
// each key once). It reports whether it staged obj; if not, the caller
// puts obj.
func (tx indexTx[T]) stage(key string, obj T) bool {
	s := tx.s
	if len(s.fns) > 0 {
		return false
	}
	st := s.staged
	if st == nil {
		if s.items.len() != 0 {
			return false
		}
		st = &stagedItems[T]{bits: s.stageBits, minBase: s.stageMinBase}
		s.staged = st
	}
	st.add(key, obj)
	return true
}

// settleLocked files the staged objects (see above).
func (s *Indexer[T]) settleLocked() {
	st := s.staged
	if st == nil {
		return
	}
	s.staged = nil
	s.items = st.file(max(0, s.expect-st.n))
	s.expect = 0
	s.baseReplacedLocked()
}

// lenLocked is the number of keys, staged ones included.
func (s *Indexer[T]) lenLocked() int {
	n := s.items.len()
	if s.staged != nil {
		n += s.staged.n
	}
	return n
}

// rlock takes the read lock over a filed indexer: readers look keys up,
// so what is staged is filed first, under the write lock.
func (s *Indexer[T]) rlock() {
	s.mu.RLock()
	for s.staged != nil {
		s.mu.RUnlock()
		s.settle()
		s.mu.RLock()
	}
}

// settle files what an initial list staged.
func (s *Indexer[T]) settle() {
	s.mu.Lock()
	s.settleLocked()
	s.mu.Unlock()
}

// settleListed files what a list that has ended staged: nothing more of it
// comes, so no map is made for the rest its estimate promised (a stale
// estimate would make it large and empty).
func (s *Indexer[T]) settleListed() {
	s.mu.Lock()
	s.expect = 0
	s.settleLocked()
	s.mu.Unlock()
}
