package core

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/core/driver"
)

// By default a key whose change does not decode leaves the cache: handlers
// see a delete with finalStateUnknown and the last state that decoded, the
// error path sees the *DecodeError, and the key returns with its next
// change that decodes. A delete that does not decode still deletes.
func TestUndecodableChangeRemovesTheKey(t *testing.T) {
	bothModes(t, func(t *testing.T, deltaFIFO bool) {
		lw := newFakeLW()
		inf, _, ec := newTestInformer(lw, InformerOptions[string]{
			DeltaFIFO: deltaFIFO,
			Transform: func(s string) (string, error) {
				if s == "reject" {
					return "", errors.New("rejected")
				}
				return s, nil
			},
		})
		rec := newRecorder()
		_, err := inf.AddEventHandler(rec)
		must(t, err)
		started(t, inf)
		lw.list(t, 5, add("a", "a1", 0), add("b", "b1", 0), add("c", "c1", 0))
		must(t, inf.WaitForCacheSync(testCtx(t)))
		rec.expectSet(t, "add a=a1 initial=true", "add b=b1 initial=true", "add c=c1 initial=true")
		w := lw.watch(t)
		w.send(t, driver.Event[string]{Type: driver.Modified, Key: "a", RV: 6, Err: errors.New("a producer wrote a shape T cannot hold")})
		must(t, inf.WaitFor(testCtx(t), 6))
		rec.expect(t, "delete a=a1 unknown=true")
		if v, ok := inf.Lister().Get("a"); ok {
			t.Fatalf("a = %q after a change that did not decode", v)
		}
		var de *driver.DecodeError
		if ec.find(func(e error) bool { return errors.As(e, &de) && de.Key == "a" && de.RV == 6 }) == nil {
			t.Fatalf("the decode error did not reach the error path: %v", ec.errs)
		}
		w.send(t, driver.Event[string]{Type: driver.Modified, Key: "a", Object: "a3", HasObject: true, RV: 7})
		must(t, inf.WaitFor(testCtx(t), 7))
		rec.expect(t, "add a=a3 initial=false")

		// Transform's rejection is the same kind of failure.
		w.send(t, driver.Event[string]{Type: driver.Modified, Key: "b", Object: "reject", HasObject: true, RV: 8})
		must(t, inf.WaitFor(testCtx(t), 8))
		rec.expect(t, "delete b=b1 unknown=true")

		// A delete whose last object does not decode still deletes.
		w.send(t, driver.Event[string]{Type: driver.Deleted, Key: "c", RV: 9, Err: errors.New("old value undecodable")})
		must(t, inf.WaitFor(testCtx(t), 9))
		rec.expect(t, "delete c=c1 unknown=true")
		if n := inf.Indexer().Len(); n != 1 {
			t.Fatalf("cache holds %d keys, want only a", n)
		}
		if !inf.Live() {
			t.Fatalf("a running informer that dropped undecodable keys is not Live: %s", inf.SyncStatus())
		}
	})
}

// StopOnUndecodable freezes the cache at the batch before the bad change
// and ends the run with a permanent error; HasSynced keeps its client-go
// meaning while Live, SyncStatus and WaitFor tell the cache is frozen.
func TestUndecodableChangeStopsTheInformer(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{Undecodable: StopOnUndecodable})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	lw.list(t, 5, add("a", "a1", 0))
	must(t, inf.WaitForCacheSync(testCtx(t)))
	if !inf.Live() {
		t.Fatalf("a synced, running informer is not Live: %s", inf.SyncStatus())
	}
	w := lw.watch(t)
	w.send(t, driver.Event[string]{Type: driver.Modified, Key: "b", Object: "b1", HasObject: true, RV: 6},
		driver.Event[string]{Type: driver.Modified, Key: "a", RV: 6, Err: errors.New("bad value")})
	err := <-done
	var de *driver.DecodeError
	if !errors.Is(err, driver.ErrPermanent) || !errors.As(err, &de) || de.Key != "a" {
		t.Fatalf("Run = %v; want a permanent error wrapping the DecodeError of a", err)
	}
	if v, _ := inf.Lister().Get("a"); v != "a1" {
		t.Fatalf("a = %q; the frozen cache should hold what it had", v)
	}
	if _, ok := inf.Lister().Get("b"); ok {
		t.Fatal("part of the batch that held the bad change was applied")
	}
	if !inf.HasSynced() {
		t.Error("HasSynced turned false; client-go's meaning is that it never does")
	}
	if inf.Live() {
		t.Error("Live on a cache frozen by a permanent failure")
	}
	st := inf.SyncStatus()
	if !errors.Is(st.Stopped, driver.ErrPermanent) || !strings.HasPrefix(st.String(), "stopped: ") {
		t.Errorf("SyncStatus = %q (Stopped %v); want it stopped with the error", st, st.Stopped)
	}
	if err := inf.WaitFor(testCtx(t), 6); !errors.Is(err, driver.ErrPermanent) {
		t.Errorf("WaitFor on a frozen cache = %v; want the permanent failure", err)
	}
}

// Under StopOnUndecodable an object of a list that does not decode stops
// the informer before it syncs.
func TestUndecodableListStopsTheInformer(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{Undecodable: StopOnUndecodable})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	lw.list(t, 5, add("a", "a1", 0), driver.Event[string]{Type: driver.Added, Key: "bad", RV: 5, Err: errors.New("invalid utf8")})
	if err := <-done; !errors.Is(err, driver.ErrPermanent) {
		t.Fatalf("Run = %v; want a permanent error", err)
	}
	if err := inf.WaitForCacheSync(testCtx(t)); !errors.Is(err, driver.ErrPermanent) {
		t.Fatalf("WaitForCacheSync = %v", err)
	}
	if st := inf.SyncStatus().String(); !strings.HasPrefix(st, "stopped before it synced: ") {
		t.Errorf("SyncStatus = %q", st)
	}
}
