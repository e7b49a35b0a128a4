package core

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dbinformer/dbinformer/core/driver"
)

func TestWatermarkChangesHoldTheVersionBack(t *testing.T) {
	var w watermark
	var changes versionSet
	for _, rv := range []ResourceVersion{4, 4, 7} {
		changes.add(rv)
		w.advance(rv)
	}
	w.advance(9) // a bookmark after them
	if v := w.applied(changes.min()); v != 3 {
		t.Fatalf("applied %d with version 4 pending, want 3", v)
	}
	changes.remove(4)
	if v := w.applied(changes.min()); v != 3 {
		t.Fatalf("applied %d with half of version 4 pending, want 3", v)
	}
	changes.remove(4)
	if v := w.applied(changes.min()); v != 6 {
		t.Fatalf("applied %d with version 7 pending, want 6", v)
	}
	changes.remove(7)
	if v := w.applied(changes.min()); v != 9 {
		t.Fatalf("applied %d with nothing pending, want the bookmark 9", v)
	}
	if v := w.applied(0, true); v != 0 {
		t.Fatalf("applied %d with a change at version 0 pending, want 0", v)
	}
}

func TestWatermarkListHoldsTheFloorUntilProcessed(t *testing.T) {
	var w watermark
	w.advance(5)
	w.beginList(w.applied(0, false))
	listed := []Delta[string]{{Type: DeltaReplaced, Key: "a"}, {Type: DeltaReplaced, Key: "b"}}
	for i := range listed {
		queuedDelta(&w, &listed[i])
	}
	// Processed while the list still streams: still the floor.
	doneDelta(&w, &listed[0])
	doneDelta(&w, &listed[1])
	if v := w.applied(0, false); v != 5 {
		t.Fatalf("applied %d while the list streams, want the floor 5", v)
	}
	tomb := Delta[string]{Type: DeltaDeleted, Key: "gone", FinalStateUnknown: true, RV: 20}
	queuedDelta(&w, &tomb)
	w.endList(20)
	if v := w.applied(0, false); v != 5 {
		t.Fatalf("applied %d with an inferred delete pending, want the floor 5", v)
	}
	doneDelta(&w, &tomb)
	if v := w.applied(0, false); v != 20 {
		t.Fatalf("applied %d after the whole list, want 20", v)
	}
	// A list that fails holds the version while its deltas are pending,
	// then leaves it where it was.
	w.beginList(w.applied(0, false))
	d := Delta[string]{Type: DeltaReplaced, Key: "a"}
	queuedDelta(&w, &d)
	w.abortList()
	if v := w.applied(0, false); v != 20 {
		t.Fatalf("applied %d, want 20", v)
	}
	doneDelta(&w, &d)
	if v := w.applied(0, false); v != 20 {
		t.Fatalf("applied %d after a failed list, want 20", v)
	}
}

// Resync deltas are not changes: a pending one does not hold the version.
func TestQueueSyncDeltasDoNotHoldTheVersion(t *testing.T) {
	bothQueues(t, func(t *testing.T, known *Indexer[string], q Queue[string]) {
		must(t, known.Add("a", "a1"))
		must(t, qadd(q, []driver.Event[string]{{Type: driver.Bookmark, RV: 8}}))
		must(t, q.Resync())
		if q.Len() != 1 || q.AppliedVersion() != 8 {
			t.Fatalf("%d pending, applied %d; want a resync pending at 8", q.Len(), q.AppliedVersion())
		}
	})
}

// FIFO finds the smallest pending change behind any number of list and
// sync deltas, and in flight.
func TestFIFOAppliedVersionBehindSyncs(t *testing.T) {
	known := NewIndexer[string](nil)
	for i := range 10 {
		must(t, known.Add(fmt.Sprint(i), "v"))
	}
	q := NewFIFO[string](known)
	must(t, qadd(q, []driver.Event[string]{{Type: driver.Bookmark, RV: 3}}))
	must(t, q.Resync())
	must(t, qadd(q, []driver.Event[string]{add("x", "x1", 4), add("y", "y1", 6)}))
	if v := q.AppliedVersion(); v != 3 {
		t.Fatalf("applied %d, want 3", v)
	}
	q.maxBatch = 11 // the syncs and x
	must(t, q.Pop(context.Background(), func([]Delta[string], bool) error {
		if v := q.AppliedVersion(); v != 3 {
			t.Errorf("applied %d with x in flight, want 3", v)
		}
		return nil
	}))
	if v := q.AppliedVersion(); v != 5 {
		t.Fatalf("applied %d with y pending, want 5", v)
	}
}

// versionSet against a sorted slice, with adds mostly ascending and
// removals in any order.
func TestVersionSetAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s versionSet
	var model []ResourceVersion
	next := ResourceVersion(1)
	for range 20000 {
		if len(model) == 0 || rng.IntN(3) > 0 {
			rv := next
			if rng.IntN(10) == 0 && next > 5 {
				rv = next - ResourceVersion(rng.IntN(5)) // out of order
			} else if rng.IntN(2) == 0 {
				next++
			}
			s.add(rv)
			model = append(model, rv)
			slices.Sort(model)
		} else {
			i := rng.IntN(len(model))
			s.remove(model[i])
			model = slices.Delete(model, i, i+1)
		}
		m, ok := s.min()
		if ok != (len(model) > 0) || (ok && m != model[0]) {
			t.Fatalf("min = %d, %v; model %v", m, ok, model[:min(len(model), 5)])
		}
	}
}
