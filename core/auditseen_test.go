package core

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// An audit's seen set answers as a plain set of keys would, while the
// cache it marks positions of is staged into bases of a few keys, written
// to, deleted from (compacted into new bases, the set's positions moving
// into its hashes) and read in any order: auditGet returns what Get
// returns, and auditUnseen names exactly the cached keys not seen.
func TestAuditSeen(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 37))
		s := NewIndexer[int](nil)
		s.stageBits, s.stageMinBase = 1+uint(seed%3), 3
		model := map[string]int{}
		keys := 8 + int(seed%40)
		key := func() string { return "k" + strconv.Itoa(rng.IntN(keys)) }
		// A list staged into a base, in order, most of the keys.
		s.update(func(tx indexTx[int]) {
			for k := range keys {
				if rng.IntN(4) > 0 {
					ks := "k" + strconv.Itoa(k)
					tx.stage(ks, k)
					model[ks] = k
				}
			}
		})
		m := newAuditSeen[int]()
		s.watchSeen(m)
		seen := map[string]bool{}
		// Rows in the order filed, with jumps, among writes and deletes.
		next := 0
		for range 6 * keys {
			switch op := rng.IntN(10); {
			case op < 5:
				k := "k" + strconv.Itoa(next%keys)
				if rng.IntN(4) == 0 {
					k = key()
				}
				next++
				got, ok := s.auditGet(k, m)
				want, wok := model[k]
				if ok != wok || got != want {
					t.Fatalf("seed %d: auditGet(%s) = %d, %v; want %d, %v", seed, k, got, ok, want, wok)
				}
				seen[k] = true
			case op < 7:
				k := key()
				must(t, s.Delete(k))
				delete(model, k)
			case op < 9:
				k, v := key(), rng.IntN(100)
				must(t, s.Add(k, v))
				model[k] = v
			default:
				// A key the source has that the cache never held.
				k := "x" + strconv.Itoa(rng.IntN(5))
				if _, ok := s.auditGet(k, m); ok {
					t.Fatalf("seed %d: auditGet(%s) found a key never added", seed, k)
				}
				seen[k] = true
			}
		}
		s.watchSeen(nil)
		m.hashes.seal()
		if rng.IntN(2) == 0 {
			// Deletes after the set was detached: a base replaced then is
			// found by auditUnseen.
			for range keys / 2 {
				k := key()
				must(t, s.Delete(k))
				delete(model, k)
			}
		}
		var got, want []string
		s.auditUnseen(m, func(k string) { got = append(got, k) })
		for k := range model {
			if !seen[k] {
				want = append(want, k)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: unseen %v, want %v", seed, got, want)
		}
	}
}
