package core

import (
	"errors"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/core/driver"
)

// A Modified event with a Fill is completed from the cached object of its
// key, in order (a second fill in one batch sees the first's result), with
// Transform applied after the fill. With no cached object, or when Fill
// fails, the error path names the key and the key does not keep a stale
// or zeroed state.
func TestEventFillFromCache(t *testing.T) {
	bothModes(t, func(t *testing.T, deltaFIFO bool) {
		lw := newFakeLW()
		inf, _, ec := newTestInformer(lw, InformerOptions[string]{
			DeltaFIFO: deltaFIFO,
			Transform: func(s string) (string, error) { return strings.ToUpper(s), nil },
		})
		rec := newRecorder()
		_, err := inf.AddEventHandler(rec)
		must(t, err)
		started(t, inf)
		lw.list(t, 5, add("a", "a1", 0), add("b", "b1", 0), add("c", "c1", 0))
		must(t, inf.WaitForCacheSync(testCtx(t)))
		rec.expectSet(t, "add a=A1 initial=true", "add b=B1 initial=true", "add c=C1 initial=true")
		w := lw.watch(t)
		suffix := func(s string) func(string) (string, error) {
			return func(cached string) (string, error) { return cached + s, nil }
		}
		w.send(t,
			driver.Event[string]{Type: driver.Modified, Key: "a", Object: "partial", HasObject: true, RV: 6, Fill: suffix("-f")},
			driver.Event[string]{Type: driver.Modified, Key: "a", Object: "partial", HasObject: true, RV: 7, Fill: suffix("-g")},
		)
		must(t, inf.WaitFor(testCtx(t), 7))
		rec.expect(t, "update a A1->A1-F", "update a A1-F->A1-F-G")
		if v, _ := inf.Lister().Get("a"); v != "A1-F-G" {
			t.Fatalf("a = %q, want A1-F-G", v)
		}

		// No cached object to fill from: reported, nothing cached.
		w.send(t, driver.Event[string]{Type: driver.Modified, Key: "z", Object: "partial", HasObject: true, RV: 8, Fill: suffix("-f")})
		must(t, inf.WaitFor(testCtx(t), 8))
		if v, ok := inf.Lister().Get("z"); ok {
			t.Fatalf("z = %q: filled from nothing", v)
		}
		if ec.find(func(e error) bool {
			return strings.Contains(e.Error(), `key "z"`) && strings.Contains(e.Error(), "holds no object")
		}) == nil {
			t.Fatalf("no error names the key without a cached object: %v", ec.errs)
		}

		// Fill fails: the key leaves the cache as an undecodable change.
		w.send(t, driver.Event[string]{Type: driver.Modified, Key: "b", Object: "partial", HasObject: true, RV: 9, Fill: func(string) (string, error) {
			return "", errors.New(`column "big": no value`)
		}})
		must(t, inf.WaitFor(testCtx(t), 9))
		rec.expect(t, "delete b=B1 unknown=true")
		if ec.find(func(e error) bool {
			return strings.Contains(e.Error(), `key "b"`) && strings.Contains(e.Error(), `column "big"`)
		}) == nil {
			t.Fatalf("the fill error did not reach the error path: %v", ec.errs)
		}

		// A Fill on anything but a Modified event is undecodable.
		w.send(t, driver.Event[string]{Type: driver.Added, Key: "c", Object: "partial", HasObject: true, RV: 10, Fill: suffix("-f")})
		must(t, inf.WaitFor(testCtx(t), 10))
		rec.expect(t, "delete c=C1 unknown=true")
		var de *driver.DecodeError
		if ec.find(func(e error) bool { return errors.As(e, &de) && de.Key == "c" }) == nil {
			t.Fatalf("a Fill on an Added event was not reported as undecodable: %v", ec.errs)
		}
		if n := inf.Indexer().Len(); n != 1 {
			t.Fatalf("cache holds %d keys, want only a", n)
		}

		// A wrapper turned a Fill event into a delete (shard.Source): the
		// handlers get the cached object, not the partial one.
		w.send(t, driver.Event[string]{Type: driver.Deleted, Key: "a", Object: "partial", HasObject: true, RV: 11, Fill: suffix("-f")})
		must(t, inf.WaitFor(testCtx(t), 11))
		rec.expect(t, "delete a=A1-F-G unknown=false")
	})
}
