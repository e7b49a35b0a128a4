package conformance_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/memory"
)

// item is what the adapter under test produces; the suite only needs to
// read back the version it wrote.
type item struct{ Version int }

// itemSource is a conformance.Source. A real adapter's test would open a
// fresh prefix, table, bucket or namespace on its server here.
type itemSource struct{ s *memory.Source[item] }

func (x itemSource) ListerWatcher() core.ListerWatcher[item] { return x.s }
func (x itemSource) Version(it item) int                     { return it.Version }

func (x itemSource) Put(_ context.Context, key string, n int) (core.ResourceVersion, error) {
	return x.s.Put(key, item{n}), nil
}

func (x itemSource) Delete(_ context.Context, key string) (core.ResourceVersion, error) {
	rv, _ := x.s.Delete(key)
	return rv, nil
}

// Expire is etcd's Compact, dropping a Postgres slot, purging a stream.
func (x itemSource) Expire(context.Context) error { return x.s.Compact(x.s.HeadRV()) }

// PutUnwatched writes somewhere the ListerWatcher does not watch; a source
// with no such place returns conformance.ErrNotSupported.
func (x itemSource) PutUnwatched(context.Context) (core.ResourceVersion, error) {
	return x.s.Advance(), nil
}

// TestItemSourceConformance is how an adapter runs the suite.
func TestItemSourceConformance(t *testing.T) {
	conformance.Run(t, conformance.Capabilities{
		DeletesCarryObject:  true,
		DistinguishesUpdate: true,
		ExactWriteRV:        true,
	}, func(t *testing.T) conformance.Source[item] {
		return itemSource{memory.New[item](memory.Options{})}
	})
}

// The suite drives a Source through its writes and reads the results back
// through the ListerWatcher, comparing versions and RVs.
func ExampleSource() {
	ctx := context.Background()
	var src conformance.Source[item] = itemSource{memory.New[item](memory.Options{})}
	put, _ := src.Put(ctx, "alpha", 7)
	listRV, _ := src.ListerWatcher().List(ctx, core.ListOptions[item]{Emit: func(ev core.Event[item]) error {
		fmt.Println(ev.Key, "version", src.Version(ev.Object))
		return nil
	}})
	fmt.Println("List at or after the write:", listRV >= put)
	// Output:
	// alpha version 7
	// List at or after the write: true
}
