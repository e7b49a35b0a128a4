package bench_test

import (
	"runtime"
	"strconv"
	"testing"

	"k8s.io/client-go/tools/cache"

	"github.com/dbinformer/dbinformer/core"
)

// item is a typical small cached value: what a decoded row or key holds.
type item struct {
	Name, Org, Team string
	N               int
}

func newItem(i int) (string, *item) {
	k := "namespace/object-" + strconv.Itoa(i)
	return k, &item{Name: k, Org: "org-" + strconv.Itoa(i%100), Team: "team-" + strconv.Itoa(i%1000), N: i}
}

// BenchmarkMemoryPerObject: the live heap, after GC, per cached object of
// 1,000,000 (key string and value included, as a user pays for both) in
// our Indexer with two indexes, in ours without indexes (the difference is
// what the indexes cost), in client-go's cache.NewIndexer with the same two
// indexes, and in a plain map[string]*item.
func BenchmarkMemoryPerObject(b *testing.B) {
	n := size(1_000_000, 20_000)
	orgTeam := func(o *item) ([]string, []string) { return []string{o.Org}, []string{o.Team} }
	cases := []struct {
		name string
		fill func() (any, func(string) bool)
	}{
		{"ours", func() (any, func(string) bool) {
			idx := core.NewIndexer(core.Indexers[*item]{
				"org":  func(o *item) ([]string, error) { v, _ := orgTeam(o); return v, nil },
				"team": func(o *item) ([]string, error) { _, v := orgTeam(o); return v, nil },
			})
			for i := range n {
				k, o := newItem(i)
				if err := idx.Add(k, o); err != nil {
					b.Fatal(err)
				}
			}
			return idx, func(k string) bool { _, ok := idx.Get(k); return ok }
		}},
		{"ours-noindex", func() (any, func(string) bool) {
			idx := core.NewIndexer[*item](nil)
			for i := range n {
				k, o := newItem(i)
				if err := idx.Add(k, o); err != nil {
					b.Fatal(err)
				}
			}
			return idx, func(k string) bool { _, ok := idx.Get(k); return ok }
		}},
		{"clientgo", func() (any, func(string) bool) {
			idx := cache.NewIndexer(func(o any) (string, error) { return o.(*item).Name, nil }, cache.Indexers{
				"org":  func(o any) ([]string, error) { v, _ := orgTeam(o.(*item)); return v, nil },
				"team": func(o any) ([]string, error) { _, v := orgTeam(o.(*item)); return v, nil },
			})
			for i := range n {
				_, o := newItem(i)
				if err := idx.Add(o); err != nil {
					b.Fatal(err)
				}
			}
			return idx, func(k string) bool { _, ok, _ := idx.GetByKey(k); return ok }
		}},
		{"map", func() (any, func(string) bool) {
			m := make(map[string]*item)
			for i := range n {
				k, o := newItem(i)
				m[k] = o
			}
			return m, func(k string) bool { _, ok := m[k]; return ok }
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				before := liveHeap()
				store, has := c.fill()
				after := liveHeap()
				if k, _ := newItem(n - 1); !has(k) {
					b.Fatalf("%s lost key %s", c.name, k)
				}
				runtime.KeepAlive(store)
				b.ReportMetric(float64(int64(after)-int64(before))/float64(n), "B/object")
			}
		})
	}
}
