package core

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestWatermarkChangesHoldTheVersionBack(t *testing.T) {
	var w watermark
	a := Delta[string]{Type: DeltaAdded, Key: "a", RV: 4}
	b := Delta[string]{Type: DeltaUpdated, Key: "b", RV: 4}
	c := Delta[string]{Type: DeltaDeleted, Key: "c", RV: 7}
	for _, d := range []*Delta[string]{&a, &b, &c} {
		queuedDelta(&w, d)
		w.advance(d.RV)
	}
	w.advance(9) // a bookmark after them
	if v := w.applied(); v != 3 {
		t.Fatalf("applied %d with version 4 pending, want 3", v)
	}
	doneDelta(&w, &a)
	if v := w.applied(); v != 3 {
		t.Fatalf("applied %d with half of version 4 pending, want 3", v)
	}
	doneDelta(&w, &b)
	if v := w.applied(); v != 6 {
		t.Fatalf("applied %d with version 7 pending, want 6", v)
	}
	doneDelta(&w, &c)
	if v := w.applied(); v != 9 {
		t.Fatalf("applied %d with nothing pending, want the bookmark 9", v)
	}
}

func TestWatermarkListHoldsTheFloorUntilProcessed(t *testing.T) {
	var w watermark
	w.advance(5)
	w.beginList()
	listed := []Delta[string]{{Type: DeltaReplaced, Key: "a"}, {Type: DeltaReplaced, Key: "b"}}
	for i := range listed {
		queuedDelta(&w, &listed[i])
	}
	// Processed while the list still streams: still the floor.
	doneDelta(&w, &listed[0])
	doneDelta(&w, &listed[1])
	if v := w.applied(); v != 5 {
		t.Fatalf("applied %d while the list streams, want the floor 5", v)
	}
	tomb := Delta[string]{Type: DeltaDeleted, Key: "gone", FinalStateUnknown: true, RV: 20}
	queuedDelta(&w, &tomb)
	w.endList(20)
	if v := w.applied(); v != 5 {
		t.Fatalf("applied %d with an inferred delete pending, want the floor 5", v)
	}
	doneDelta(&w, &tomb)
	if v := w.applied(); v != 20 {
		t.Fatalf("applied %d after the whole list, want 20", v)
	}
	// A list that fails holds the version while its deltas are pending,
	// then leaves it where it was.
	w.beginList()
	d := Delta[string]{Type: DeltaReplaced, Key: "a"}
	queuedDelta(&w, &d)
	w.abortList()
	if v := w.applied(); v != 20 {
		t.Fatalf("applied %d, want 20", v)
	}
	doneDelta(&w, &d)
	if v := w.applied(); v != 20 {
		t.Fatalf("applied %d after a failed list, want 20", v)
	}
}

func TestWatermarkSyncDeltasDoNotHoldTheVersion(t *testing.T) {
	var w watermark
	w.advance(8)
	s := Delta[string]{Type: DeltaSync, Key: "a"}
	queuedDelta(&w, &s)
	if v := w.applied(); v != 8 {
		t.Fatalf("applied %d with a resync pending, want 8", v)
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
