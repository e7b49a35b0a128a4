package core

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/dbinformer/dbinformer/core/driver"
)

func add(key, v string, rv ResourceVersion) driver.Event[string] {
	return driver.Event[string]{Type: driver.Added, Key: key, Object: v, HasObject: true, RV: rv}
}
func mod(key, v string, rv ResourceVersion) driver.Event[string] {
	return driver.Event[string]{Type: driver.Modified, Key: key, Object: v, HasObject: true, RV: rv}
}
func del(key string, rv ResourceVersion) driver.Event[string] {
	return driver.Event[string]{Type: driver.Deleted, Key: key, RV: rv}
}

// qadd queues a watch batch the way the reflector does: each event as a
// delta, bookmarks only moving the version.
func qadd(q Queue[string], evs []driver.Event[string]) error {
	var ds []Delta[string]
	var top ResourceVersion
	for _, ev := range evs {
		top = max(top, ev.RV)
		if ev.Type == driver.Bookmark {
			continue
		}
		d := Delta[string]{Key: ev.Key, Object: ev.Object, HasObject: ev.HasObject, RV: ev.RV}
		switch ev.Type {
		case driver.Added:
			d.Type, d.HasObject = DeltaAdded, true
		case driver.Modified:
			d.Type, d.HasObject = DeltaUpdated, true
		case driver.Deleted:
			d.Type = DeltaDeleted
		}
		ds = append(ds, d)
	}
	return q.Add(ds, top)
}

// qreplace streams a list taken at rv into q.
func qreplace(q Queue[string], list []driver.Event[string], rv ResourceVersion) error {
	return q.Replace(context.Background(), func(put func(Delta[string]) error) (ResourceVersion, error) {
		for _, ev := range list {
			if err := put(Delta[string]{Type: DeltaReplaced, Key: ev.Key, Object: ev.Object, HasObject: true}); err != nil {
				return 0, err
			}
		}
		return rv, nil
	})
}

// popAll drains q into a flat list of "Type key=obj" strings.
func popAll(t *testing.T, q Queue[string]) []string {
	t.Helper()
	var out []string
	for q.Len() > 0 {
		err := q.Pop(context.Background(), func(ds []Delta[string], _ bool) error {
			for _, d := range ds {
				s := fmt.Sprintf("%v %s=%s", d.Type, d.Key, d.Object)
				if d.FinalStateUnknown {
					s += " (unknown)"
				}
				out = append(out, s)
			}
			return nil
		})
		must(t, err)
	}
	return out
}

func bothQueues(t *testing.T, f func(t *testing.T, known *Indexer[string], q Queue[string])) {
	t.Run("DeltaFIFO", func(t *testing.T) {
		known := NewIndexer[string](nil)
		f(t, known, NewDeltaFIFO[string](known))
	})
	t.Run("FIFO", func(t *testing.T) {
		known := NewIndexer[string](nil)
		f(t, known, NewFIFO[string](known))
	})
}

func TestQueueReplaceEmitsTombstonesForVanishedKeys(t *testing.T) {
	bothQueues(t, func(t *testing.T, known *Indexer[string], q Queue[string]) {
		must(t, known.Add("gone", "g1"))
		must(t, known.Add("kept", "k1"))
		must(t, qadd(q, []driver.Event[string]{add("pending", "p1", 3)}))
		must(t, qreplace(q, []driver.Event[string]{add("kept", "k2", 0)}, 5))
		got := popAll(t, q)
		want := map[string]bool{
			"Added pending=p1":             true,
			"Deleted pending=p1 (unknown)": true,
			"Deleted gone=g1 (unknown)":    true,
			"Replaced kept=k2":             true,
		}
		if len(got) != len(want) {
			t.Fatalf("got %v", got)
		}
		for _, g := range got {
			if !want[g] {
				t.Fatalf("unexpected %q in %v", g, got)
			}
		}
		if q.AppliedVersion() != 5 {
			t.Fatalf("AppliedVersion = %d, want 5", q.AppliedVersion())
		}
	})
}

