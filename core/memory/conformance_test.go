//go:build conformance_push_todo

// Built only with -tags conformance_push_todo until core/conformance moves
// to conformance.Harness and the push-style watch (the kit helper's step):
// the old conformance.Source does not compile against the new contract.

package memory_test

import (
	"context"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/memory"
)

// confSource adapts a memory.Source to the conformance suite; Advance plays
// the write outside the watched set.
type confSource struct{ s *memory.Source[obj] }

func (c confSource) ListerWatcher() core.ListerWatcher[obj] { return c.s }

func (c confSource) Put(_ context.Context, key string, n int) (core.ResourceVersion, error) {
	return c.s.Put(key, obj{n}), nil
}

func (c confSource) Delete(_ context.Context, key string) (core.ResourceVersion, error) {
	rv, _ := c.s.Delete(key)
	return rv, nil
}

func (c confSource) Version(o obj) int { return o.N }

func (c confSource) PutAll(_ context.Context, keys []string, n int) (core.ResourceVersion, error) {
	ops := make([]memory.Op[obj], len(keys))
	for i, k := range keys {
		ops[i] = memory.PutOp(k, obj{n})
	}
	return c.s.Apply(ops...)
}

func (c confSource) Expire(context.Context) error { return c.s.Compact(c.s.HeadRV()) }

func (c confSource) PutUnwatched(context.Context) (core.ResourceVersion, error) {
	return c.s.Advance(), nil
}

func TestConformance(t *testing.T) {
	caps := conformance.Capabilities{
		DeletesCarryObject:  true,
		DistinguishesUpdate: true,
		ExactWriteRV:        true,
		StrictGoroutines:    true,
	}
	conformance.Run(t, caps, func(t *testing.T) conformance.Source[obj] {
		return confSource{memory.New[obj](memory.Options{})}
	})
}

// Small batches split the history across many Next calls, which is where
// ordering across batches and transaction boundaries can go wrong.
func TestConformanceSmallBatches(t *testing.T) {
	caps := conformance.Capabilities{DeletesCarryObject: true, DistinguishesUpdate: true, ExactWriteRV: true}
	conformance.Run(t, caps, func(t *testing.T) conformance.Source[obj] {
		return confSource{memory.New[obj](memory.Options{MaxBatch: 1})}
	})
}

// Deletes without the last object must still pass with the matching
// capability: the key alone is what the contract requires.
func TestConformanceDeletesWithoutObject(t *testing.T) {
	caps := conformance.Capabilities{DistinguishesUpdate: true, ExactWriteRV: true}
	conformance.Run(t, caps, func(t *testing.T) conformance.Source[obj] {
		return confSource{memory.New[obj](memory.Options{DeletesWithoutObject: true})}
	})
}
