package core

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/core/driver"
)

func TestListerReadPath(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{Indexers: Indexers[string]{
		"first": func(s string) ([]string, error) { return []string{s[:1]}, nil },
	}})
	started(t, inf)
	lw.list(t, 5, add("a", "x1", 0), add("b", "x2", 0), add("c", "y1", 0))
	must(t, inf.WaitForCacheSync(testCtx(t)))
	l := inf.Lister()
	if l.Len() != 3 {
		t.Fatalf("Len = %d", l.Len())
	}
	if keys, err := l.IndexKeys("first", "x"); err != nil || !reflect.DeepEqual(keys, []string{"a", "b"}) {
		t.Fatalf("IndexKeys = %v, %v", keys, err)
	}
	if objs, err := l.Index("first", "y9"); err != nil || !reflect.DeepEqual(objs, []string{"y1"}) {
		t.Fatalf("Index = %v, %v", objs, err)
	}
	if vals := l.ListIndexFuncValues("first"); !reflect.DeepEqual(vals, []string{"x", "y"}) {
		t.Fatalf("ListIndexFuncValues = %v", vals)
	}
	for name, err := range map[string]error{
		"ByIndex":   func() error { _, err := l.ByIndex("nope", "x"); return err }(),
		"Index":     func() error { _, err := l.Index("nope", "x"); return err }(),
		"IndexKeys": func() error { _, err := l.IndexKeys("nope", "x"); return err }(),
	} {
		if !errors.Is(err, ErrUnknownIndex) || !strings.Contains(err.Error(), `"nope"`) {
			t.Errorf("%s of an unknown index: %v, want ErrUnknownIndex naming it", name, err)
		}
	}
}

func TestHandlerSentinels(t *testing.T) {
	inf, _, _ := newTestInformer(newFakeLW(), InformerOptions[string]{})
	other, _, _ := newTestInformer(newFakeLW(), InformerOptions[string]{})
	if _, err := inf.AddEventHandler(nil); !errors.Is(err, ErrNilHandler) {
		t.Fatalf("nil handler: %v", err)
	}
	reg, err := other.AddEventHandler(newRecorder())
	must(t, err)
	if err := inf.RemoveEventHandler(reg); !errors.Is(err, ErrForeignRegistration) {
		t.Fatalf("foreign registration: %v", err)
	}
	if err := inf.RemoveEventHandler(nil); !errors.Is(err, ErrForeignRegistration) {
		t.Fatalf("nil registration: %v", err)
	}
	must(t, other.RemoveEventHandler(reg))
	must(t, other.RemoveEventHandler(reg)) // twice is fine
}

