package core

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/dbinformer/dbinformer/core/driver"
)

// maxFuzzOps bounds the operations one fuzz input plays. Six keys and a
// few values are exhausted long before: a longer input finds nothing new,
// only makes every execution, and the minimization of every new
// interesting input, slower (see scripts/fuzz.sh).
const maxFuzzOps = 64

// FuzzIndexer drives an Indexer and a plain map with the same operations
// and checks that every index answers what the map implies. Up to 24 keys,
// so that a value's set grows past its inline single key, rehashes and
// shrinks; a second index ("n", the number of values) is added to the
// filled store by AddIndexers, and shares key ids with the first.
func FuzzIndexer(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 2, 3, 2, 1, 0, 3, 0, 0})
	f.Add([]byte{0, 0, 7, 0, 1, 7, 1, 0, 0, 3, 5, 5, 2, 1, 1})
	f.Add([]byte{0, 1, 2, 0, 2, 2, 0, 3, 2, 0, 4, 2, 3, 0, 7, 2, 1, 0, 1, 2, 6, 0, 5, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		ops = ops[:min(len(ops), 3*maxFuzzOps)]
		groups := func(v byte) []string {
			// Zero, one or two values, sometimes repeated.
			switch v % 4 {
			case 0:
				return nil
			case 1:
				return []string{"g" + strconv.Itoa(int(v/4%3))}
			case 2:
				return []string{"g" + strconv.Itoa(int(v/4%3)), "h"}
			}
			return []string{"h", "h"}
		}
		s := NewIndexer(Indexers[[]string]{"g": func(v []string) ([]string, error) { return v, nil }})
		model := map[string][]string{}
		for len(ops) >= 3 {
			op, key, val := ops[0]%4, "k"+strconv.Itoa(int(ops[1]%24)), ops[2]
			ops = ops[3:]
			switch op {
			case 0, 1:
				must(t, s.Add(key, groups(val)))
				model[key] = groups(val)
			case 2:
				must(t, s.Delete(key))
				delete(model, key)
			case 3:
				if _, ok := s.GetIndexers()["n"]; !ok && val%8 == 7 {
					must(t, s.AddIndexers(Indexers[[]string]{"n": byCount}))
					break
				}
				m := map[string][]string{}
				for k := range int(val % 4) {
					m["k"+strconv.Itoa(k)] = groups(val + byte(k))
				}
				if s.Len() == 0 && val/32%2 == 1 {
					// An initial list, staged with its index entries:
					// filed by the first read (checkIndexer), into a base
					// or, for few keys, a map; sometimes with a key listed
					// twice, whose earlier object's entries go.
					s.stageBits, s.stageMinBase = 1, int(val/4%2)*3
					s.update(func(tx indexTx[[]string]) {
						for k, v := range m {
							if !tx.stage(k, v) {
								t.Fatalf("stage(%s) into an empty indexer refused", k)
							}
						}
					})
					if s.Len() != len(m) {
						t.Fatalf("Len %d with %d staged", s.Len(), len(m))
					}
					if val/64%2 == 1 && len(m) > 0 {
						for k := range m {
							again := groups(val + 1)
							s.update(func(tx indexTx[[]string]) {
								if !tx.stage(k, again) {
									t.Fatalf("stage(%s) again refused", k)
								}
							})
							m[k] = again
							break
						}
					}
				} else if s.Len() == 0 && val%2 == 0 {
					// A warm start's one-pass load into an empty cache.
					keys := slices.Collect(maps.Keys(m))
					objs := make([][]string, len(keys))
					for k, key := range keys {
						objs[k] = m[key]
					}
					if ok, skipped := s.loadEmpty(mustBase(t, keys, objs, 1)); !ok || skipped != nil {
						t.Fatalf("loadEmpty into an empty indexer: %v, %v", ok, skipped)
					}
				} else {
					must(t, replaceAll(s, m))
				}
				model = m
			}
			checkIndexer(t, s, model)
		}
	})
}

// byCount files a value under its number of elements, none when empty.
func byCount(v []string) ([]string, error) {
	if len(v) == 0 {
		return nil, nil
	}
	return []string{strconv.Itoa(len(v))}, nil
}

func checkIndexer(t *testing.T, s *Indexer[[]string], model map[string][]string) {
	t.Helper()
	funcs := map[string]func([]string) []string{"g": func(v []string) []string { return v }}
	if _, ok := s.GetIndexers()["n"]; ok {
		funcs["n"] = func(v []string) []string { vs, _ := byCount(v); return vs }
	}
	for name, fn := range funcs {
		want := map[string][]string{}
		for k, vs := range model {
			for _, v := range fn(vs) {
				if !slices.Contains(want[v], k) {
					want[v] = append(want[v], k)
				}
			}
		}
		values := slices.Sorted(maps.Keys(want))
		if got := s.ListIndexFuncValues(name); !slices.Equal(got, values) {
			t.Fatalf("index %s: values %v, want %v", name, got, values)
		}
		for v, keys := range want {
			sort.Strings(keys)
			got, err := s.IndexKeys(name, v)
			must(t, err)
			if !slices.Equal(got, keys) {
				t.Fatalf("IndexKeys(%s, %s) = %v, want %v", name, v, got, keys)
			}
			objs, _ := s.ByIndex(name, v)
			if len(objs) != len(keys) {
				t.Fatalf("ByIndex(%s, %s) has %d objects, want %d", name, v, len(objs), len(keys))
			}
			for _, o := range objs {
				if !slices.Contains(fn(o), v) {
					t.Fatalf("ByIndex(%s, %s) returned %v", name, v, o)
				}
			}
		}
		if keys, _ := s.IndexKeys(name, "absent"); len(keys) != 0 {
			t.Fatalf("IndexKeys(%s, absent) = %v", name, keys)
		}
	}
	// Index: the union over the values of a probe object, each key once.
	probe := []string{"g0", "h"}
	union := map[string]bool{}
	for k, vs := range model {
		if slices.Contains(vs, "g0") || slices.Contains(vs, "h") {
			union[k] = true
		}
	}
	if objs, err := s.Index("g", probe); err != nil || len(objs) != len(union) {
		t.Fatalf("Index(g, %v) = %d objects (%v), want %d", probe, len(objs), err, len(union))
	}
	if s.Len() != len(model) {
		t.Fatalf("Len %d, want %d", s.Len(), len(model))
	}
	for k, v := range model {
		got, ok := s.Get(k)
		if !ok || !slices.Equal(got, v) {
			t.Fatalf("Get(%s) = %v %v, want %v", k, got, ok, v)
		}
	}
}

