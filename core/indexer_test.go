package core

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

type user struct {
	Name   string
	Groups []string
}

func byGroup(u *user) ([]string, error) { return u.Groups, nil }

func sortedNames(us []*user) []string {
	out := make([]string, 0, len(us))
	for _, u := range us {
		out = append(out, u.Name)
	}
	sort.Strings(out)
	return out
}

func TestIndexerByIndexFollowsUpdatesAndDeletes(t *testing.T) {
	s := NewIndexer(Indexers[*user]{"group": byGroup})
	must(t, s.Add("a", &user{Name: "a", Groups: []string{"x", "y"}}))
	must(t, s.Add("b", &user{Name: "b", Groups: []string{"y"}}))
	got, err := s.ByIndex("group", "y")
	must(t, err)
	if n := sortedNames(got); !reflect.DeepEqual(n, []string{"a", "b"}) {
		t.Fatalf("ByIndex y = %v", n)
	}
	must(t, s.Add("a", &user{Name: "a", Groups: []string{"z"}}))
	if keys, _ := s.IndexKeys("group", "y"); !reflect.DeepEqual(keys, []string{"b"}) {
		t.Fatalf("IndexKeys y after update = %v", keys)
	}
	if vals := s.ListIndexFuncValues("group"); !reflect.DeepEqual(vals, []string{"y", "z"}) {
		t.Fatalf("values = %v, want the emptied x dropped", vals)
	}
	must(t, s.Delete("b"))
	if vals := s.ListIndexFuncValues("group"); !reflect.DeepEqual(vals, []string{"z"}) {
		t.Fatalf("values after delete = %v", vals)
	}
	same, err := s.Index("group", &user{Groups: []string{"z"}})
	must(t, err)
	if n := sortedNames(same); !reflect.DeepEqual(n, []string{"a"}) {
		t.Fatalf("Index = %v", n)
	}
	if _, err := s.ByIndex("nope", "x"); err == nil {
		t.Fatal("unknown index: want error")
	}
}

func TestIndexerFailingIndexLeavesStoreUnchanged(t *testing.T) {
	boom := errors.New("boom")
	s := NewIndexer(Indexers[*user]{
		"group": byGroup,
		"bad": func(u *user) ([]string, error) {
			if u.Name == "bad" {
				return nil, boom
			}
			return []string{u.Name}, nil
		},
	})
	must(t, s.Add("k", &user{Name: "ok", Groups: []string{"g"}}))
	err := s.Add("k", &user{Name: "bad", Groups: []string{"h"}})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("err = %v, want boom naming the key", err)
	}
	u, _ := s.Get("k")
	if u.Name != "ok" {
		t.Fatalf("object changed to %v", u.Name)
	}
	if keys, _ := s.IndexKeys("group", "g"); !reflect.DeepEqual(keys, []string{"k"}) {
		t.Fatalf("index changed: %v", keys)
	}
}