func TestQueueResyncSkipsKeysWithPendingDeltas(t *testing.T) {
	bothQueues(t, func(t *testing.T, known *Indexer[string], q Queue[string]) {
		must(t, known.Add("a", "a1"))
		must(t, known.Add("b", "b1"))
		must(t, qadd(q, []driver.Event[string]{mod("a", "a2", 2)}))
		must(t, q.Resync())
		got := popAll(t, q)
		want := []string{"Updated a=a2", "Sync b="} // key-only: the consumer reads its cache
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
}

func TestDeltaFIFODoubleDeletesCollapse(t *testing.T) {
	known := NewIndexer[string](nil)
	must(t, known.Add("a", "a1"))
	f := NewDeltaFIFO[string](known)
	must(t, qadd(f, []driver.Event[string]{{Type: driver.Deleted, Key: "a", Object: "a1", HasObject: true, RV: 2}}))
	// The relist's tombstone knows less than the watch's delete: keep the latter.
	must(t, known.Delete("a"))
	must(t, known.Add("a", "stale"))
	must(t, qreplace(f, nil, 3))
	ds, _ := f.Deltas("a")
	if len(ds) != 1 || ds[0].FinalStateUnknown || ds[0].Object != "a1" {
		t.Fatalf("deltas = %+v, want the single watch delete", ds)
	}
	// Two watch deletes: the newer wins.
	must(t, qadd(f, []driver.Event[string]{{Type: driver.Deleted, Key: "b", Object: "x", HasObject: true, RV: 4}}))
	ds, _ = f.Deltas("b")
	if len(ds) != 0 {
		t.Fatalf("delete of a key nobody knows was queued: %+v", ds)
	}
}

func TestDeltaFIFODeleteWithoutObjectTakesLastKnown(t *testing.T) {
	known := NewIndexer[string](nil)
	must(t, known.Add("a", "a1"))
	f := NewDeltaFIFO[string](known)
	must(t, qadd(f, []driver.Event[string]{del("a", 2), add("b", "b1", 3), del("b", 4)}))
	if got := popAll(t, f); !reflect.DeepEqual(got, []string{"Deleted a=a1", "Added b=b1", "Deleted b=b1"}) {
		t.Fatalf("got %v", got)
	}
}

// A delete without an object for a key Pop's process is applying right
// then (popped, not yet in the cache) is queued, with the object being
// applied, as for a queued key: dropped as a key nobody knows, the key
// stayed cached for good (TestInformerListThenWatch/DeltaFIFO failed on it
// now and then).
func TestDeltaFIFODeleteOfAKeyInFlight(t *testing.T) {
	known := NewIndexer[string](nil)
	f := NewDeltaFIFO[string](known)
	must(t, qadd(f, []driver.Event[string]{add("b", "b1", 3)}))
	must(t, f.Pop(context.Background(), func(ds []Delta[string], _ bool) error {
		must(t, qadd(f, []driver.Event[string]{del("b", 4)}))
		for _, d := range ds {
			must(t, known.Add(d.Key, d.Object))
		}
		return nil
	}))
	ds, _ := f.Deltas("b")
	if len(ds) != 1 || ds[0].Type != DeltaDeleted || ds[0].Object != "b1" {
		t.Fatalf("queued for b: %+v, want its delete with b1", ds)
	}
}

func TestQueueFailedProcessRequeues(t *testing.T) {
	bothQueues(t, func(t *testing.T, known *Indexer[string], q Queue[string]) {
		must(t, qadd(q, []driver.Event[string]{add("a", "a1", 1)}))
		err := q.Pop(context.Background(), func([]Delta[string], bool) error {
			return fmt.Errorf("handler failed: %w", ErrRequeue)
		})
		if !errors.Is(err, ErrRequeue) {
			t.Fatalf("Pop err = %v", err)
		}
		if q.AppliedVersion() != 0 {
			t.Fatalf("requeued change counted as applied: %d", q.AppliedVersion())
		}
		if got := popAll(t, q); !reflect.DeepEqual(got, []string{"Added a=a1"}) {
			t.Fatalf("after requeue got %v", got)
		}
		if q.AppliedVersion() != 1 {
			t.Fatalf("AppliedVersion = %d", q.AppliedVersion())
		}
	})
}

func TestQueueHasSyncedAfterInitialPopulation(t *testing.T) {
	bothQueues(t, func(t *testing.T, known *Indexer[string], q Queue[string]) {
		if q.HasSynced() {
			t.Fatal("synced before Replace")
		}
		must(t, qreplace(q, []driver.Event[string]{add("a", "1", 0), add("b", "2", 0)}, 7))
		must(t, qadd(q, []driver.Event[string]{add("c", "3", 8)}))
		var initial []bool
		if q.HasSynced() {
			t.Fatal("synced with the initial items pending")
		}
		for q.Len() > 0 {
			must(t, q.Pop(context.Background(), func(ds []Delta[string], in bool) error {
				for range ds {
					initial = append(initial, in)
				}
				return nil
			}))
		}
		if !q.HasSynced() {
			t.Fatal("not synced after draining")
		}
		if !reflect.DeepEqual(initial, []bool{true, true, false}) {
			t.Fatalf("isInInitialList = %v", initial)
		}
	})
}

func TestQueueEmptyReplaceSyncs(t *testing.T) {
	bothQueues(t, func(t *testing.T, known *Indexer[string], q Queue[string]) {
		must(t, qreplace(q, nil, 1))
		if !q.HasSynced() {
			t.Fatal("empty initial list must count as synced")
		}
	})
}

func TestQueueCloseAndContext(t *testing.T) {
	bothQueues(t, func(t *testing.T, known *Indexer[string], q Queue[string]) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := q.Pop(ctx, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("Pop on cancelled ctx = %v", err)
		}
		must(t, qadd(q, []driver.Event[string]{add("a", "1", 1)}))
		q.Close()
		if got := popAll(t, q); len(got) != 1 {
			t.Fatalf("queued item lost on Close: %v", got)
		}
		if err := q.Pop(context.Background(), nil); !errors.Is(err, ErrQueueClosed) {
			t.Fatalf("Pop on closed empty queue = %v", err)
		}
	})
}

func TestFIFOKeepsArrivalOrderAcrossKeys(t *testing.T) {
	q := NewFIFO[string](nil)
	must(t, qadd(q, []driver.Event[string]{add("a", "a1", 1), add("b", "b1", 2), mod("a", "a2", 3)}))
	if got := popAll(t, q); !reflect.DeepEqual(got, []string{"Added a=a1", "Added b=b1", "Updated a=a2"}) {
		t.Fatalf("got %v", got)
	}
	d := NewDeltaFIFO[string](nil)
	must(t, qadd(d, []driver.Event[string]{add("a", "a1", 1), add("b", "b1", 2), mod("a", "a2", 3)}))
	if got := popAll(t, d); !reflect.DeepEqual(got, []string{"Added a=a1", "Updated a=a2", "Added b=b1"}) {
		t.Fatalf("DeltaFIFO groups per key: got %v", got)
	}
}

func TestQueueAppliedVersionWaitsForWholeTransaction(t *testing.T) {
	bothQueues(t, func(t *testing.T, known *Indexer[string], q Queue[string]) {
		must(t, qadd(q, []driver.Event[string]{add("a", "1", 4), add("b", "1", 4)}))
		must(t, qadd(q, []driver.Event[string]{{Type: driver.Bookmark, RV: 9}}))
		if v := q.AppliedVersion(); v != 3 {
			t.Fatalf("AppliedVersion with rv 4 pending = %d, want 3", v)
		}
		popAll(t, q)
		if v := q.AppliedVersion(); v != 9 {
			t.Fatalf("AppliedVersion after drain = %d, want bookmark 9", v)
		}
	})
}

func TestFIFOKeepsTransactionsWhole(t *testing.T) {
	q := NewFIFO[string](nil)
	must(t, qreplace(q, nil, 1))
	var tx []driver.Event[string]
	for i := range 300 {
		tx = append(tx, add(fmt.Sprint(i), "v", 5))
	}
	must(t, qadd(q, []driver.Event[string]{add("before", "v", 4)}))
	must(t, qadd(q, tx))
	must(t, qadd(q, []driver.Event[string]{add("after", "v", 6)}))
	var sizes []int
	for q.Len() > 0 {
		must(t, q.Pop(context.Background(), func(ds []Delta[string], _ bool) error {
			sizes = append(sizes, len(ds))
			return nil
		}))
	}
	// The first run takes 256 deltas and extends to the end of version 5.
	if !reflect.DeepEqual(sizes, []int{301, 1}) {
		t.Fatalf("run sizes %v", sizes)
	}
}

// A relist's deltas carry the list's version but stand for every change up
// to it: while any is queued or in flight, AppliedVersion must not pass
// what was applied before the relist, or WaitFor returns before the listed
// objects are cached (found by the reliability suite on Postgres, where a
// List's version is always above a head read before it).
func TestAppliedVersionWaitsForPendingRelist(t *testing.T) {
	ctx := context.Background()
	ok := func([]Delta[string], bool) error { return nil }
	for name, q := range map[string]Queue[string]{"FIFO": NewFIFO[string](nil), "DeltaFIFO": NewDeltaFIFO[string](nil)} {
		t.Run(name, func(t *testing.T) {
			qadd(q, []driver.Event[string]{{Type: driver.Added, Key: "a", Object: "a", HasObject: true, RV: 5}})
			q.Pop(ctx, ok)
			if v := q.AppliedVersion(); v != 5 {
				t.Fatalf("applied %d after the first change, want 5", v)
			}
			qreplace(q, []driver.Event[string]{{Key: "a", Object: "a2"}, {Key: "b", Object: "b"}}, 10)
			if v := q.AppliedVersion(); v != 5 {
				t.Fatalf("applied %d with a relist pending, want 5", v)
			}
			// A requeued relist delta still holds the version back.
			q.Pop(ctx, func([]Delta[string], bool) error { return ErrRequeue })
			if v := q.AppliedVersion(); v != 5 {
				t.Fatalf("applied %d after a requeue of relist deltas, want 5", v)
			}
			// While a key is in flight, a second relist queues it again.
			q.Pop(ctx, func([]Delta[string], bool) error {
				qreplace(q, []driver.Event[string]{{Key: "a", Object: "a3"}, {Key: "b", Object: "b"}}, 20)
				return nil
			})
			if v := q.AppliedVersion(); v != 5 {
				t.Fatalf("applied %d with the second relist pending, want 5", v)
			}
			for q.Len() > 0 {
				q.Pop(ctx, ok)
			}
			if v := q.AppliedVersion(); v != 20 {
				t.Fatalf("applied %d after draining, want 20", v)
			}
		})
	}
}
