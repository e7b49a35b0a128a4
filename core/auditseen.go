package core

import (
	"hash/maphash"
	"math/bits"
)

// auditSeen is an audit run's set of the keys the source's read delivered
// (see auditrun.go), kept where the cache keeps them. A key the cache
// holds in its base (itemtable.go) is marked by its position there: a bit
// a position, found by the lookup the row's comparison makes anyway, and
// stable for the base's life (a deleted key keeps its position, and comes
// back to it). Every other key (in the cache's map, not cached, not
// decoded) goes in hashes, a 64-bit hash of this run's seed, as the whole
// set did before: two keys of a million share one with odds of about 1 in
// 3·10⁷, and then an extra key can go unseen for one run (never a false
// one reported). So a cache filed from a list or a checkpoint costs a bit
// a key (a 1M-row cache: 125 KiB, where hashes took 8 MB), and the pass
// over the cache for extra keys reads the bits in order instead of
// searching a hash per key.
//
// The Indexer updates the set when it replaces its base (a compaction):
// the positions then name nothing, so the marked keys move into hashes
// (rebase), under the cache's write lock. The set is read and written
// under the cache's lock (read lock for the run's own lookups: the run is
// its only writer then).
type auditSeen[T any] struct {
	base *itemBase[T] // the base bits marks positions of; nil before the first
	bits []uint64
	// next is the position after the last key found in base: where the
	// next row's key is when the source reads in the order the cache was
	// filed in (a Postgres table's physical order, an etcd range's key
	// order, a stream's sequence), found by one comparison of keys read
	// in order instead of a hash and a probe of the table at random.
	next   int
	hashes hashSet
	seed   maphash.Seed
}

func newAuditSeen[T any]() *auditSeen[T] { return &auditSeen[T]{seed: maphash.MakeSeed()} }

func (m *auditSeen[T]) addKey(key string) { m.hashes.add(maphash.String(m.seed, key)) }

// mark notes the key at pos of b.
func (m *auditSeen[T]) mark(b *itemBase[T], pos int) {
	if m.base != b {
		m.rebase()
		m.base, m.bits = b, make([]uint64, (b.n+63)/64)
	}
	m.bits[pos>>6] |= 1 << (pos & 63)
}

// rebase moves the keys marked in a base the cache no longer uses into
// hashes.
func (m *auditSeen[T]) rebase() {
	b := m.base
	if b == nil {
		return
	}
	for w, word := range m.bits {
		for word != 0 {
			m.addKey(b.key(w<<6 + bits.TrailingZeros64(word)))
			word &= word - 1
		}
	}
	m.base, m.bits = nil, nil
}

// hashed says whether key is in m's hashes.
func (m *auditSeen[T]) hashed(key string) bool {
	return len(m.hashes.h) > 0 && m.hashes.has(maphash.String(m.seed, key))
}

// watchSeen hands the Indexer the running audit's set (nil: none), so that
// it rebases the set when it replaces its base.
func (s *Indexer[T]) watchSeen(m *auditSeen[T]) {
	s.mu.Lock()
	s.seen = m
	s.mu.Unlock()
}

// baseReplacedLocked is called when items may have a new base.
func (s *Indexer[T]) baseReplacedLocked() {
	if m := s.seen; m != nil && m.base != nil && m.base != s.items.base {
		m.rebase()
	}
}

// auditGet is Get for a row of an audit's read: it also adds key to m.
func (s *Indexer[T]) auditGet(key string, m *auditSeen[T]) (T, bool) {
	s.rlock()
	defer s.mu.RUnlock()
	if b := s.items.base; b != nil {
		pos, ok := m.next, false
		if b == m.base && pos < b.n && b.key(pos) == key {
			ok = true
		} else {
			pos, ok = b.find(key)
		}
		if ok {
			m.mark(b, pos)
			m.next = pos + 1
			if b.isDead(pos) {
				var zero T
				return zero, false
			}
			return *b.obj(pos), true
		}
	}
	m.addKey(key)
	obj, ok := s.items.m[key]
	return obj, ok
}

// auditUnseenLen is how many keys of the cache a run's hashes may need to
// hold: those outside its base.
func (s *Indexer[T]) auditUnseenLen() int {
	s.rlock()
	defer s.mu.RUnlock()
	return len(s.items.m)
}

// auditUnseen calls f, under the read lock, with each cached key not in m.
// m must be detached (watchSeen(nil)) and its hashes sealed.
func (s *Indexer[T]) auditUnseen(m *auditSeen[T], f func(key string)) {
	s.rlock()
	defer s.mu.RUnlock()
	if m.base != nil && m.base != s.items.base {
		m.rebase() // replaced since it was detached
	}
	m.hashes.seal() // a no-op unless rebase added to it
	if b := s.items.base; b != nil {
		for w := range (b.n + 63) / 64 {
			// Live positions of word w not marked.
			left := ^uint64(0)
			if b.deadBits != nil {
				left &^= b.deadBits[w]
			}
			if m.base == b {
				left &^= m.bits[w]
			}
			if rest := b.n - w<<6; rest < 64 {
				left &= 1<<rest - 1
			}
			for left != 0 {
				k := b.key(w<<6 + bits.TrailingZeros64(left))
				left &= left - 1
				if !m.hashed(k) {
					f(k)
				}
			}
		}
	}
	for k := range s.items.m {
		if !m.hashed(k) {
			f(k)
		}
	}
}
