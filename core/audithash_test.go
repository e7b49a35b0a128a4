package core

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// hashSet answers exactly as a map would, for uniform hashes, clustered
// ones and duplicates.
func TestHashSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 100, 10000} {
		for _, gen := range []func() uint64{
			rng.Uint64,
			func() uint64 { return rng.Uint64N(50) }, // dense, many duplicates
			func() uint64 { return 1<<63 + rng.Uint64N(1000)*7 }, // clustered
		} {
			var s hashSet
			in := map[uint64]bool{}
			for range n {
				h := gen()
				s.add(h)
				in[h] = true
			}
			s.seal()
			probe := slices.Clone(s.h)
			for range 1000 {
				probe = append(probe, gen(), rng.Uint64())
			}
			probe = append(probe, 0, ^uint64(0))
			for _, h := range probe {
				if got := s.has(h); got != in[h] {
					t.Fatalf("n=%d: has(%d) = %v, want %v", n, h, got, in[h])
				}
			}
		}
	}
}

func FuzzHashSet(f *testing.F) {
	f.Add([]byte{1, 2, 3, 255, 0, 7})
	f.Fuzz(func(t *testing.T, b []byte) {
		var s hashSet
		in := map[uint64]bool{}
		for i := 0; i+1 < len(b); i += 2 {
			h := uint64(b[i])<<56 | uint64(b[i+1])
			s.add(h)
			in[h] = true
		}
		s.seal()
		for i := range b {
			h := uint64(b[i])<<56 | uint64(i)
			if s.has(h) != in[h] {
				t.Fatalf("has(%x) = %v", h, !in[h])
			}
		}
	})
}
