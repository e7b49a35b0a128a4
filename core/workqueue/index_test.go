package workqueue

import (
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// TestKeyIndexAgainstMap runs random inserts and deletes against a Go map.
// A constant hash function variant forces long probe runs so backward-shift
// deletion is exercised across wrap-around, not just in the easy case, and
// equal stored hash halves make every probe compare keys through the
// states.
func TestKeyIndexAgainstMap(t *testing.T) {
	for _, tc := range []struct {
		collide bool
		keys    int
	}{{false, 3000}, {true, 10}, {true, 40}} {
		collide, keys := tc.collide, tc.keys
		x := &keyIndex[int]{}
		tbl := &stateTable[int]{}
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
		for op := range 200000 {
			k := r.IntN(keys)
			switch r.IntN(3) {
			case 0, 1:
				slot, found := x.findOrInsert(h(k), k, tbl)
				if !found {
					idx := tbl.alloc()
					tbl.at(idx).key = k
					slot.ref = idx + 1
				}
				got := slot.ref - 1
				want, ok := ref[k]
				if !ok {
					want = got
					ref[k] = want
				}
				if got != want || tbl.at(got).key != k {
					t.Fatalf("collide=%v op %d: findOrInsert(%d) = %d (key %d), want %d", collide, op, k, got, tbl.at(got).key, want)
				}
			case 2:
				x.delete(h(k), k, tbl)
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
					if got := x.find(h(k), k, tbl); got != want {
						t.Fatalf("collide=%v op %d: find(%d) = %d, want %d", collide, op, k, got, want)
					}
				}
			}
		}
	}
}

// TestStateLoc: chunk c holds 64<<(c-1) states (64 for chunk 0), one after
// the other, so every index has one place and chunks never overlap.
func TestStateLoc(t *testing.T) {
	next := 0
	for c := range numChunks {
		for off := range min(chunkLen(c), 1<<12) {
			idx := int32(next + off)
			if gc, goff := stateLoc(idx); gc != c || goff != off {
				t.Fatalf("stateLoc(%d) = %d, %d; want %d, %d", idx, gc, goff, c, off)
			}
		}
		next += chunkLen(c)
		if next > 1<<31-1 {
			break
		}
		if gc, goff := stateLoc(int32(next - 1)); gc != c || goff != chunkLen(c)-1 {
			t.Fatalf("last of chunk %d: stateLoc = %d, %d", c, gc, goff)
		}
	}
}
