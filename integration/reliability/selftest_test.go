package reliability_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/integration/reliability"
)

// memHarness runs the suite against core/memory, faults through an
// informertest.Spy. With dropDeletes its watches lose every delete, as a
// buggy adapter would, and the suite must catch it.
type memHarness struct {
	src         *memory.Source[reliability.Obj]
	spy         *informertest.Spy[reliability.Obj]
	dropDeletes bool
}

func newMemHarness(dropDeletes bool) reliability.MakeHarness[reliability.Obj] {
	return func(t testing.TB, _ *rand.Rand) (conformance.Harness[reliability.Obj], string) {
		src := memory.New[reliability.Obj](memory.Options{})
		var lw driver.ListerWatcher[reliability.Obj] = src
		variant := "faithful"
		if dropDeletes {
			lw, variant = lossy{src}, "drops deletes"
		}
		return &memHarness{src: src, spy: informertest.Wrap(lw), dropDeletes: dropDeletes}, variant
	}
}

var _ reliability.Harness[reliability.Obj] = (*memHarness)(nil)

func (m *memHarness) ListerWatcher() driver.ListerWatcher[reliability.Obj] { return m.spy }

func (m *memHarness) Put(_ context.Context, key string, ver int64) (core.ResourceVersion, error) {
	return m.src.Put(key, reliability.Obj{K: key, V: ver}), nil
}

func (m *memHarness) Delete(_ context.Context, key string) (core.ResourceVersion, error) {
	rv, _ := m.src.Delete(key)
	return rv, nil
}

func (m *memHarness) Truth(context.Context) (map[string]int64, error) {
	items, _ := m.src.Items()
	out := map[string]int64{}
	for k, o := range items {
		out[k] = o.V
	}
	return out, nil
}

func (m *memHarness) Head(context.Context) (core.ResourceVersion, error) { return m.src.HeadRV(), nil }
func (m *memHarness) Version(o reliability.Obj) int64                    { return o.V }
func (m *memHarness) Heal(testing.TB)                                    {}

func (m *memHarness) Faults() []conformance.Fault {
	// No expiry for the lossy variant: a relist would repair what the
	// watch lost, and the point is to see the loss.
	if m.dropDeletes {
		return []conformance.Fault{conformance.Cut}
	}
	return []conformance.Fault{conformance.Cut, conformance.Expire}
}

func (m *memHarness) Inject(t testing.TB, _ context.Context, f conformance.Fault) (func(), bool) {
	switch f {
	case conformance.Cut:
		m.spy.Break(errors.New("connection cut"))
	case conformance.Expire:
		if err := m.src.Compact(m.src.HeadRV()); err != nil {
			t.Fatal(err)
		}
		m.spy.Break(errors.New("connection cut"))
	}
	return nil, true
}

// lossy drops every delete its watches see.
type lossy struct {
	*memory.Source[reliability.Obj]
}

func (l lossy) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[reliability.Obj]) error {
	emit := opts.Emit
	opts.Emit = func(evs []driver.Event[reliability.Obj]) error {
		var kept []driver.Event[reliability.Obj]
		for _, e := range evs {
			if e.Type != driver.Deleted {
				kept = append(kept, e)
			}
		}
		if len(kept) == 0 {
			// Keep the batch's version moving, as the lost delete's
			// bookmark.
			kept = append(kept, driver.Event[reliability.Obj]{Type: driver.Bookmark, RV: evs[len(evs)-1].RV})
		}
		return emit(kept)
	}
	return l.Source.Watch(ctx, from, opts)
}

// The suite passes a faithful source and catches one that loses deletes:
// the checks can fail. The faithful runs also measure convergence.
func TestSuiteCatchesLostDeletes(t *testing.T) {
	cfg := reliability.Config{Ops: 100, FaultsPerKind: 2}
	for seed := uint64(1); seed <= 2; seed++ {
		res := reliability.Run(t, "memory", newMemHarness(false), seed, cfg)
		if len(res.Divergences) > 0 {
			t.Errorf("faithful source: %s", res.Failure())
		}
		if a := res.Audit; a.Runs == 0 || a.Runs != a.Equal+a.Divergent+a.Failed {
			t.Errorf("faithful source: audits %v", a)
		}
		n := 0
		for _, f := range []conformance.Fault{conformance.Cut, conformance.Expire} {
			n += len(res.Converge[f]) + len(res.Overlapped[f])
		}
		if n != 4 {
			t.Errorf("seed %d: %d convergence times for 4 faults: %v, overlapped %v", seed, n, res.Converge, res.Overlapped)
		}
		res = reliability.Run(t, "memory", newMemHarness(true), seed, cfg)
		if len(res.Divergences) == 0 {
			t.Errorf("seed %d: a source that loses deletes passed", seed)
			continue
		}
		if !strings.Contains(res.Failure(), "want it absent") {
			t.Errorf("seed %d: divergence does not name the deleted key:\n%s", seed, res.Failure())
		}
		// The audit after the final checks sees the keys the watch did
		// not delete, and, the checks having failed, it is no false
		// positive.
		if a := res.Audit; a.Divergent == 0 || a.FalsePositives != 0 || !strings.Contains(res.Failure(), "extra") {
			t.Errorf("seed %d: the audit of a source that loses deletes said %v, %d false positives:\n%s", seed, a, a.FalsePositives, res.Failure())
		}
	}
}

// core/memory is registered as an adapter too: TestReliability runs it
// beside the real servers, a baseline with no network in the way.
func init() { reliability.Register("memory", newMemHarness(false)) }

// Registered adapters run through Lookup and Adapters; a name registers
// once.
func TestRegister(t *testing.T) {
	a, ok := reliability.Lookup("memory")
	if !ok {
		t.Fatal("registered adapter not found")
	}
	found := false
	for _, b := range reliability.Adapters() {
		found = found || b.Name == a.Name
	}
	if !found {
		t.Error("registered adapter not listed")
	}
	if res := a.Run(t, 3, reliability.Config{Ops: 20}); len(res.Divergences) > 0 || res.Adapter != "memory" {
		t.Errorf("%s", res.Failure())
	}
	defer func() {
		if recover() == nil {
			t.Error("a second Register of one name did not panic")
		}
	}()
	reliability.Register("memory", newMemHarness(false))
}
