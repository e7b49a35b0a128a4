package core

import (
	"strconv"
	"sync/atomic"
	"testing"
)

// stagedState reports whether inf's cache holds staged objects, a base
// and how many objects its map holds.
func stagedState[T any](s *Indexer[T]) (staged, base bool, inMap int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.items.staged != nil, s.items.base != nil, len(s.items.m)
}

// An initial list into an empty cache without indexes is staged and filed
// into a base before the informer reports the sync; the handler gets every
// object as an initial add, the watch's changes then apply to the base,
// and with an index the list goes into the map as before.
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
				var evs []Event[string]
				for i := range n {
					evs = append(evs, add("k"+strconv.Itoa(i), "v"+strconv.Itoa(i), 0))
				}
				lw.list(t, 5, evs...)
				must(t, inf.WaitForCacheSync(testCtx(t)))
				staged, base, inMap := stagedState(inf.Indexer())
				if staged {
					t.Fatal("synced with objects still staged")
				}
				if base == indexed || (!indexed && inMap != 0) {
					t.Fatalf("indexed %v: base %v, %d objects in the map", indexed, base, inMap)
				}
				if got := inf.Lister().Len(); got != n {
					t.Fatalf("Len = %d, want %d", got, n)
				}
				for i := range n {
					if got, ok := inf.Lister().Get("k" + strconv.Itoa(i)); !ok || got != "v"+strconv.Itoa(i) {
						t.Fatalf("Get(k%d) = %q, %v", i, got, ok)
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
				}
			})
		})
	}
}

// A reader of a cache with staged objects finds them: it files them first.
// Len counts them without filing.
func TestReadingStagedObjectsFilesThem(t *testing.T) {
	s := NewIndexer[int](nil)
	s.update(func(tx indexTx[int]) {
		for i := range minStagedBase {
			if !tx.stage(strconv.Itoa(i), i) {
				t.Fatal("an empty cache refused to stage")
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
			t.Error("a cache holding objects staged one more")
		}
	})
}

// Few staged objects, or a key staged twice, go into the map, the later
// object winning.
func TestStagedFallsBackToTheMap(t *testing.T) {
	var tb items[int]
	tb.m = map[string]int{}
	for i := range minStagedBase {
		tb.stage(strconv.Itoa(i), i)
	}
	tb.stage("5", -5)
	if got := tb.len(); got != minStagedBase+1 {
		t.Fatalf("len while staged = %d", got)
	}
	if got, ok := tb.get("5"); !ok || got != -5 {
		t.Fatalf("get(5) = %d, %v; want the later -5", got, ok)
	}
	if tb.base != nil || len(tb.m) != minStagedBase {
		t.Fatalf("base %v, %d in the map", tb.base != nil, len(tb.m))
	}
	var few items[int]
	few.m = map[string]int{}
	few.stage("a", 1)
	if got, ok := few.get("a"); !ok || got != 1 || few.base != nil {
		t.Fatalf("get(a) = %d, %v; base %v", got, ok, few.base != nil)
	}
}
