package conformance_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/memory"
)

// item is what the adapter under test produces; the suite only needs to
// read back the version it wrote.
type item struct{ Version int64 }

// itemHarness is a conformance.Harness. A real adapter's harness would open
// a fresh prefix, table, bucket or namespace on its server here, and write
// to the server directly rather than through the ListerWatcher.
type itemHarness struct{ s *memory.Source[item] }

func (x itemHarness) ListerWatcher() driver.ListerWatcher[item] { return x.s }
func (x itemHarness) Version(it item) int64                     { return it.Version }

func (x itemHarness) Put(_ context.Context, key string, n int64) (core.ResourceVersion, error) {
	return x.s.Put(key, item{n}), nil
}

func (x itemHarness) Delete(_ context.Context, key string) (core.ResourceVersion, error) {
	rv, _ := x.s.Delete(key)
	return rv, nil
}

// Expire (conformance.Expirer) is etcd's Compact, dropping a Postgres slot,
// purging a stream. A harness that cannot expire leaves the method out.
func (x itemHarness) Expire(context.Context) error { return x.s.Compact(x.s.HeadRV()) }

// PutUnwatched (conformance.Unwatched) writes somewhere the ListerWatcher
// does not watch.
func (x itemHarness) PutUnwatched(context.Context) (core.ResourceVersion, error) {
	return x.s.Advance(), nil
}

// PutAll (conformance.Transactor) writes several keys in one transaction.
func (x itemHarness) PutAll(_ context.Context, keys []string, n int64) (core.ResourceVersion, error) {
	ops := make([]memory.Op[item], 0, len(keys))
	for _, k := range keys {
		ops = append(ops, memory.PutOp(k, item{n}))
	}
	return x.s.Apply(ops...)
}

var (
	_ conformance.Harness[item] = itemHarness{}
	_ conformance.Expirer       = itemHarness{}
	_ conformance.Unwatched     = itemHarness{}
	_ conformance.Transactor    = itemHarness{}
)

// TestItemConformance is how an adapter runs the suite.
func TestItemConformance(t *testing.T) {
	conformance.Run(t, conformance.Capabilities{
		DeletesCarryObject:  true,
		DistinguishesUpdate: true,
		ExactWriteRV:        true,
		StrictGoroutines:    true,
	}, func(t *testing.T) conformance.Harness[item] {
		return itemHarness{memory.New[item](memory.Options{})}
	})
}

// The suite drives a Harness through its writes and reads the results back
// through the ListerWatcher, comparing versions and RVs.
func ExampleHarness() {
	ctx := context.Background()
	var h conformance.Harness[item] = itemHarness{memory.New[item](memory.Options{})}
	put, _ := h.Put(ctx, "alpha", 7)
	listRV, _ := h.ListerWatcher().List(ctx, driver.ListSink[item]{Emit: func(ev driver.Event[item]) error {
		fmt.Println(ev.Key, "version", h.Version(ev.Object))
		return nil
	}})
	fmt.Println("List at or after the write:", listRV >= put)
	// Output:
	// alpha version 7
	// List at or after the write: true
}
