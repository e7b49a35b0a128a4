package conformance

import (
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/filter"
)

// filteredMem is the memory source behind filter.Wrap: in- keys at even
// versions match.
type filteredMem struct{ memHarness }

func (filteredMem) Matches(key string, n int64) bool {
	return strings.HasPrefix(key, "in.") && n%2 == 0
}

func TestRunFilteredOverFilterWrap(t *testing.T) {
	RunFiltered(t, controlCaps, func(t *testing.T) Harness[obj] {
		s := memory.New[obj](memory.Options{MaxBatch: 3})
		f := filter.MustNew[obj](filter.And(filter.Prefix(filter.Key, "in."), filter.Where("even version", func(o obj) bool { return o.N%2 == 0 })))
		return filteredMem{memHarness{s: s, lw: filter.Wrap(s, f)}}
	})
}
