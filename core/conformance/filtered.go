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
	"github.com/dbinformer/dbinformer/core/driver"
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*caps.timeout())
	defer cancel()
	r := newFilteredRun(t, ctx, h, f)
	// Seed every key, so that some start inside the filter.
	for _, key := range r.keys {
		_, n := r.put(key)
		r.models[key].put(n, f.Matches(key, n), true)
	}
	if t.Failed() {
		return
	}
	r.spy = informertest.Wrap(h.ListerWatcher())
	r.rec = informertest.NewRecorder(t, h.Version)
	inf, errs := informertest.Run(t, r.spy, core.InformerOptions[T]{Name: "filtered", Backoff: core.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}}, r.rec)
	r.inf = inf
	last := r.writeConcurrently()
	if t.Failed() {
		return
	}
	held := r.checkSettled(last)
	r.checkWaitForOutside()
	r.checkRelist(held)
	if err := errs.Find(func(err error) bool { return !errors.Is(err, driver.ErrExpired) }); err != nil {
		t.Errorf("unexpected error reported: %v", err)
	}
}

// Sizes of RunFiltered's concurrent writes.
const filtWriters, filtKeysPerWriter, filtOps = 3, 4, 40

// filteredRun is one run of RunFiltered: the harness, each key's model of
// what its handler must hear, and the informer checked, shared by the
// run's phases so that each can be read on its own.
type filteredRun[T any] struct {
	t       *testing.T
	ctx     context.Context
	h       Harness[T]
	f       Filtered
	ek      func(string) string // suite key → event key
	version atomic.Int64
	models  map[string]*enterLeave // by suite key
	keys    []string               // suite keys, in.<w>-<k> and out.<w>-<k>
	spy     *informertest.Spy[T]
	rec     *informertest.Recorder[T]
	inf     *core.SharedIndexInformer[T]
}

// newFilteredRun names the keys RunFiltered writes and models each.
func newFilteredRun[T any](t *testing.T, ctx context.Context, h Harness[T], f Filtered) *filteredRun[T] {
	r := &filteredRun[T]{t: t, ctx: ctx, h: h, f: f, ek: func(key string) string { return key }, models: map[string]*enterLeave{}}
	if m, ok := h.(KeyMapper); ok {
		r.ek = m.EventKey
	}
	for w := range filtWriters {
		for k := range filtKeysPerWriter {
			for _, side := range []string{"in", "out"} {
				key := fmt.Sprintf("%s.%d-%d", side, w, k)
				r.keys = append(r.keys, key)
				r.models[key] = &enterLeave{key: r.ek(key)}
			}
		}
	}
	return r
}

// put writes key at the next version; the writers call it concurrently.
func (r *filteredRun[T]) put(key string) (core.ResourceVersion, int64) {
	n := r.version.Add(1)
	rv, err := r.h.Put(r.ctx, key, n)
	if err != nil {
		r.t.Errorf("Harness: put %q version %d: %v", key, n, err)
	}
	return rv, n
}

// writeConcurrently has writers move their keys in and out of the filter
// (and delete them) while the informer runs, and returns the highest RV
// written.
func (r *filteredRun[T]) writeConcurrently() core.ResourceVersion {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last atomic.Uint64
	for w := range filtWriters {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range filtOps {
				key := fmt.Sprintf("%s.%d-%d", []string{"in", "out"}[rng.IntN(2)], w, rng.IntN(filtKeysPerWriter))
				m := r.models[key]
				if rng.IntN(6) == 0 {
					rv, err := r.h.Delete(r.ctx, key)
					if err != nil {
						r.t.Errorf("Harness: delete %q: %v", key, err)
						return
					}
					mu.Lock()
					m.del()
					mu.Unlock()
					maxStore(&last, rv)
					continue
				}
				rv, n := r.put(key)
				mu.Lock()
				m.put(n, r.f.Matches(key, n), false)
				mu.Unlock()
				maxStore(&last, rv)
			}
		})
	}
	wg.Wait()
	return core.ResourceVersion(last.Load())
}

