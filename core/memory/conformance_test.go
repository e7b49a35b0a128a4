package memory_test

import (
	"context"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/memory"
)

// harness adapts a memory.Source to the conformance suite; Advance plays
// the write outside the watched set.
type harness struct{ s *memory.Source[obj] }

var (
	_ conformance.Harness[obj] = harness{}
	_ conformance.Expirer      = harness{}
	_ conformance.Unwatched    = harness{}
	_ conformance.Transactor   = harness{}
)

func (h harness) ListerWatcher() driver.ListerWatcher[obj] { return h.s }

func (h harness) Put(_ context.Context, key string, n int64) (core.ResourceVersion, error) {
	return h.s.Put(key, obj{int(n)}), nil
}

func (h harness) Delete(_ context.Context, key string) (core.ResourceVersion, error) {
	rv, _ := h.s.Delete(key)
	return rv, nil
}

func (h harness) Version(o obj) int64 { return int64(o.N) }

func (h harness) PutAll(_ context.Context, keys []string, n int64) (core.ResourceVersion, error) {
	ops := make([]memory.Op[obj], len(keys))
	for i, k := range keys {
		ops[i] = memory.PutOp(k, obj{int(n)})
	}
	return h.s.Apply(ops...)
}

func (h harness) Expire(context.Context) error { return h.s.Compact(h.s.HeadRV()) }

func (h harness) PutUnwatched(context.Context) (core.ResourceVersion, error) {
	return h.s.Advance(), nil
}

func TestConformance(t *testing.T) {
	caps := conformance.Capabilities{
		DeletesCarryObject:  true,
		DistinguishesUpdate: true,
		ExactWriteRV:        true,
		StrictGoroutines:    true,
	}
	conformance.Run(t, caps, func(t *testing.T) conformance.Harness[obj] {
		return harness{memory.New[obj](memory.Options{})}
	})
}

// Small batches split the history across many Emit calls, which is where
// ordering across batches and transaction boundaries can go wrong.
func TestConformanceSmallBatches(t *testing.T) {
	caps := conformance.Capabilities{DeletesCarryObject: true, DistinguishesUpdate: true, ExactWriteRV: true}
	conformance.Run(t, caps, func(t *testing.T) conformance.Harness[obj] {
		return harness{memory.New[obj](memory.Options{MaxBatch: 1})}
	})
}

// Deletes without the last object must still pass with the matching
// capability: the key alone is what the contract requires.
func TestConformanceDeletesWithoutObject(t *testing.T) {
	caps := conformance.Capabilities{DistinguishesUpdate: true, ExactWriteRV: true}
	conformance.Run(t, caps, func(t *testing.T) conformance.Harness[obj] {
		return harness{memory.New[obj](memory.Options{DeletesWithoutObject: true})}
	})
}

func TestAuditConformance(t *testing.T) {
	conformance.RunAudit(t, conformance.Capabilities{}, func(t *testing.T) conformance.Harness[obj] {
		return harness{memory.New[obj](memory.Options{})}
	})
}
