package core

// items is the Indexer's key → object table: a Go map, and, after a warm
// start or an initial list (Indexer.stage), a frozen base holding the
// checkpoint's or the list's objects.
//
// A base is what makes a warm start cheap. Filling a Go map with a million
// keys costs 150–330 ms on the machines BENCHMARKS.md runs on (one cache
// miss per key, on one core), more than decoding the checkpoint; a base
// keeps the decoded pages as they are and adds an open-addressing table of
// positions, which every CPU fills at once (BenchmarkWarmStart). Writes
// after the load update a base object in place, delete it by marking its
// position dead, and put keys the base never had in the map: a key lives in
// the base or in the map, never both. When more than a quarter of the base
// is dead, the live objects of both are filed into a new base (compact),
// so that a cache whose keys all changed since the load does not hold the
// old ones.
type items[T any] struct {
	m    map[string]T
	base *itemBase[T]
}

func newItems[T any](n int) items[T] { return items[T]{m: make(map[string]T, n)} }

// stagedItems is an initial list's objects as they arrived, in pages of
// 1<<bits (the last may hold fewer), not yet filed (see Indexer.stage).
type stagedItems[T any] struct {
	bits    uint
	minBase int // fewer objects go into a map: a base is not worth it
	pages   []*itemPage[T]
	keys    []string // the page being filled
	objs    []T
	n       int
	// ids is, for an indexed cache, each staged object's id in the
	// Indexer's keyTable (noID: it has no index value), in staging order;
	// pend, per index function, the ids of each value not filed yet
	// (Indexer.filePending).
	ids  []uint32
	pend []map[string][]uint32
}

func (s *stagedItems[T]) add(key string, obj T) {
	if len(s.keys) == 1<<s.bits {
		s.pages = append(s.pages, decodedPage(s.keys, s.objs))
		s.keys = make([]string, 0, 1<<s.bits)
		s.objs = make([]T, 0, 1<<s.bits)
	}
	s.keys = append(s.keys, key)
	s.objs = append(s.objs, obj)
	s.n++
}

// file returns the staged objects as an item table: a base, or a map of
// at least mapSize when they are few or a key was staged twice (the later
// object wins, as it would have in a map). For each object a later one of
// the same key replaces in the map, dropped (if not nil) is called with
// its key, the object and its place in the staging order.
func (s *stagedItems[T]) file(mapSize int, dropped func(key string, obj T, entry int)) items[T] {
	pages := s.pages
	if len(s.keys) > 0 {
		pages = append(pages, decodedPage(s.keys, s.objs))
	}
	if s.n >= s.minBase {
		if b, err := buildItemBase(pages, nil, s.bits); err == nil {
			return items[T]{m: make(map[string]T, mapSize), base: b}
		}
	}
	m := make(map[string]T, max(mapSize, s.n))
	var from map[string]int // with dropped: the entry of each key's object
	if dropped != nil {
		from = make(map[string]int, s.n)
	}
	entry := 0
	for _, p := range pages {
		objs := p.objects()
		for i := range p.n {
			k := p.key(i)
			if from != nil {
				if e, ok := from[k]; ok {
					dropped(k, m[k], e)
				}
				from[k] = entry
			}
			m[k] = objs[i]
			entry++
		}
	}
	return items[T]{m: m}
}

func (t *items[T]) get(key string) (T, bool) {
	if b := t.base; b != nil {
		if pos, ok := b.find(key); ok {
			if b.isDead(pos) {
				var zero T
				return zero, false
			}
			return *b.obj(pos), true
		}
	}
	obj, ok := t.m[key]
	return obj, ok
}

// getOwned is get, except that an object still as a checkpoint loaded it,
// its strings sharing the checkpoint's block, is decoded again into
// strings of its own: for a caller that keeps parts of it in a new object
// (Event.Fill copies unchanged values into the next state), which would
// otherwise keep the whole block alive for as long as that object lives,
// after its page moved off the block.
func (t *items[T]) getOwned(key string) (T, bool) {
	if b := t.base; b != nil {
		if pos, ok := b.find(key); ok {
			if b.isDead(pos) {
				var zero T
				return zero, false
			}
			return b.ownedObj(pos), true
		}
	}
	obj, ok := t.m[key]
	return obj, ok
}

// at is get for a key known to be there (an index names it).
func (t *items[T]) at(key string) T {
	obj, _ := t.get(key)
	return obj
}

// swap stores obj under key and returns what was there: one lookup in
// the base where get and set would make two.
func (t *items[T]) swap(key string, obj T) (old T, existed bool) {
	if b := t.base; b != nil {
		if pos, ok := b.find(key); ok {
			return b.put(pos, obj)
		}
	}
	old, existed = t.m[key]
	t.m[key] = obj
	return old, existed
}

func (t *items[T]) set(key string, obj T) {
	if b := t.base; b != nil {
		if pos, ok := b.find(key); ok {
			b.put(pos, obj)
			return
		}
	}
	t.m[key] = obj
}

func (t *items[T]) del(key string) {
	b := t.base
	if b == nil {
		delete(t.m, key)
		return
	}
	pos, ok := b.find(key)
	if !ok {
		delete(t.m, key)
		return
	}
	b.kill(pos)
	if b.dead*4 > b.n {
		t.compact()
	}
}

// compact files the live objects, the base's and the map's, into a new
// base (into a map when they fill less than two pages) once more than a
// quarter of the base is dead, so that the table holds little more than
// its live objects however its keys churn: a pass over n objects after
// n/4 deletes, a few steps per delete. The base's pages move off their
// checkpoint blocks first, since the new pages do not track them.
func (t *items[T]) compact() {
	b := t.base
	b.unpinAll()
	st := &stagedItems[T]{bits: b.pageBits, minBase: 2 << b.pageBits}
	for k, o := range t.all {
		st.add(k, o)
	}
	*t = st.file(0, nil)
}

func (t *items[T]) len() int {
	n := len(t.m)
	if b := t.base; b != nil {
		n += b.n - b.dead
	}
	return n
}

// keys yields every key and its position in the base, or -1 for the
// map's: the base's live ones (decoding no object), then the map's.
func (t *items[T]) keys(yield func(string, int) bool) {
	if b := t.base; b != nil {
		for pos := range b.n {
			if !b.isDead(pos) && !yield(b.key(pos), pos) {
				return
			}
		}
	}
	for k := range t.m {
		if !yield(k, -1) {
			return
		}
	}
}

// all yields every key and object: the base's live ones, then the map's.
func (t *items[T]) all(yield func(string, T) bool) {
	if b := t.base; b != nil {
		for k, o := range b.all {
			if !yield(k, o) {
				return
			}
		}
	}
	for k, o := range t.m {
		if !yield(k, o) {
			return
		}
	}
}
