package workqueue

import (
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// TestKeyIndexAgainstMap runs random inserts and deletes against a Go map.
// A constant hash function variant forces long probe runs so backward-shift
// deletion is exercised across wrap-around, not just in the easy case.
func TestKeyIndexAgainstMap(t *testing.T) {
	for _, tc := range []struct {
		collide bool
		keys    int
	}{{false, 3000}, {true, 10}, {true, 40}} {
		collide, keys := tc.collide, tc.keys
		x := &keyIndex[int]{}
		seed := maphash.MakeSeed()
		h := func(k int) uint64 {
			if collide {
				// Five homes at the very end of the table (60..64 wraps for
				// 64 slots, 12..15 and 0 for 16), so runs wrap around.
				return uint64(k%5) + 60
			}
			return maphash.Comparable(seed, k)
		}
		ref := map[int]int32{}
		r := rand.New(rand.NewPCG(1, uint64(keys)))
		next := int32(0)
		for op := range 200000 {
			k := r.IntN(keys)
			switch r.IntN(3) {
			case 0, 1:
				slot, found := x.findOrInsert(h(k), k)
				if !found {
					next++
					slot.ref = next + 1
				}
				got := slot.ref - 1
				want, ok := ref[k]
				if !ok {
					want = next
					ref[k] = want
				}
				if got != want {
					t.Fatalf("collide=%v op %d: findOrInsert(%d) = %d, want %d", collide, op, k, got, want)
				}
			case 2:
				x.delete(h(k), k)
				delete(ref, k)
			}
			if x.len() != len(ref) {
				t.Fatalf("collide=%v op %d: len %d, want %d", collide, op, x.len(), len(ref))
			}
			if op%997 == 0 {
				for k := range keys {
					want, ok := ref[k]
					if !ok {
						want = -1
					}
					if got := x.find(h(k), k); got != want {
						t.Fatalf("collide=%v op %d: find(%d) = %d, want %d", collide, op, k, got, want)
					}
				}
			}
		}
	}
}
