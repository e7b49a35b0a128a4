package reliability_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/integration/reliability"
)

// memAdapter runs the suite against core/memory. With dropDeletes its
// watches lose every delete, as a buggy adapter would, and the suite must
// catch it.
type memAdapter struct {
	src         *memory.Source[reliability.Obj]
	dropDeletes bool
}

func (m *memAdapter) Name() string { return "memory" }

func (m *memAdapter) Start(testing.TB, *rand.Rand) string {
	m.src = memory.New[reliability.Obj](memory.Options{})
	if m.dropDeletes {
		return "drops deletes"
	}
	return "faithful"
}

func (m *memAdapter) ListerWatcher() core.ListerWatcher[reliability.Obj] {
	if m.dropDeletes {
		return lossy{m.src}
	}
	return m.src
}

func (m *memAdapter) Put(_ context.Context, key string, ver int64) error {
	m.src.Put(key, reliability.Obj{K: key, V: ver})
	return nil
}

func (m *memAdapter) Delete(_ context.Context, key string) error {
	m.src.Delete(key)
	return nil
}

func (m *memAdapter) Truth(context.Context) (map[string]int64, error) {
	items, _ := m.src.Items()
	out := map[string]int64{}
	for k, o := range items {
		out[k] = o.V
	}
	return out, nil
}

func (m *memAdapter) Head(context.Context) (core.ResourceVersion, error) { return m.src.HeadRV(), nil }
func (m *memAdapter) Version(o reliability.Obj) int64                    { return o.V }
func (m *memAdapter) Heal(testing.TB)                                    {}
func (m *memAdapter) Stop(testing.TB)                                    {}

func (m *memAdapter) Faults() []reliability.Fault {
	// No expiry for the lossy variant: a relist would repair what the
	// watch lost, and the point is to see the loss.
	if m.dropDeletes {
		return []reliability.Fault{reliability.Cut}
	}
	return []reliability.Fault{reliability.Cut, reliability.Expire}
}

func (m *memAdapter) Inject(t testing.TB, _ context.Context, f reliability.Fault) (func(), bool) {
	switch f {
	case reliability.Cut:
		m.src.BreakWatchers(errors.New("connection cut"))
	case reliability.Expire:
		if err := m.src.Compact(m.src.HeadRV()); err != nil {
			t.Fatal(err)
		}
		m.src.BreakWatchers(errors.New("connection cut"))
	}
	return nil, true
}

type lossy struct {
	*memory.Source[reliability.Obj]
}

func (l lossy) Watch(ctx context.Context, from core.ResourceVersion) (core.Watcher[reliability.Obj], error) {
	w, err := l.Source.Watch(ctx, from)
	if err != nil {
		return nil, err
	}
	return lossyWatcher{w}, nil
}

type lossyWatcher struct{ core.Watcher[reliability.Obj] }

func (w lossyWatcher) Next(ctx context.Context) ([]core.Event[reliability.Obj], error) {
	evs, err := w.Watcher.Next(ctx)
	kept := evs[:0]
	for _, e := range evs {
		if e.Type != core.Deleted {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 && len(evs) > 0 {
		// Keep the batch's version moving, as the lost delete's bookmark.
		last := evs[len(evs)-1]
		kept = append(kept, core.Event[reliability.Obj]{Type: core.Bookmark, RV: last.RV})
	}
	return kept, err
}

// The suite passes a faithful source and catches one that loses deletes:
// the checks can fail.
func TestSuiteCatchesLostDeletes(t *testing.T) {
	cfg := reliability.Config{Ops: 100, FaultsPerKind: 2}
	for seed := uint64(1); seed <= 2; seed++ {
		if res := reliability.Run(t, &memAdapter{}, seed, cfg); len(res.Divergences) > 0 {
			t.Errorf("faithful source: %s", res.Failure())
		}
		res := reliability.Run(t, &memAdapter{dropDeletes: true}, seed, cfg)
		if len(res.Divergences) == 0 {
			t.Errorf("seed %d: a source that loses deletes passed", seed)
			continue
		}
		if !strings.Contains(res.Failure(), "the source deleted it") {
			t.Errorf("seed %d: divergence does not name the deleted key:\n%s", seed, res.Failure())
		}
	}
}
