package core

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/dbinformer/dbinformer/core/driver"
)

// stagedState reports whether s holds staged objects, a base and how many
// objects its map holds.
func stagedState[T any](s *Indexer[T]) (staged, base bool, inMap int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.staged != nil, s.items.base != nil, len(s.items.m)
}

// An initial list into an empty cache, with or without indexes, is staged
// and filed into a base before the informer reports the sync; the handler
// gets every object as an initial add, and the watch's changes then apply
// to the base and its indexes.
func TestInitialListIsStagedAndFiled(t *testing.T) {
	const n = 3 * minStagedBase
	for _, indexed := range []bool{false, true} {
		t.Run(map[bool]string{false: "NoIndex", true: "Indexed"}[indexed], func(t *testing.T) {
			bothModes(t, func(t *testing.T, deltaFIFO bool) {
				lw := newFakeLW()
				opts := InformerOptions[string]{DeltaFIFO: deltaFIFO}
				if indexed {
					opts.Indexers = Indexers[string]{"first": func(v string) ([]string, error) { return []string{v[:1]}, nil }}
				}
				inf, _, _ := newTestInformer(lw, opts)
				var initial atomic.Int64
				_, err := inf.AddEventHandler(ResourceEventHandlerFuncs[string]{AddFunc: func(_, _ string, isInitial bool) {
					if isInitial {
						initial.Add(1)
					}
				}})
				must(t, err)
				started(t, inf)
				var evs []driver.Event[string]
				for i := range n {
					evs = append(evs, add("k"+strconv.Itoa(i), "v"+strconv.Itoa(i), 0))
				}
				lw.list(t, 5, evs...)
				must(t, inf.WaitForCacheSync(testCtx(t)))
				staged, base, inMap := stagedState(inf.Indexer())
				if staged || !base || inMap != 0 {
					t.Fatalf("indexed %v, synced with: staged %v, base %v, %d objects in the map", indexed, staged, base, inMap)
				}
				if got := inf.Lister().Len(); got != n {
					t.Fatalf("Len = %d, want %d", got, n)
				}
				for i := range n {
					if got, ok := inf.Lister().Get("k" + strconv.Itoa(i)); !ok || got != "v"+strconv.Itoa(i) {
						t.Fatalf("Get(k%d) = %q, %v", i, got, ok)
					}
				}
				if indexed {
					if keys, err := inf.Indexer().IndexKeys("first", "v"); err != nil || len(keys) != n {
						t.Fatalf("IndexKeys(first, v) has %d keys, %v; want %d", len(keys), err, n)
					}
				}
				eventually(t, "every initial add delivered", func() bool { return initial.Load() == n })

				w := lw.watch(t)
				w.send(t, mod("k1", "changed", 6), del("k2", 6), add("new", "n", 7))
				must(t, inf.WaitFor(testCtx(t), 7))
				if got, _ := inf.Lister().Get("k1"); got != "changed" {
					t.Errorf("k1 = %q after its update", got)
				}
				if _, ok := inf.Lister().Get("k2"); ok {
					t.Error("k2 still cached after its delete")
				}
				if got, _ := inf.Lister().Get("new"); got != "n" {
					t.Errorf("new = %q", got)
				}
				if got := inf.Lister().Len(); got != n {
					t.Errorf("Len = %d after one delete and one add, want %d", got, n)
				}
				if indexed {
					if keys, err := inf.Indexer().IndexKeys("first", "c"); err != nil || len(keys) != 1 || keys[0] != "k1" {
						t.Errorf("IndexKeys(first, c) = %v, %v", keys, err)
					}
					if keys, _ := inf.Indexer().IndexKeys("first", "v"); len(keys) != n-2 {
						t.Errorf("IndexKeys(first, v) has %d keys, want %d", len(keys), n-2)
					}
				}
			})
		})
	}
}