// FuzzQueues plays a source whose watch sometimes misses changes (and then
// relists), through both queues into a consumer cache, and checks that the
// cache ends equal to the source, that versions are fully applied, and that
// DeltaFIFO never hands over two deletes in a row.
func FuzzQueues(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 1, 3, 0, 2, 1, 5, 0, 4, 0})
	f.Add([]byte{0, 0, 6, 0, 0, 1, 2, 0, 3, 0, 7, 0, 4, 1, 5, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		ops = ops[:min(len(ops), 2*maxFuzzOps)]
		for _, deltaFIFO := range []bool{false, true} {
			fuzzQueue(t, ops, deltaFIFO)
		}
	})
}

func fuzzQueue(t *testing.T, ops []byte, deltaFIFO bool) {
	cache := NewIndexer[string](nil)
	var q Queue[string]
	if deltaFIFO {
		q = NewDeltaFIFO[string](cache)
	} else {
		q = NewFIFO[string](cache)
	}
	source := map[string]string{}
	var rv ResourceVersion
	watching := true
	process := func(ds []Delta[string], _ bool) error {
		for i, d := range ds {
			if deltaFIFO && i > 0 && d.Type == DeltaDeleted && ds[i-1].Type == DeltaDeleted {
				t.Fatalf("two deletes in a row for %s: %+v", d.Key, ds)
			}
			if d.Key == "" {
				t.Fatalf("delta without key: %+v", d)
			}
			switch d.Type {
			case DeltaAdded, DeltaUpdated, DeltaReplaced:
				must(t, cache.Add(d.Key, d.Object))
			case DeltaDeleted:
				must(t, cache.Delete(d.Key))
			}
		}
		return nil
	}
	pop := func() {
		if q.Len() > 0 {
			must(t, q.Pop(context.Background(), process))
		}
	}
	for len(ops) >= 2 {
		op, key := ops[0]%8, "k"+strconv.Itoa(int(ops[1]%5))
		ops = ops[2:]
		var ev driver.Event[string]
		switch op {
		case 0, 1: // write
			rv++
			v := fmt.Sprintf("%s@%d", key, rv)
			typ := driver.Added
			if _, ok := source[key]; ok {
				typ = driver.Modified
			}
			source[key] = v
			ev = driver.Event[string]{Type: typ, Key: key, Object: v, HasObject: true, RV: rv}
		case 2: // delete
			old, ok := source[key]
			if !ok {
				continue
			}
			rv++
			delete(source, key)
			ev = driver.Event[string]{Type: driver.Deleted, Key: key, Object: old, HasObject: op == 2 && rv%2 == 0, RV: rv}
		case 3:
			pop()
			continue
		case 4: // the watch breaks: changes are missed until the relist
			watching = false
			continue
		case 5: // relist
			list := make([]driver.Event[string], 0, len(source))
			for k, v := range source {
				list = append(list, driver.Event[string]{Type: driver.Added, Key: k, Object: v, HasObject: true})
			}
			must(t, qreplace(q, list, rv))
			watching = true
			continue
		case 6:
			must(t, q.Resync())
			continue
		case 7:
			rv++
			if watching {
				must(t, qadd(q, []driver.Event[string]{{Type: driver.Bookmark, RV: rv}}))
			}
			continue
		}
		if watching {
			must(t, qadd(q, []driver.Event[string]{ev}))
		}
	}
	if !watching {
		list := make([]driver.Event[string], 0, len(source))
		for k, v := range source {
			list = append(list, driver.Event[string]{Type: driver.Added, Key: k, Object: v, HasObject: true})
		}
		must(t, qreplace(q, list, rv))
	}
	for q.Len() > 0 {
		pop()
	}
	if cache.Len() != len(source) {
		t.Fatalf("deltaFIFO=%v: cache has %d keys, source %d: %v vs %v", deltaFIFO, cache.Len(), len(source), cache.List(), source)
	}
	for k, v := range source {
		if got, _ := cache.Get(k); got != v {
			t.Fatalf("deltaFIFO=%v: cache[%s] = %q, source %q", deltaFIFO, k, got, v)
		}
	}
	if q.AppliedVersion() != rv {
		t.Fatalf("applied %d, last version %d", q.AppliedVersion(), rv)
	}
}