func TestIndexerReplaceAndAddIndexers(t *testing.T) {
	s := NewIndexer[*user](nil)
	must(t, s.Add("old", &user{Name: "old"}))
	must(t, replaceAll(s, map[string]*user{"a": {Name: "a", Groups: []string{"g"}}, "b": {Name: "b", Groups: []string{"g"}}}))
	if _, ok := s.Get("old"); ok {
		t.Fatal("Replace kept a key")
	}
	must(t, s.AddIndexers(Indexers[*user]{"group": byGroup}))
	if keys, _ := s.IndexKeys("group", "g"); !reflect.DeepEqual(keys, []string{"a", "b"}) {
		t.Fatalf("AddIndexers on a filled store: %v", keys)
	}
	if err := s.AddIndexers(Indexers[*user]{"group": byGroup}); err == nil {
		t.Fatal("duplicate indexer: want error")
	}
	if s.Len() != 2 || len(s.List()) != 2 || len(s.ListKeys()) != 2 {
		t.Fatal("Len/List/ListKeys disagree")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mapIndexer is the representation the indexes had before indexset.go, a
// map[value]map[key]struct{} per index under an RWMutex, kept as the
// reference of BenchmarkIndexer.
type mapIndexer struct {
	mu    sync.RWMutex
	items map[string]*user
	idx   map[string]map[string]struct{}
}

func (m *mapIndexer) add(key string, u *user) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.items[key]; ok {
		for _, v := range old.Groups {
			set := m.idx[v]
			delete(set, key)
			if len(set) == 0 {
				delete(m.idx, v)
			}
		}
	}
	for _, v := range u.Groups {
		set := m.idx[v]
		if set == nil {
			set = map[string]struct{}{}
			m.idx[v] = set
		}
		set[key] = struct{}{}
	}
	m.items[key] = u
}

func (m *mapIndexer) byIndex(value string) []*user {
	m.mu.RLock()
	defer m.mu.RUnlock()
	set := m.idx[value]
	out := make([]*user, 0, len(set))
	for k := range set {
		out = append(out, m.items[k])
	}
	return out
}

func (m *mapIndexer) indexKeys(value string) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	set := m.idx[value]
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// BenchmarkIndexer compares the Indexer with mapIndexer on 100,000 keys
// filed under values of 1,000, 10 and 1 key(s): ByIndex and IndexKeys of
// one value, and an update that moves a key to another value.
func BenchmarkIndexer(b *testing.B) {
	const n = 100_000
	key := func(i int) string { return "namespace/object-" + strconv.Itoa(i) }
	for _, per := range []int{1000, 10, 1} {
		group := func(i, shift int) []string { return []string{"v" + strconv.Itoa((i+shift)/per)} }
		ours := NewIndexer(Indexers[*user]{"group": byGroup})
		ref := &mapIndexer{items: map[string]*user{}, idx: map[string]map[string]struct{}{}}
		for i := range n {
			u := &user{Name: key(i), Groups: group(i, 0)}
			must(b, ours.Add(u.Name, u))
			ref.add(u.Name, u)
		}
		value := group(n/2, 0)[0]
		b.Run(fmt.Sprintf("keys-per-value=%d/ByIndex/ours", per), func(b *testing.B) {
			for b.Loop() {
				if objs, _ := ours.ByIndex("group", value); len(objs) != per {
					b.Fatal(len(objs))
				}
			}
		})
		b.Run(fmt.Sprintf("keys-per-value=%d/ByIndex/map", per), func(b *testing.B) {
			for b.Loop() {
				if objs := ref.byIndex(value); len(objs) != per {
					b.Fatal(len(objs))
				}
			}
		})
		b.Run(fmt.Sprintf("keys-per-value=%d/IndexKeys/ours", per), func(b *testing.B) {
			for b.Loop() {
				if keys, _ := ours.IndexKeys("group", value); len(keys) != per {
					b.Fatal(len(keys))
				}
			}
		})
		b.Run(fmt.Sprintf("keys-per-value=%d/IndexKeys/map", per), func(b *testing.B) {
			for b.Loop() {
				if keys := ref.indexKeys(value); len(keys) != per {
					b.Fatal(len(keys))
				}
			}
		})
		// Each update moves a key one value further (per keys on).
		users := make([]*user, n)
		for i := range users {
			users[i] = &user{Name: key(i), Groups: group(i, per)}
		}
		b.Run(fmt.Sprintf("keys-per-value=%d/Update/ours", per), func(b *testing.B) {
			i := 0
			for b.Loop() {
				u := users[i%n]
				u2 := *u
				if i/n%2 == 1 {
					u2.Groups = group(i%n, 0)
				}
				if err := ours.Add(u.Name, &u2); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("keys-per-value=%d/Update/map", per), func(b *testing.B) {
			i := 0
			for b.Loop() {
				u := users[i%n]
				u2 := *u
				if i/n%2 == 1 {
					u2.Groups = group(i%n, 0)
				}
				ref.add(u.Name, &u2)
				i++
			}
		})
	}
}

// An object changed in place behind the cache (against the contract) can
// no longer tell where it was filed; the next update or delete of its key
// finds it anyway and unfiles it everywhere, so no value keeps naming the
// key. (Changed to have no index values at all, it is not looked for, and
// its old values keep naming the key, as in client-go; its id stays
// referenced, so it is never handed to another key.)
func TestIndexerObjectChangedInPlace(t *testing.T) {
	s := NewIndexer(Indexers[*user]{"group": byGroup})
	a := &user{Name: "a", Groups: []string{"x", "y"}}
	must(t, s.Add("a", a))
	must(t, s.Add("b", &user{Name: "b", Groups: []string{"x"}}))
	a.Groups = []string{"z"} // behind the cache's back
	must(t, s.Add("a", &user{Name: "a", Groups: []string{"w"}}))
	if vals := s.ListIndexFuncValues("group"); !reflect.DeepEqual(vals, []string{"w", "x"}) {
		t.Fatalf("values after update = %v", vals)
	}
	if keys, _ := s.IndexKeys("group", "x"); !reflect.DeepEqual(keys, []string{"b"}) {
		t.Fatalf("x = %v", keys)
	}
	c := &user{Name: "c", Groups: []string{"x"}}
	must(t, s.Add("c", c))
	c.Groups = []string{"q"}
	must(t, s.Delete("c"))
	must(t, s.Add("d", &user{Name: "d", Groups: []string{"x"}}))
	if keys, _ := s.IndexKeys("group", "x"); !reflect.DeepEqual(keys, []string{"b", "d"}) {
		t.Fatalf("x after delete = %v", keys)
	}
}

// BenchmarkIndexerChurn is the index work of bench's BenchmarkPipeline:
// 100,000 keys under two indexes of 100 and 1,000 values; each op deletes
// a key and adds it back (the pipeline's updates keep their values and
// touch no index).
func BenchmarkIndexerChurn(b *testing.B) {
	const n = 100_000
	type obj struct{ Org, Team string }
	s := NewIndexer(Indexers[*obj]{
		"org":  func(o *obj) ([]string, error) { return []string{o.Org}, nil },
		"team": func(o *obj) ([]string, error) { return []string{o.Team}, nil },
	})
	keys := make([]string, n)
	objs := make([]*obj, n)
	for i := range n {
		keys[i] = "object-" + strconv.Itoa(i)
		objs[i] = &obj{Org: "org-" + strconv.Itoa(i%100), Team: "team-" + strconv.Itoa(i%1000)}
		if err := s.Add(keys[i], objs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := (i * 7919) % n
		if err := s.Delete(keys[k]); err != nil {
			b.Fatal(err)
		}
		if err := s.Add(keys[k], objs[k]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestReserveSizesOnlyAnEmptyCache: a list's estimate sizes an empty
// cache and leaves a filled one (a relist's) as it is.
func TestReserveSizesOnlyAnEmptyCache(t *testing.T) {
	s := NewIndexer[int](nil)
	s.reserve(1000)
	s.reserve(-1)
	if err := s.Add("a", 1); err != nil {
		t.Fatal(err)
	}
	s.reserve(1 << 40) // capped, and the cache is not empty: no effect
	if v, ok := s.Get("a"); !ok || v != 1 || s.Len() != 1 {
		t.Fatalf("after reserve: Get(a) = %v, %v; Len %d; want 1, true, 1", v, ok, s.Len())
	}
}

// replaceAll makes s hold exactly items, through the Indexer's own writes
// (the informer replaces a cache key by key too, through a relist).
func replaceAll[T any](s *Indexer[T], items map[string]T) error {
	for _, k := range s.ListKeys() {
		if _, ok := items[k]; !ok {
			if err := s.Delete(k); err != nil {
				return err
			}
		}
	}
	for k, v := range items {
		if err := s.Add(k, v); err != nil {
			return err
		}
	}
	return nil
}

// A key filed under more index values than a key page's 16-bit count holds
// keeps its id until the last of them is gone, and the id is then reused.
func TestIndexerKeyWithManyIndexValues(t *testing.T) {
	many := make([]string, maxPageRefs+10)
	for i := range many {
		many[i] = "g" + strconv.Itoa(i)
	}
	s := NewIndexer(Indexers[*user]{"group": byGroup})
	if err := s.Add("wide", &user{Name: "wide", Groups: many}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("narrow", &user{Name: "narrow", Groups: []string{"g0"}}); err != nil {
		t.Fatal(err)
	}
	id, ok := s.keys.ids()["wide"]
	if !ok || s.keys.refs(id) != uint32(len(many)) {
		t.Fatalf("wide: id %d found %v, %d references, want %d", id, ok, s.keys.refs(id), len(many))
	}
	// Shrink it across the page count's limit, one value at a time at the edge.
	for _, n := range []int{maxPageRefs + 1, maxPageRefs, maxPageRefs - 1, 3} {
		if err := s.Add("wide", &user{Name: "wide", Groups: many[:n]}); err != nil {
			t.Fatal(err)
		}
		if got := s.keys.refs(id); got != uint32(n) {
			t.Fatalf("after shrinking to %d values: %d references", n, got)
		}
		keys, err := s.IndexKeys("group", many[n-1])
		if err != nil || !reflect.DeepEqual(keys, []string{"wide"}) {
			t.Fatalf("after shrinking to %d values: group %s holds %v (%v)", n, many[n-1], keys, err)
		}
		if keys, _ := s.IndexKeys("group", many[n]); len(keys) != 0 {
			t.Fatalf("after shrinking to %d values: group %s still holds %v", n, many[n], keys)
		}
	}
	if len(s.keys.manyRefs) != 0 {
		t.Fatalf("counts past the page's limit left behind: %v", s.keys.manyRefs)
	}
	if err := s.Add("wide", &user{Name: "wide", Groups: many}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("wide"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.keys.ids()["wide"]; ok || len(s.keys.manyRefs) != 0 {
		t.Fatalf("a deleted key keeps its id (%v) or its count (%v)", ok, s.keys.manyRefs)
	}
	if err := s.Add("again", &user{Name: "again", Groups: []string{"g1"}}); err != nil {
		t.Fatal(err)
	}
	keys, _ := s.IndexKeys("group", "g0")
	sort.Strings(keys)
	if !reflect.DeepEqual(keys, []string{"narrow"}) {
		t.Fatalf("group g0 holds %v, want [narrow]", keys)
	}
	if keys, _ := s.IndexKeys("group", "g1"); !reflect.DeepEqual(keys, []string{"again"}) {
		t.Fatalf("group g1 holds %v, want [again]", keys)
	}
}