// A reader of an indexer with staged objects finds them: it files them
// first. Len counts them without filing; once filed, nothing more is staged.
func TestReadingStagedObjectsFilesThem(t *testing.T) {
	s := NewIndexer[int](nil)
	s.update(func(tx indexTx[int]) {
		for i := range minStagedBase {
			if !tx.stage(strconv.Itoa(i), i) {
				t.Fatal("an empty indexer refused to stage")
			}
		}
	})
	if got := s.Len(); got != minStagedBase {
		t.Fatalf("Len = %d", got)
	}
	if staged, _, _ := stagedState(s); !staged {
		t.Fatal("Len filed the staged objects")
	}
	if got, ok := s.Get("17"); !ok || got != 17 {
		t.Fatalf("Get(17) = %d, %v", got, ok)
	}
	if staged, base, _ := stagedState(s); staged || !base {
		t.Fatalf("after a read: staged %v, base %v", staged, base)
	}
	s.update(func(tx indexTx[int]) {
		if tx.stage("late", 1) {
			t.Error("an indexer holding objects staged one more")
		}
	})
}

// Few staged objects, or a key staged twice, go into the map, the later
// object winning; a list filed before it ended (a reader came) has the rest
// go into a map made for the rest (reserve's estimate).
func TestStagedFallsBackToTheMap(t *testing.T) {
	s := NewIndexer[int](nil)
	s.update(func(tx indexTx[int]) {
		for i := range minStagedBase {
			tx.stage(strconv.Itoa(i), i)
		}
		tx.stage("5", -5)
	})
	if got, ok := s.Get("5"); !ok || got != -5 {
		t.Fatalf("Get(5) = %d, %v; want the later -5", got, ok)
	}
	if _, base, inMap := stagedState(s); base || inMap != minStagedBase {
		t.Fatalf("base %v, %d in the map", base, inMap)
	}

	few := NewIndexer[int](nil)
	few.reserve(100_000)
	few.update(func(tx indexTx[int]) { tx.stage("a", 1) })
	if got, ok := few.Get("a"); !ok || got != 1 {
		t.Fatalf("Get(a) = %d, %v", got, ok)
	}
	if _, base, _ := stagedState(few); base || few.expect != 0 {
		t.Fatalf("one object: base %v, expect %d left", base, few.expect)
	}
}

// An indexed cache's staged list files its index entries as it stages. A
// key staged twice (into the map, or into a base that then refuses it) has
// its earlier object's entries taken out, also when that object changed
// since it was staged (they are found by their id), and a value of one key
// listed twice is no set left empty by it; an object whose index
// function fails is not staged, and its put then reports the failure; an
// object without index values takes no id.
func TestStagedIndexedList(t *testing.T) {
	for _, minBase := range []int{0, 1 << 20} {
		t.Run(map[bool]string{true: "Base", false: "Map"}[minBase == 0], func(t *testing.T) {
			type obj struct{ groups []string }
			s := NewIndexer(Indexers[*obj]{"g": func(o *obj) ([]string, error) {
				if len(o.groups) == 1 && o.groups[0] == "fail" {
					return nil, errors.New("no groups")
				}
				return o.groups, nil
			}})
			s.stageBits, s.stageMinBase = 2, minBase
			changed := &obj{groups: []string{"x", "y"}}
			var failed error
			s.update(func(tx indexTx[*obj]) {
				for i := range 10 {
					if !tx.stage("k"+strconv.Itoa(i), &obj{groups: []string{"g" + strconv.Itoa(i%2)}}) {
						t.Fatalf("k%d not staged", i)
					}
				}
				tx.stage("none", &obj{})
				tx.stage("c", changed)
				if tx.stage("bad", &obj{groups: []string{"fail"}}) {
					t.Fatal("an object whose index function fails was staged")
				}
				if _, _, failed = tx.put("bad", &obj{groups: []string{"fail"}}); failed == nil {
					t.Fatal("the put of an object whose index function fails did not fail")
				}
			})
			s.update(func(tx indexTx[*obj]) {
				if tx.stage("more", &obj{groups: []string{"g0"}}) {
					t.Fatal("staged after a put")
				}
			})
			s = NewIndexer(Indexers[*obj]{"g": func(o *obj) ([]string, error) { return o.groups, nil }})
			s.stageBits, s.stageMinBase = 2, minBase
			s.update(func(tx indexTx[*obj]) {
				for i := range 10 {
					tx.stage("k"+strconv.Itoa(i), &obj{groups: []string{"g" + strconv.Itoa(i%2)}})
				}
				tx.stage("none", &obj{})
				tx.stage("c", changed)
				tx.stage("hh", &obj{groups: []string{"h", "h"}})
				tx.stage("k3", &obj{groups: []string{"g0", "z"}}) // was g1
				tx.stage("c", &obj{groups: []string{"y"}})
				tx.stage("hh", &obj{})         // h must not stay behind, empty
				changed.groups = []string{"w"} // its entries x and y now name nothing it has
			})
			want := map[string][]string{
				"g0": {"k0", "k2", "k3", "k4", "k6", "k8"},
				"g1": {"k1", "k5", "k7", "k9"},
				"z":  {"k3"},
				"y":  {"c"},
			}
			for v, keys := range want {
				if got, err := s.IndexKeys("g", v); err != nil || !slices.Equal(got, keys) {
					t.Errorf("IndexKeys(g, %s) = %v, %v; want %v", v, got, err, keys)
				}
			}
			if got := s.ListIndexFuncValues("g"); len(got) != len(want) {
				t.Errorf("index values %v, want those of %v", got, want)
			}
			if got := s.Len(); got != 13 {
				t.Errorf("Len = %d, want 13", got)
			}
			if live := int(s.keys.next) - len(s.keys.free); live != 11 {
				t.Errorf("%d ids live, want 11 (every key but none)", live)
			}
		})
	}
}

