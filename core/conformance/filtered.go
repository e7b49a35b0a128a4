package conformance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
)

// Filtered is implemented by a Harness whose ListerWatcher is a partial
// sync (the adapter built with a filter.Filter, part of it pushed down to
// the server): RunFiltered checks the enter/leave semantics every filtered
// source owes its handlers. The suite writes keys named in.<w>-<k> and
// out.<w>-<k> (and out.x) with rising versions; a filter that keeps only
// in. keys (pushed down as a key range, a subject filter, ...) and, of
// those, only some versions (a condition evaluated on the decoded value)
// covers both halves of an adapter.
type Filtered interface {
	// Matches reports whether the object the Harness writes for key at
	// version n passes the ListerWatcher's filter. It depends on key and
	// n only.
	Matches(key string, n int64) bool
}

// RunFiltered checks, through an informer over newHarness's filtered
// ListerWatcher (which must implement Filtered), what a partial sync
// promises handlers (see package filter): while writers move keys in and
// out of the filter, each key's handler log is exactly its history (an add
// when it enters, updates while it matches, a delete carrying its last
// matching state when it leaves or is deleted), the cache equals the
// matching keys at the last write's version, a write that only non-matching
// keys see still advances WaitFor, and across a relist a key that left
// while the watch was down is a finalStateUnknown delete carrying its last
// matching state while a key that entered is an add.
func RunFiltered[T any](t *testing.T, caps Capabilities, newHarness func(t *testing.T) Harness[T]) {
	t.Helper()
	h := newHarness(t)
	f, ok := h.(Filtered)
	if !ok {
		t.Fatalf("conformance: RunFiltered needs a Harness that implements conformance.Filtered; %T does not", h)
	}
	ek := func(key string) string { return key }
	if m, ok := h.(KeyMapper); ok {
		ek = m.EventKey
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*caps.timeout())
	defer cancel()

	const writers, keysPerWriter, ops = 3, 4, 40
	var version atomic.Int64
	models := map[string]*enterLeave{}
	var keys []string
	for w := range writers {
		for k := range keysPerWriter {
			for _, side := range []string{"in", "out"} {
				key := fmt.Sprintf("%s.%d-%d", side, w, k)
				keys = append(keys, key)
				models[key] = &enterLeave{key: ek(key)}
			}
		}
	}
	put := func(key string) (core.ResourceVersion, int64) {
		n := version.Add(1)
		rv, err := h.Put(ctx, key, n)
		if err != nil {
			t.Errorf("Harness: put %q version %d: %v", key, n, err)
		}
		return rv, n
	}
	// Seed every key, so that some start inside the filter.
	for _, key := range keys {
		_, n := put(key)
		models[key].put(n, f.Matches(key, n), true)
	}
	if t.Failed() {
		return
	}

	spy := informertest.Wrap(h.ListerWatcher())
	rec := informertest.NewRecorder(t, h.Version)
	inf, errs := informertest.Run(t, spy, core.InformerOptions[T]{Name: "filtered", Backoff: core.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}}, rec)

	var wg sync.WaitGroup
	var mu sync.Mutex
	var last atomic.Uint64
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range ops {
				key := fmt.Sprintf("%s.%d-%d", []string{"in", "out"}[r.IntN(2)], w, r.IntN(keysPerWriter))
				m := models[key]
				if r.IntN(6) == 0 {
					rv, err := h.Delete(ctx, key)
					if err != nil {
						t.Errorf("Harness: delete %q: %v", key, err)
						return
					}
					mu.Lock()
					m.del()
					mu.Unlock()
					maxStore(&last, rv)
					continue
				}
				rv, n := put(key)
				mu.Lock()
				m.put(n, f.Matches(key, n), false)
				mu.Unlock()
				maxStore(&last, rv)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, key := range keys {
		want := models[key].log
		rec.Wait(fmt.Sprintf("%s: %q", ek(key), want), func(log []string, _ map[string]int64) bool {
			return slices.Equal(linesOf(log, ek(key)), want)
		})
	}
	informertest.WaitFor(t, inf, core.ResourceVersion(last.Load()))
	want := map[string]int64{}
	for _, m := range models {
		if m.held {
			want[m.key] = m.n
		}
	}
	got := map[string]int64{}
	inf.Indexer().Range(func(key string, obj T) bool {
		got[key] = h.Version(obj)
		return true
	})
	if !maps.Equal(got, want) {
		t.Fatalf("the cache differs from the keys the filter matches:\n\t%s", strings.Join(informertest.Diff("cache", got, want), "\n\t"))
	}
	if len(want) == 0 {
		t.Fatalf("the filter matched no key at the end: Matches keeps too little for the case to prove anything")
	}

	// A write that only a key outside the filter sees still advances
	// WaitFor: by the bookmark WaitFor asks a ProgressReporter for.
	if pr, ok := core.Capability[core.ProgressReporter](h.ListerWatcher()); ok && pr.ReportsProgress() {
		rv, n := put("out.x")
		if f.Matches("out.x", n) {
			t.Logf("out.x at version %d matches the filter: WaitFor of a write outside it is not checked", n)
		}
		informertest.WaitFor(t, inf, rv)
	}

	// Across a relist: one held key leaves the filter while the watch is
	// down, and another enters it. The leaving key's delete carries what
	// the cache held (the watch did not see the versions written meanwhile).
	held := slices.Sorted(maps.Keys(want))[0]
	var leaving string
	for _, key := range keys {
		if ek(key) == held {
			leaving = key
		}
	}
	gate := spy.HoldLists()
	spy.Break(fmt.Errorf("conformance: %w", core.ErrExpired))
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	lastV := models[leaving].n
	moved := false
	for range 8 {
		if _, n := put(leaving); !f.Matches(leaving, n) {
			moved = true
			break
		}
	}
	if !moved {
		t.Fatalf("Matches(%q, n) held for eight versions in a row: the case cannot move a key out", leaving)
	}
	// Entering: the first key not held that a write of a few versions
	// makes match.
	var entering string
	var enteredV int64
	for _, key := range keys {
		if models[key].held || key == leaving || entering != "" {
			continue
		}
		for range 4 {
			if _, n := put(key); f.Matches(key, n) {
				entering, enteredV = key, n
				break
			}
		}
	}
	gate.Release()
	rec.Wait(held+" leaves across the relist", func(log []string, _ map[string]int64) bool {
		l := linesOf(log, held)
		return len(l) > 0 && l[len(l)-1] == fmt.Sprintf("delete %s v=%d unknown", held, lastV)
	})
	if entering == "" {
		t.Errorf("no key could be made to enter the filter across the relist")
	} else {
		e := ek(entering)
		rec.Wait(e+" enters across the relist", func(log []string, _ map[string]int64) bool {
			l := linesOf(log, e)
			return len(l) > 0 && l[len(l)-1] == fmt.Sprintf("add %s v=%d", e, enteredV)
		})
	}
	if err := errs.Find(func(err error) bool { return !errors.Is(err, core.ErrExpired) }); err != nil {
		t.Errorf("unexpected error reported: %v", err)
	}
}

