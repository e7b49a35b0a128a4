package bench

import (
	"math/rand/v2"

	"github.com/dbinformer/dbinformer/core/driver"
)

// Change is one generated change of a key: Added for a key that is absent,
// Modified or Deleted for one that is present. Every change is therefore
// delivered to a handler exactly once by any informer, which is what lets a
// benchmark wait for "all of them".
type Change struct {
	Type driver.EventType
	Key  int
}

// Changes returns n changes over keys distinct keys: first one Added per
// key (up to n), then random keys, each deleted with probability 1/5 when
// present and re-added when absent. The same seed gives the same stream, so
// our pipeline and the reference see identical input.
func Changes(n, keys int, seed uint64) []Change {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	present := make([]bool, keys)
	out := make([]Change, 0, n)
	for k := 0; k < keys && len(out) < n; k++ {
		present[k] = true
		out = append(out, Change{Type: driver.Added, Key: k})
	}
	for len(out) < n {
		k := r.IntN(keys)
		switch {
		case !present[k]:
			present[k] = true
			out = append(out, Change{Type: driver.Added, Key: k})
		case r.IntN(5) == 0:
			present[k] = false
			out = append(out, Change{Type: driver.Deleted, Key: k})
		default:
			out = append(out, Change{Type: driver.Modified, Key: k})
		}
	}
	return out
}