func TestWaitForCacheSyncTimeout(t *testing.T) {
	inf, _, _ := newTestInformer(newFakeLW(), InformerOptions[string]{})
	// Never started: the limit expires (how soon does not matter).
	err := WaitForCacheSyncTimeout(context.Background(), 1, inf)
	if !errors.Is(err, ErrSyncTimeout) || !strings.Contains(err.Error(), "never started") {
		t.Fatalf("expired limit: %v, want ErrSyncTimeout and why", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = WaitForCacheSyncTimeout(ctx, 1<<62, inf)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrSyncTimeout) {
		t.Fatalf("interrupted: %v, want context.Canceled and not ErrSyncTimeout", err)
	}
}

func TestUserCodePanicsAreReported(t *testing.T) {
	lw := newFakeLW()
	inf, _, ec := newTestInformer(lw, InformerOptions[string]{
		Transform: func(s string) (string, error) {
			if s == "transform-panics" {
				panic("boom")
			}
			return s, nil
		},
		Indexers: Indexers[string]{"idx": func(s string) ([]string, error) {
			if s == "index-panics" {
				panic("boom")
			}
			return []string{s}, nil
		}},
		Equal: func(a, b string) bool {
			if b == "equal-panics" {
				panic("boom")
			}
			return a == b
		},
	})
	rec := newRecorder()
	_, err := inf.AddEventHandler(rec)
	must(t, err)
	started(t, inf)
	lw.list(t, 5, add("a", "transform-panics", 0), add("b", "index-panics", 0), add("c", "c1", 0))
	must(t, inf.WaitForCacheSync(testCtx(t)))
	rec.expect(t, "add c=c1 initial=true")
	var de *driver.DecodeError
	if ec.find(func(e error) bool { return errors.As(e, &de) && de.Key == "a" }) == nil {
		t.Fatal("Transform panic not reported as a DecodeError")
	}
	var ie *IndexError
	if ec.find(func(e error) bool { return errors.As(e, &ie) && ie.Key == "b" }) == nil {
		t.Fatal("index function panic not reported as an IndexError")
	}
	w := lw.watch(t)
	w.send(t, driver.Event[string]{Type: driver.Bookmark, RV: 6}) // progress: relist at once
	w.fail(t, driver.ErrExpired)
	lw.list(t, 9, add("c", "equal-panics", 0))
	rec.expect(t, "update c c1->equal-panics")
	if ec.find(func(e error) bool { return strings.Contains(e.Error(), "Equal panicked") }) == nil {
		t.Fatal("Equal panic not reported")
	}
}

// A list longer than the queue's window streams through it: the queue
// never holds more than the window, and the whole list arrives, initial.
func TestInitialListStreamsThroughABoundedQueue(t *testing.T) {
	bothModes(t, func(t *testing.T, deltaFIFO bool) {
		lw := newFakeLW()
		inf, _, _ := newTestInformer(lw, InformerOptions[string]{DeltaFIFO: deltaFIFO})
		var initial, adds int
		got := make(chan struct{})
		n := 3*listWindow + 7
		_, err := inf.AddEventHandler(ResourceEventHandlerFuncs[string]{AddFunc: func(_, _ string, in bool) {
			adds++
			if in {
				initial++
			}
			if adds == n {
				close(got)
			}
		}})
		must(t, err)
		started(t, inf)
		items := make([]driver.Event[string], n)
		for i := range items {
			items[i] = add(fmt.Sprint(i), "v", 0)
		}
		maxLen := 0
		lw.lists <- listResult{items: items, rv: 5, onEmit: func() { maxLen = max(maxLen, inf.queue.Len()) }}
		must(t, inf.WaitForCacheSync(testCtx(t)))
		<-got
		if initial != n || inf.Lister().Len() != n {
			t.Fatalf("%d adds, %d initial, %d cached; want %d each", adds, initial, inf.Lister().Len(), n)
		}
		if maxLen > listWindow {
			t.Fatalf("the queue held %d deltas while the list streamed, window %d", maxLen, listWindow)
		}
	})
}

// Nobody pops: put waits for room until ctx ends, and the list fails.
func TestReplaceWaitsForRoom(t *testing.T) {
	bothQueues(t, func(t *testing.T, known *Indexer[string], q Queue[string]) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- q.Replace(ctx, func(put func(Delta[string]) error) (ResourceVersion, error) {
				for i := range listWindow + 1 {
					if err := put(Delta[string]{Key: fmt.Sprint(i), Object: "v"}); err != nil {
						return 0, err
					}
				}
				return 7, nil
			})
		}()
		eventually(t, "a full window", func() bool { return q.Len() == listWindow })
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Replace = %v, want context.Canceled", err)
		}
		if q.HasSynced() || q.AppliedVersion() != 0 {
			t.Fatalf("a failed list synced (%v) or moved the version (%d)", q.HasSynced(), q.AppliedVersion())
		}
	})
}

// A relist that fails half way keeps what it queued (states newer than the
// cache's) but infers no delete and does not move the version.
func TestFailedRelistInfersNothing(t *testing.T) {
	bothQueues(t, func(t *testing.T, known *Indexer[string], q Queue[string]) {
		must(t, known.Add("a", "a1"))
		must(t, known.Add("b", "b1"))
		must(t, qadd(q, []driver.Event[string]{{Type: driver.Bookmark, RV: 5}}))
		boom := errors.New("connection reset")
		err := q.Replace(context.Background(), func(put func(Delta[string]) error) (ResourceVersion, error) {
			if err := put(Delta[string]{Key: "a", Object: "a2"}); err != nil {
				return 0, err
			}
			return 0, boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Replace = %v", err)
		}
		if got := popAll(t, q); !reflect.DeepEqual(got, []string{"Replaced a=a2"}) {
			t.Fatalf("after a failed relist got %v", got)
		}
		if v := q.AppliedVersion(); v != 5 {
			t.Fatalf("AppliedVersion = %d, want 5", v)
		}
	})
}

// A first list that fails half way leaves what it queued; the retry is
// then a relist and deletes what it no longer lists.
func TestRetriedInitialListDeletesWhatTheFailedOneLeft(t *testing.T) {
	bothQueues(t, func(t *testing.T, known *Indexer[string], q Queue[string]) {
		boom := errors.New("connection reset")
		err := q.Replace(context.Background(), func(put func(Delta[string]) error) (ResourceVersion, error) {
			return 0, errors.Join(put(Delta[string]{Key: "gone", Object: "g1"}), boom)
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Replace = %v", err)
		}
		// The item is in flight while the retry begins.
		must(t, q.Pop(context.Background(), func(ds []Delta[string], initial bool) error {
			if !initial {
				t.Error("an item of a failed first list is not initial")
			}
			must(t, qreplace(q, []driver.Event[string]{add("kept", "k1", 0)}, 9))
			return known.Add(ds[0].Key, ds[0].Object)
		}))
		if got := popAll(t, q); !reflect.DeepEqual(got, []string{"Replaced kept=k1", "Deleted gone=g1 (unknown)"}) {
			t.Fatalf("after the retry got %v", got)
		}
		if !q.HasSynced() || q.AppliedVersion() != 9 {
			t.Fatalf("synced %v at %d, want true at 9", q.HasSynced(), q.AppliedVersion())
		}
	})
}
