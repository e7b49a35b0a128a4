package core

// Staging: the first list into an empty cache.
//
// Filing a million listed objects into a Go map cost the informer a cache
// miss per key, 0.4–0.6 µs each while the list's readers and Postgres kept
// the other core busy: most of what an informer added to a List's time
// (BenchmarkPostgresScale). So an initial list into an empty Indexer is
// staged instead: each object is appended to a page without a lookup, and
// the staged objects are filed (settleLocked) into a base, the warm
// start's open-addressing table that every CPU fills at once, when
// anything else touches the Indexer. The informer files them before it
// reports the sync, so that the time counts as the sync's; a reader during
// the list files what is there first, so it sees what it always did (the
// rest of the list then goes into the map, as before staging).
//
// An indexed cache is staged too, each object's index entries noted as it
// is staged (its key's id under each of its values, not the object's
// values) and filed value by value with the objects (filePending): its
// list into a Go map cost the user program's informer a cache miss a key,
// 0.75 of its 2.7 s of CPU in BenchmarkUserProgram's profile (a map of
// 150-byte objects misses the TLB as well as the cache). An earlier try
// kept the index values of each object until the filing and built the
// indexes then: no faster, and a fifth more peak heap. A key listed twice
// (a list names each key once, but the filing does not rely on it) ends in
// the map with its later object, and the earlier object's index entries
// are taken out then (dropStaged).

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
// BenchmarkWarmStart's profile): the map a staged list's rest goes into if
// it is filed before it ends (a reader came). A non-empty indexer is left
// alone.
func (s *Indexer[T]) reserve(n int64) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lenLocked() != 0 {
		return
	}
	s.expect = int(min(n, maxReserve))
}

// stage appends an initial list's obj under key without looking key up,
// and files its index entries, if the indexer held nothing but staged
// objects; the caller vouches that key was not staged before (a list names
// each key once). It reports whether it staged obj; if not (the indexer
// held objects, or an index function failed), the caller puts obj, which
// reports the failure.
func (tx indexTx[T]) stage(key string, obj T) bool {
	s := tx.s
	st := s.staged
	if st == nil && s.items.len() != 0 {
		return false
	}
	if st == nil {
		st = &stagedItems[T]{bits: s.stageBits, minBase: s.stageMinBase}
		s.staged = st
	}
	id := noID
	if len(s.fns) > 0 {
		var ok bool
		if id, ok = s.indexStaged(key, obj); !ok {
			if st.n == 0 {
				s.staged = nil
			}
			return false
		}
	}
	st.add(key, obj)
	if len(s.fns) > 0 {
		st.ids = append(st.ids, id)
	}
	return true
}

// noID is the id of a staged object with no index value.
const noID = ^uint32(0)

// indexStaged notes the index entries of obj, staged under key, as
// pending (each holding a reference to the id, filed by filePending), and
// returns its id (noID: it has no index value); false, changing nothing,
// if an index function fails. Every value is computed before anything
// changes, as putLocked does. The caller has made s.staged.
func (s *Indexer[T]) indexStaged(key string, obj T) (uint32, bool) {
	var buf [4][]string
	vals := buf[:0]
	for _, fn := range s.fns {
		v, err := indexValuesOf(fn.f, obj)
		if err != nil {
			return 0, false
		}
		vals = append(vals, v)
	}
	st := s.staged
	if st.pend == nil {
		st.pend = make([]map[string][]uint32, len(s.fns))
		for k := range st.pend {
			st.pend[k] = map[string][]uint32{}
		}
	}
	id := noID
	for k := range s.fns {
		for _, v := range vals[k] {
			if id == noID {
				id = s.keys.alloc(key, keyHash(key))
			}
			st.pend[k][v] = append(st.pend[k][v], id)
			s.keys.ref(id)
		}
	}
	return id, true
}

// filePending files the index entries staging left pending, value by
// value: each value's set is made once for all its keys and filled while
// it is in the CPU's cache. Filed as each object came, a million keys under
// a hundred values went each into a set of 72 kB among 7 MB of them, a
// cache miss each (a fifth of the user program's CPU after staging).
func (s *Indexer[T]) filePending(st *stagedItems[T]) {
	for k, pend := range st.pend {
		for v, ids := range pend {
			s.fns[k].idx.addAll(v, ids, s.keys)
		}
	}
	st.pend = nil
}

// dropStaged takes out the index entries of obj, staged under key with id
// and then replaced by a later object of the same key: by its values
// computed again, or, if they fail or no longer name the id (obj changed
// since), from every value of every index.
func (s *Indexer[T]) dropStaged(key string, obj T, id uint32) {
	if id == noID {
		return
	}
	h, stale := keyHash(key), false
	for _, fn := range s.fns {
		vals, err := indexValuesOf(fn.f, obj)
		stale = stale || err != nil
		for _, v := range vals {
			// false for a value listed twice, too: the purge then
			// finds nothing more.
			stale = !fn.idx.remove(v, h, id, s.keys) || stale
		}
	}
	if stale {
		for _, idx := range s.indices {
			idx.purge(id, s.keys)
		}
	}
	s.keys.release(id)
}

// settleLocked files the staged objects (see above).
func (s *Indexer[T]) settleLocked() {
	st := s.staged
	if st == nil {
		return
	}
	s.staged = nil
	s.filePending(st)
	var dropped func(string, T, int)
	if st.ids != nil {
		dropped = func(key string, obj T, entry int) { s.dropStaged(key, obj, st.ids[entry]) }
	}
	s.items = st.file(max(0, s.expect-st.n), dropped)
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
