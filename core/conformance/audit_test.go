package conformance

import (
	"testing"

	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/filter"
)

func TestRunAuditOverMemory(t *testing.T) {
	RunAudit(t, controlCaps, func(t *testing.T) Harness[obj] {
		s := memory.New[obj](memory.Options{MaxBatch: 3})
		return memHarness{s: s, lw: s}
	})
}

// A partial sync through filter.Wrap: the source's out. keys and odd
// versions are not the cache's business, and the audit must not count
// them.
func TestRunAuditOverFilterWrap(t *testing.T) {
	RunAudit(t, controlCaps, func(t *testing.T) Harness[obj] {
		s := memory.New[obj](memory.Options{MaxBatch: 3})
		f := filter.MustNew[obj](filter.And(filter.Prefix(filter.Key, "in."), filter.Where("even version", func(o obj) bool { return o.N%2 == 0 })))
		return filteredMem{memHarness{s: s, lw: filter.Wrap(s, f)}}
	})
}