// checkSettled checks, once the writes are done, that each key's handler
// log is exactly its modelled history and that the cache equals the
// matching keys; it returns the first key held (by event key).
func (r *filteredRun[T]) checkSettled(last core.ResourceVersion) string {
	t := r.t
	t.Helper()
	for _, key := range r.keys {
		want := r.models[key].log
		ek := r.ek(key)
		r.rec.Wait(fmt.Sprintf("%s: %q", ek, want), func(log []string, _ map[string]int64) bool {
			return slices.Equal(linesOf(log, ek), want)
		})
	}
	informertest.WaitFor(t, r.inf, last)
	want := map[string]int64{}
	for _, m := range r.models {
		if m.held {
			want[m.key] = m.n
		}
	}
	got := map[string]int64{}
	r.inf.Indexer().Range(func(key string, obj T) bool {
		got[key] = r.h.Version(obj)
		return true
	})
	if !maps.Equal(got, want) {
		t.Fatalf("the cache differs from the keys the filter matches:\n\t%s", strings.Join(informertest.Diff("cache", got, want), "\n\t"))
	}
	if len(want) == 0 {
		t.Fatalf("the filter matched no key at the end: Matches keeps too little for the case to prove anything")
	}
	return slices.Sorted(maps.Keys(want))[0]
}

// checkWaitForOutside checks that a write that only a key outside the
// filter sees still advances WaitFor: by the bookmark WaitFor asks a
// ProgressReporter for.
func (r *filteredRun[T]) checkWaitForOutside() {
	r.t.Helper()
	if pr, ok := driver.Capability[driver.ProgressReporter](r.h.ListerWatcher()); ok && pr.ReportsProgress() {
		rv, n := r.put("out.x")
		if r.f.Matches("out.x", n) {
			r.t.Logf("out.x at version %d matches the filter: WaitFor of a write outside it is not checked", n)
		}
		informertest.WaitFor(r.t, r.inf, rv)
	}
}

// checkRelist checks across a relist: held (an event key) leaves the
// filter while the watch is down, and another key enters it. The leaving
// key's delete carries what the cache held (the watch did not see the
// versions written meanwhile).
func (r *filteredRun[T]) checkRelist(held string) {
	t := r.t
	t.Helper()
	var leaving string
	for _, key := range r.keys {
		if r.ek(key) == held {
			leaving = key
		}
	}
	gate := r.spy.HoldLists()
	r.spy.Break(fmt.Errorf("conformance: %w", driver.ErrExpired))
	if err := gate.Wait(r.ctx); err != nil {
		t.Fatal(err)
	}
	lastV := r.models[leaving].n
	moved := false
	for range 8 {
		if _, n := r.put(leaving); !r.f.Matches(leaving, n) {
			moved = true
			break
		}
	}
	if !moved {
		t.Fatalf("Matches(%q, n) held for eight versions in a row: the case cannot move a key out", leaving)
	}
	entering, enteredV := r.enter(leaving)
	gate.Release()
	r.rec.Wait(held+" leaves across the relist", func(log []string, _ map[string]int64) bool {
		l := linesOf(log, held)
		return len(l) > 0 && l[len(l)-1] == fmt.Sprintf("delete %s v=%d unknown", held, lastV)
	})
	if entering == "" {
		t.Errorf("no key could be made to enter the filter across the relist")
		return
	}
	e := r.ek(entering)
	r.rec.Wait(e+" enters across the relist", func(log []string, _ map[string]int64) bool {
		l := linesOf(log, e)
		return len(l) > 0 && l[len(l)-1] == fmt.Sprintf("add %s v=%d", e, enteredV)
	})
}

// enter makes a key enter the filter while the watch is down: the first
// key not held (nor leaving) that a write of a few versions makes match.
// It returns that key and the version it entered at, or "" if none did.
func (r *filteredRun[T]) enter(leaving string) (string, int64) {
	for _, key := range r.keys {
		if r.models[key].held || key == leaving {
			continue
		}
		for range 4 {
			if _, n := r.put(key); r.f.Matches(key, n) {
				return key, n
			}
		}
	}
	return "", 0
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
