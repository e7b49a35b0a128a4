package core

// Staging: the first list into an empty cache.
//
// Filing a million listed objects into a Go map cost the informer a cache
// miss per key, 0.4–0.6 µs each while the list's readers and Postgres kept
// the other core busy: most of what an informer added to a List's time
// (BenchmarkPostgresScale). So an initial list into an empty Indexer is
// staged instead: each object is appended to a page, with the values of
// its index functions, without a lookup; the staged objects are filed
// (settleLocked) into a base, the warm start's open-addressing table that
// every CPU fills at once, and the indexes are built in one pass, when
// anything else touches the Indexer. The informer files them before it
// reports the sync, so that the time counts as the sync's; a reader during
// the list files what is there first, so it sees what it always did (the
// rest of the list then goes into the map, as before staging).

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

// reserve records a list's estimate of its size, n, for an empty indexer:
// when its list is filed before it ends (a reader came), the map the rest
// goes into is made for the rest, instead of growing (growing the map of a
// million-row list cost about 0.5 s of CPU in BenchmarkWarmStart's
// profile). A non-empty indexer is left alone.
func (s *Indexer[T]) reserve(n int64) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lenLocked() == 0 {
		s.expect = int(min(n, maxReserve))
	}
}

// stage appends an initial list's obj under key, with its index values,
// without looking key up, if the indexer held nothing but staged objects;
// the caller vouches that key was not staged before (a list names each
// key once). It reports whether it staged obj; if not, and err is nil, the
// caller puts obj. An index function's error leaves obj out, as put would.
func (tx indexTx[T]) stage(key string, obj T) (staged bool, err error) {
	s := tx.s
	st := s.staged
	if st == nil {
		if s.items.len() != 0 {
			return false, nil
		}
		st = &stagedItems[T]{bits: s.stageBits, minBase: s.stageMinBase}
		s.staged = st
	}
	if len(s.fns) > 0 {
		n := len(st.vals)
		for _, fn := range s.fns {
			v, err := indexValuesOf(fn.f, obj)
			if err != nil {
				st.vals = st.vals[:n]
				return false, &IndexError{Index: fn.name, Key: key, Err: err}
			}
			st.vals = append(st.vals, v)
		}
	}
	st.add(key, obj)
	return true, nil
}

// settleLocked files the staged objects (see above) and builds the
// indexes of an indexer that held nothing else.
func (s *Indexer[T]) settleLocked() {
	st := s.staged
	if st == nil {
		return
	}
	s.staged = nil
	rest := max(0, s.expect-st.n)
	s.expect = 0
	t, pages, winners := st.file(rest, len(s.fns) > 0)
	s.items = t
	if len(s.fns) == 0 {
		return
	}
	vals := func(pos int) [][]string { return st.vals[pos*len(s.fns) : (pos+1)*len(s.fns)] }
	key := func(pos int) string { return pages[pos>>st.bits].key(pos & (1<<st.bits - 1)) }
	if winners == nil {
		for pos := range st.n {
			fileValues(s.fns, s.keys, key(pos), vals(pos))
		}
		return
	}
	for _, pos := range winners {
		fileValues(s.fns, s.keys, key(pos), vals(pos))
	}
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
