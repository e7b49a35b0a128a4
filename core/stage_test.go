package core

import (
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
)

// stagedState reports whether s holds staged objects, a base and how many
// objects its map holds.
func stagedState[T any](s *Indexer[T]) (staged, base bool, inMap int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.staged != nil, s.items.base != nil, len(s.items.m)
}

// An initial list into an empty cache is staged and filed into a base (and
// its indexes built in one pass) before the informer reports the sync; the
// handler gets every object as an initial add, and the watch's changes
// then apply to the base and the indexes.
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
				if staged || !base || inMap != 0 {
					t.Fatalf("synced with: staged %v, base %v, %d objects in the map", staged, base, inMap)
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

// A listed object whose index function fails is left out and reported, as
// a put would leave it; the others are staged.
func TestStagedIndexErrorLeavesTheObjectOut(t *testing.T) {
	lw := newFakeLW()
	bad := errors.New("no index for you")
	inf, _, ec := newTestInformer(lw, InformerOptions[string]{Indexers: Indexers[string]{"x": func(v string) ([]string, error) {
		if v == "bad" {
			return nil, bad
		}
		return []string{v}, nil
	}}})
	started(t, inf)
	evs := []Event[string]{add("a", "1", 0), add("b", "bad", 0)}
	for i := range minStagedBase {
		evs = append(evs, add("k"+strconv.Itoa(i), "v", 0))
	}
	lw.list(t, 5, evs...)
	must(t, inf.WaitForCacheSync(testCtx(t)))
	if _, ok := inf.Lister().Get("b"); ok {
		t.Error("the object whose index function failed is cached")
	}
	if got, ok := inf.Lister().Get("a"); !ok || got != "1" || inf.Lister().Len() != minStagedBase+1 {
		t.Errorf("Get(a) = %q, %v; Len %d", got, ok, inf.Lister().Len())
	}
	if err := ec.find(func(err error) bool { return errors.Is(err, bad) }); err == nil {
		t.Error("the index function's error was not reported")
	}
}

// A reader of an indexer with staged objects finds them: it files them
// first. Len counts them without filing; once filed, nothing more is staged.
func TestReadingStagedObjectsFilesThem(t *testing.T) {
	s := NewIndexer[int](nil)
	s.update(func(tx indexTx[int]) {
		for i := range minStagedBase {
			if ok, err := tx.stage(strconv.Itoa(i), i); !ok || err != nil {
				t.Fatalf("an empty indexer refused to stage: %v", err)
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
		if ok, _ := tx.stage("late", 1); ok {
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