// enterLeave follows one key through its writes as a filtered informer's
// handler must see it: it enters as an add, changes as an update, and
// leaves (or is deleted while in) as a delete carrying the last matching
// version.
type enterLeave struct {
	key  string // as the ListerWatcher reports it
	held bool
	n    int64
	log  []string
}

func (m *enterLeave) put(n int64, in, initial bool) {
	suffix := ""
	if initial {
		suffix = " initial"
	}
	switch {
	case in && m.held:
		m.log = append(m.log, fmt.Sprintf("update %s %d->%d", m.key, m.n, n))
	case in:
		m.log = append(m.log, fmt.Sprintf("add %s v=%d%s", m.key, n, suffix))
	case m.held:
		m.log = append(m.log, fmt.Sprintf("delete %s v=%d", m.key, m.n))
	}
	if in {
		m.n = n
	}
	m.held = in
}

func (m *enterLeave) del() {
	if m.held {
		m.log = append(m.log, fmt.Sprintf("delete %s v=%d", m.key, m.n))
	}
	m.held = false
}

// linesOf returns the lines of a Recorder's log about key.
func linesOf(log []string, key string) []string {
	var out []string
	for _, l := range log {
		if f := strings.Fields(l); len(f) > 1 && f[1] == key {
			out = append(out, l)
		}
	}
	return out
}

func maxStore(a *atomic.Uint64, rv core.ResourceVersion) {
	for {
		cur := a.Load()
		if uint64(rv) <= cur || a.CompareAndSwap(cur, uint64(rv)) {
			return
		}
	}
}
