package core

import (
	"math/bits"
	"slices"
)

// hashSet is the audit's set of seen key hashes for the keys it cannot
// mark by position (auditSeen): 8 bytes a key, a third of a map's, sorted
// once all are in. maphash values are uniform, so has uses interpolation
// search (a handful of probes for any size, where a binary search takes
// twenty for a million): the cache's pass makes one lookup per such key
// under the cache's read lock, and that lock is what the informer waits
// for.
type hashSet struct {
	h      []uint64
	sorted int // h[:sorted] is sorted
}

func (s *hashSet) add(h uint64) { s.h = append(s.h, h) }

// seal sorts what was added since the last seal; has needs it.
func (s *hashSet) seal() {
	if s.sorted != len(s.h) {
		slices.Sort(s.h)
		s.sorted = len(s.h)
	}
}

func (s *hashSet) has(h uint64) bool {
	lo, hi := 0, len(s.h)-1
	for lo <= hi {
		a, b := s.h[lo], s.h[hi]
		if h < a || h > b {
			return false
		}
		if a == b {
			return true // h == a
		}
		// lo + (h-a)·(hi-lo)/(b-a), exact in 128 bits: the high word of
		// the product is below b-a, so the division cannot overflow.
		ph, pl := bits.Mul64(h-a, uint64(hi-lo))
		q, _ := bits.Div64(ph, pl, b-a)
		i := lo + int(q)
		switch v := s.h[i]; {
		case v == h:
			return true
		case v < h:
			lo = i + 1
		default:
			hi = i - 1
		}
	}
	return false
}
