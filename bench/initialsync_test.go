package bench_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// encodeItem writes item i as JSON into buf, the way a source hands over
// bytes that the adapter decodes.
func encodeItem(buf []byte, i int) []byte {
	buf = append(buf[:0], `{"Name":"namespace/object-`...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	buf = append(buf, `","Org":"org-`...)
	buf = strconv.AppendInt(buf, int64(i%100), 10)
	buf = append(buf, `","Team":"team-`...)
	buf = strconv.AppendInt(buf, int64(i%1000), 10)
	buf = append(buf, `","N":`...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	return append(buf, '}')
}

// decodeItems decodes n items from one reused buffer, as an adapter reads
// rows or values one by one, and hands each to emit.
func decodeItems(n int, emit func(key string, o *item) error) error {
	var buf []byte
	for i := range n {
		buf = encodeItem(buf, i)
		o := new(item)
		if err := json.Unmarshal(buf, o); err != nil {
			return err
		}
		if err := emit(o.Name, o); err != nil {
			return err
		}
	}
	return nil
}

// decodingLW lists n decoded items and then watches an idle source: the
// list is the whole workload, and nothing of it exists before List runs.
type decodingLW struct{ n int }

func (s decodingLW) List(ctx context.Context, sink driver.ListSink[*item]) (core.ResourceVersion, error) {
	err := decodeItems(s.n, func(key string, o *item) error {
		return sink.Emit(driver.Event[*item]{Type: driver.Added, Key: key, Object: o, HasObject: true, RV: 1})
	})
	return 1, err
}

func (decodingLW) Watch(ctx context.Context, _ core.ResourceVersion, _ driver.WatchOptions[*item]) error {
	<-ctx.Done()
	return driver.Stopped(ctx)
}

// BenchmarkInitialSync: the peak heap while an informer lists and caches
// 1,000,000 objects decoded from bytes, against the peak heap of a plain
// loop that decodes the same objects into a map, in the same process with
// the same GC settings. The informer's extra is whatever it holds beside
// the cache while the list streams in (before the redesign: the whole list
// in the reflector, again in the queue, and a map of its keys).
// "ours-handler" adds one handler that counts its calls; "ours-indexed"
// has two index functions (org and team) and no handler. Each side's time
// is reported too (<side>-s).
func BenchmarkInitialSync(b *testing.B) {
	n := size(1_000_000, 20_000)
	var keep any // what the last run built, dropped before the next
	informer := func(withHandler bool, indexers core.Indexers[*item]) func() {
		return func() {
			inf := core.NewSharedIndexInformer[*item](decodingLW{n: n}, core.InformerOptions[*item]{Name: "bench", Indexers: indexers})
			var calls atomic.Int64
			var reg *core.Registration[*item]
			if withHandler {
				var err error
				reg, err = inf.AddEventHandler(core.ResourceEventHandlerFuncs[*item]{
					AddFunc: func(string, *item, bool) { calls.Add(1) },
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- inf.Run(ctx) }()
			var err error
			if reg != nil {
				err = reg.WaitForCacheSync(ctx)
			} else {
				err = inf.WaitForCacheSync(ctx)
			}
			if err != nil {
				b.Fatal(err)
			}
			if got := inf.Lister().Len(); got != n {
				b.Fatalf("cached %d objects, want %d", got, n)
			}
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			keep = inf
		}
	}
	sides := []side{
		{name: "ours", n: n, unit: "object", peak: true, run: informer(false, nil)},
		{name: "map", n: n, unit: "object", peak: true, run: func() {
			m := make(map[string]*item)
			if err := decodeItems(n, func(k string, o *item) error { m[k] = o; return nil }); err != nil {
				b.Fatal(err)
			}
			keep = m
		}},
		{name: "ours-handler", n: n, unit: "object", peak: true, run: informer(true, nil)},
		{name: "ours-indexed", n: n, unit: "object", peak: true, run: informer(false, core.Indexers[*item]{
			"org":  func(o *item) ([]string, error) { return []string{o.Org}, nil },
			"team": func(o *item) ([]string, error) { return []string{o.Team}, nil },
		})},
	}
	for i := range sides {
		sides[i].finish = func() { keep = nil }
	}
	alternate(b, 3, sides...)
	_ = keep
}