// FuzzStagedIndexer drives an Indexer without indexes, whose first objects
// are staged as an initial list's (and then written, deleted, read, in any
// order), and a plain map with the same operations, and checks that they
// hold the same. Small pages and bases, so that a few keys make several
// pages and a base; a key staged twice goes to the map, the later object
// winning.
func FuzzStagedIndexer(f *testing.F) {
	f.Add([]byte{0, 1, 1, 0, 2, 2, 1, 3, 3, 0, 4, 4, 4, 1, 0, 2, 2, 5, 3, 3, 0})
	f.Add([]byte{5, 0, 200, 0, 1, 1, 0, 1, 2, 4, 1, 0, 0, 2, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		ops = ops[:min(len(ops), 3*maxFuzzOps)]
		s := NewIndexer[int](nil)
		s.stageBits, s.stageMinBase = 1, 3
		model := map[string]int{}
		staged := map[string]bool{} // keys staged since the last filing
		twice := false
		for len(ops) >= 3 {
			op, key, val := ops[0]%6, "k"+strconv.Itoa(int(ops[1]%16)), int(ops[2])
			ops = ops[3:]
			switch op {
			case 0, 1:
				var ok bool
				s.update(func(tx indexTx[int]) { ok = tx.stage(key, val) })
				if ok {
					twice = twice || staged[key]
					staged[key] = true
				} else {
					must(t, s.Add(key, val))
				}
				model[key] = val
			case 2:
				must(t, s.Add(key, val))
				model[key] = val
			case 3:
				must(t, s.Delete(key))
				delete(model, key)
			case 4:
				got, ok := s.Get(key)
				want, wok := model[key]
				if ok != wok || got != want {
					t.Fatalf("Get(%s) = %d, %v; want %d, %v", key, got, ok, want, wok)
				}
			case 5:
				s.reserve(int64(val) * 100)
			}
			if stagedNow, _, _ := stagedState(s); !stagedNow {
				clear(staged)
				twice = false
			}
			if !twice && s.Len() != len(model) {
				t.Fatalf("Len %d, want %d", s.Len(), len(model))
			}
		}
		got := map[string]int{}
		s.Range(func(k string, v int) bool { got[k] = v; return true })
		if !maps.Equal(got, model) {
			t.Fatalf("holds %v, want %v", got, model)
		}
		if s.Len() != len(model) || len(s.List()) != len(model) || len(s.ListKeys()) != len(model) {
			t.Fatalf("Len %d, List %d, ListKeys %d; want %d", s.Len(), len(s.List()), len(s.ListKeys()), len(model))
		}
	})
}
