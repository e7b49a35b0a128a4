package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/memory"
)

type obj struct{ N int }

// recorder is a tb that records failures instead of failing the real test,
// so that a case can be run against a broken source and expected to fail.
type recorder struct {
	mu       sync.Mutex
	errs     []string
	cleanups []func()
}

func (r *recorder) Helper()                   {}
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Cleanup(f func())          { r.mu.Lock(); r.cleanups = append(r.cleanups, f); r.mu.Unlock() }
func (r *recorder) Failed() bool              { r.mu.Lock(); defer r.mu.Unlock(); return len(r.errs) > 0 }
func (r *recorder) Fatalf(f string, a ...any) { r.Errorf(f, a...); runtime.Goexit() }
func (r *recorder) Errorf(f string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(f, a...))
}

// runRecorded runs one case on a recorder the way Run runs it on a
// subtest: in its own goroutine (Fatalf exits it), then the cleanups in
// reverse order.
func runRecorded(caps Capabilities, src Source[obj], c testCase[obj]) *recorder {
	rec := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runCase(rec, caps, src, c.run)
	}()
	<-done
	for _, f := range slices.Backward(rec.cleanups) {
		f()
	}
	return rec
}

// memSource is a conformance Source over a memory.Source whose
// ListerWatcher may be replaced by a broken wrapper.
type memSource struct {
	s  *memory.Source[obj]
	lw core.ListerWatcher[obj]
}

func (m memSource) ListerWatcher() core.ListerWatcher[obj] { return m.lw }
func (m memSource) Put(_ context.Context, key string, n int) (core.ResourceVersion, error) {
	return m.s.Put(key, obj{n}), nil
}
func (m memSource) Delete(_ context.Context, key string) (core.ResourceVersion, error) {
	rv, _ := m.s.Delete(key)
	return rv, nil
}
func (m memSource) PutAll(_ context.Context, keys []string, n int) (core.ResourceVersion, error) {
	var ops []memory.Op[obj]
	for _, k := range keys {
		ops = append(ops, memory.PutOp(k, obj{n}))
	}
	return m.s.Apply(ops...)
}
func (m memSource) Version(o obj) int            { return o.N }
func (m memSource) Expire(context.Context) error { return m.s.Compact(m.s.HeadRV()) }
func (m memSource) PutUnwatched(context.Context) (core.ResourceVersion, error) {
	return m.s.Advance(), nil
}

// brokenLW wraps the memory source with one deliberate bug.
type brokenLW struct {
	s *memory.Source[obj]
	// list replaces List when set.
	list func(ctx context.Context, opts core.ListOptions[obj]) (core.ResourceVersion, error)
	// from rewrites the version Watch starts from.
	from func(from core.ResourceVersion) core.ResourceVersion
	// ctx rewrites the watch's context.
	ctx func(ctx context.Context) context.Context
	// batch rewrites each batch; n counts the batches of this watcher.
	batch func(st *watchState, b []core.Event[obj]) []core.Event[obj]
	// noProgress drops RequestProgress on the floor.
	noProgress bool
	// leak starts a goroutine per watch that outlives it.
	leak chan struct{}
	// ignoreStop makes Stop do nothing.
	ignoreStop bool
	// emptyFirst makes the first Next of a watch return an empty batch.
	emptyFirst bool
	// split returns one event per Next, splitting transactions.
	split bool
	// progressErr, when set, is RequestProgress's answer.
	progressErr error
}

type watchState struct {
	changes int
	last    core.ResourceVersion // RV of the last change delivered
	held    []core.Event[obj]
	calls   int
}

func (b *brokenLW) List(ctx context.Context, opts core.ListOptions[obj]) (core.ResourceVersion, error) {
	if b.list != nil {
		return b.list(ctx, opts)
	}
	return b.s.List(ctx, opts)
}

func (b *brokenLW) Watch(ctx context.Context, from core.ResourceVersion) (core.Watcher[obj], error) {
	if b.from != nil {
		from = b.from(from)
	}
	if b.ctx != nil {
		ctx = b.ctx(ctx)
	}
	w, err := b.s.Watch(ctx, from)
	if err != nil {
		return nil, err
	}
	if b.leak != nil {
		go func() { <-b.leak }()
	}
	return &brokenWatcher{b: b, w: w}, nil
}

type brokenWatcher struct {
	b  *brokenLW
	w  core.Watcher[obj]
	st watchState
}

func (w *brokenWatcher) Next(ctx context.Context) ([]core.Event[obj], error) {
	w.st.calls++
	if w.b.emptyFirst && w.st.calls == 1 {
		return []core.Event[obj]{}, nil
	}
	if w.b.split && len(w.st.held) > 0 {
		ev := w.st.held[0]
		w.st.held = w.st.held[1:]
		return []core.Event[obj]{ev}, nil
	}
	for {
		batch, err := w.w.Next(ctx)
		if err != nil {
			return nil, err
		}
		if w.b.split && len(batch) > 1 {
			w.st.held = batch[1:]
			batch = batch[:1]
		}
		if w.b.batch != nil {
			batch = w.b.batch(&w.st, batch)
		}
		if len(batch) > 0 {
			return batch, nil
		}
	}
}

func (w *brokenWatcher) Stop() {
	if !w.b.ignoreStop {
		w.w.Stop()
	}
}

func (w *brokenWatcher) RequestProgress(ctx context.Context) error {
	if w.b.noProgress {
		return nil
	}
	if w.b.progressErr != nil {
		return w.b.progressErr
	}
	return w.w.(core.ProgressRequester).RequestProgress(ctx)
}

// eachChange applies f to every change event, in order, keeping bookmarks.
func eachChange(f func(st *watchState, ev core.Event[obj]) []core.Event[obj]) func(*watchState, []core.Event[obj]) []core.Event[obj] {
	return func(st *watchState, b []core.Event[obj]) []core.Event[obj] {
		var out []core.Event[obj]
		for _, ev := range b {
			if ev.Type == core.Bookmark {
				out = append(out, ev)
				continue
			}
			st.changes++
			out = append(out, f(st, ev)...)
		}
		return out
	}
}

type mutant struct {
	name string
	// mustFail names the case that has to catch the bug.
	mustFail string
	maxBatch int
	lw       func(s *memory.Source[obj]) *brokenLW
}

func mutants() []mutant {
	return []mutant{
		{name: "drops the second change", mustFail: "WatchFromList", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: eachChange(func(st *watchState, ev core.Event[obj]) []core.Event[obj] {
				if st.changes == 2 {
					return nil
				}
				return []core.Event[obj]{ev}
			})}
		}},
		{name: "repeats the first change", mustFail: "WatchFromList", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: eachChange(func(st *watchState, ev core.Event[obj]) []core.Event[obj] {
				if st.changes == 1 {
					return []core.Event[obj]{ev, ev}
				}
				return []core.Event[obj]{ev}
			})}
		}},
		{name: "reverses each batch", mustFail: "WatchFromList", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: func(_ *watchState, b []core.Event[obj]) []core.Event[obj] {
				slices.Reverse(b)
				return b
			}}
		}},
		{name: "delivers the first change after the second batch", mustFail: "WatchFromList", maxBatch: 1, lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: func(st *watchState, b []core.Event[obj]) []core.Event[obj] {
				st.changes++
				switch st.changes {
				case 1:
					st.held = b
					return nil
				case 2:
					return append(b, st.held...)
				}
				return b
			}}
		}},
		{name: "reports updates as Added", mustFail: "WatchFromList", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev core.Event[obj]) []core.Event[obj] {
				if ev.Type == core.Modified {
					ev.Type = core.Added
				}
				return []core.Event[obj]{ev}
			})}
		}},
		{name: "loses the object of deletes", mustFail: "Deletes", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev core.Event[obj]) []core.Event[obj] {
				if ev.Type == core.Deleted {
					ev.Object, ev.HasObject = obj{}, false
				}
				return []core.Event[obj]{ev}
			})}
		}},
		{name: "reports the wrong RV", mustFail: "WatchFromMiddle", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev core.Event[obj]) []core.Event[obj] {
				ev.RV += 100
				return []core.Event[obj]{ev}
			})}
		}},
		{name: "watches from the requested RV inclusive", mustFail: "WatchFromMiddle", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, from: func(from core.ResourceVersion) core.ResourceVersion {
				return max(from, 1) - 1
			}}
		}},
		{name: "ignores expiry", mustFail: "Expired", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, from: func(from core.ResourceVersion) core.ResourceVersion {
				return max(from, s.CompactedRV())
			}}
		}},
		{name: "lists at a stale RV", mustFail: "ListAfterWrites", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, list: func(ctx context.Context, opts core.ListOptions[obj]) (core.ResourceVersion, error) {
				rv, err := s.List(ctx, opts)
				return max(rv, 1) - 1, err
			}}
		}},
		{name: "tears List across concurrent writes", mustFail: "ListConsistentUnderWrites", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, list: func(ctx context.Context, opts core.ListOptions[obj]) (core.ResourceVersion, error) {
				// Take the version first and the items once a write has
				// landed, as a List that forgot to pin its pages would.
				rv := s.HeadRV()
				for s.HeadRV() == rv && ctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
				_, err := s.List(ctx, opts)
				return rv, err
			}}
		}},
		{name: "keeps emitting after Emit fails", mustFail: "ListEmitError", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, list: func(ctx context.Context, opts core.ListOptions[obj]) (core.ResourceVersion, error) {
				var first error
				rv, err := s.List(ctx, core.ListOptions[obj]{Emit: func(ev core.Event[obj]) error {
					if err := opts.Emit(ev); err != nil && first == nil {
						first = err
					}
					return nil
				}})
				if first != nil {
					return 0, first
				}
				return rv, err
			}}
		}},
		{name: "answers progress at its last change, not the head", mustFail: "Bookmark", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: func(st *watchState, b []core.Event[obj]) []core.Event[obj] {
				for i, ev := range b {
					if ev.Type == core.Bookmark {
						b[i].RV = st.last
					} else {
						st.last = ev.RV
					}
				}
				return b
			}}
		}},
		{name: "lists a deleted key", mustFail: "ListAfterWrites", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, list: func(ctx context.Context, opts core.ListOptions[obj]) (core.ResourceVersion, error) {
				rv, err := s.List(ctx, opts)
				if err == nil {
					err = opts.Emit(core.Event[obj]{Type: core.Added, Key: "charlie", Object: obj{1}, HasObject: true, RV: 1})
				}
				return rv, err
			}}
		}},
		{name: "reports a delete with the wrong object", mustFail: "Deletes", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev core.Event[obj]) []core.Event[obj] {
				if ev.Type == core.Deleted {
					ev.Object = obj{}
				}
				return []core.Event[obj]{ev}
			})}
		}},
		{name: "returns an empty batch", mustFail: "WatchFromList", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, emptyFirst: true}
		}},
		{name: "splits transactions across batches", mustFail: "Transaction", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, split: true}
		}},
		{name: "gives each event of a transaction its own RV", mustFail: "Transaction", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: func(_ *watchState, b []core.Event[obj]) []core.Event[obj] {
				for i := range b {
					b[i].RV += core.ResourceVersion(i)
				}
				return b
			}}
		}},
		{name: "ignores Stop", mustFail: "Stop", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, ignoreStop: true}
		}},
		{name: "ignores progress requests", mustFail: "Bookmark", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, noProgress: true}
		}},
		{name: "ignores the watch context", mustFail: "CancelWatchContext", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, ctx: context.WithoutCancel}
		}},
		{name: "leaks a goroutine per watch", mustFail: "Stop", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, leak: make(chan struct{})}
		}},
	}
}

// selfCaps are what the memory source promises, with short deadlines: only
// a mutant that never delivers reaches them, and a mutant has to fail
// whatever the reason, so a slow machine cannot make this test pass wrongly.
var selfCaps = Capabilities{
	DeletesCarryObject:  true,
	DistinguishesUpdate: true,
	ExactWriteRV:        true,
	StrictGoroutines:    true,
	Timeout:             2 * time.Second,
	BookmarkTimeout:     2 * time.Second,
}

func TestSuiteCatchesBrokenSources(t *testing.T) {
	for _, m := range mutants() {
		t.Run(m.name, func(t *testing.T) {
			// Only the case that must catch the bug runs: the others may
			// fail too, but a mutant that hides a delivery makes them wait
			// for their deadline, which costs time and proves nothing more.
			i := slices.IndexFunc(cases[obj](), func(c testCase[obj]) bool { return c.name == m.mustFail })
			if i < 0 {
				t.Fatalf("no case %q", m.mustFail)
			}
			s := memory.New[obj](memory.Options{MaxBatch: m.maxBatch})
			lw := m.lw(s)
			rec := runRecorded(selfCaps, memSource{s: s, lw: lw}, cases[obj]()[i])
			if lw.leak != nil {
				close(lw.leak)
			}
			if !rec.Failed() {
				t.Errorf("case %s did not catch a source that %s", m.mustFail, m.name)
			}
			t.Logf("%s reported: %s", m.mustFail, strings.Join(rec.errs, "; "))
		})
	}
}

// controlCaps are selfCaps with the default deadlines, so that the control
// cannot fail for a slow machine.
var controlCaps = func() Capabilities {
	c := selfCaps
	c.Timeout, c.BookmarkTimeout = 0, 0
	return c
}()

// TestSuitePassesUnbrokenWrapper is the control for the mutants: the same
// wrapper with no bug, the same capabilities and recorder, fails nothing,
// so the failures above come from the bugs.
func TestSuitePassesUnbrokenWrapper(t *testing.T) {
	for _, maxBatch := range []int{0, 1} {
		for _, c := range cases[obj]() {
			s := memory.New[obj](memory.Options{MaxBatch: maxBatch})
			rec := runRecorded(controlCaps, memSource{s: s, lw: &brokenLW{s: s}}, c)
			if rec.Failed() {
				t.Errorf("MaxBatch %d, case %s: %s", maxBatch, c.name, strings.Join(rec.errs, "; "))
			}
		}
	}
}

// A source whose events carry decode errors fails every case that reads
// them: the suite never writes bad data, so an Err is the adapter's bug.
func TestSuiteRejectsEventErrors(t *testing.T) {
	s := memory.New[obj](memory.Options{})
	lw := &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev core.Event[obj]) []core.Event[obj] {
		ev.Err = &core.DecodeError{Source: "test", Key: ev.Key, RV: ev.RV, Err: fmt.Errorf("bad")}
		return []core.Event[obj]{ev}
	})}
	c := cases[obj]()[slices.IndexFunc(cases[obj](), func(c testCase[obj]) bool { return c.name == "WatchLive" })]
	if rec := runRecorded(controlCaps, memSource{s: s, lw: lw}, c); !rec.Failed() {
		t.Errorf("events with Err set passed WatchLive")
	}
}

// noUnwatched is a source with no place outside the watched set.
type noUnwatched struct{ memSource }

func (noUnwatched) PutUnwatched(context.Context) (core.ResourceVersion, error) {
	return 0, ErrNotSupported
}

// A source that can neither write elsewhere nor answer progress requests
// passes the Bookmark case with a log line; one that can write elsewhere
// but never sends a bookmark fails it.
func TestBookmarkWithoutProgress(t *testing.T) {
	i := slices.IndexFunc(cases[obj](), func(c testCase[obj]) bool { return c.name == "Bookmark" })
	s := memory.New[obj](memory.Options{})
	lw := &brokenLW{s: s, progressErr: fmt.Errorf("no progress on this server: %w", errors.ErrUnsupported)}
	if rec := runRecorded(controlCaps, noUnwatched{memSource{s: s, lw: lw}}, cases[obj]()[i]); rec.Failed() {
		t.Errorf("a source with neither PutUnwatched nor progress failed: %s", strings.Join(rec.errs, "; "))
	}
	s = memory.New[obj](memory.Options{})
	lw = &brokenLW{s: s, progressErr: errors.ErrUnsupported}
	if rec := runRecorded(selfCaps, memSource{s: s, lw: lw}, cases[obj]()[i]); !rec.Failed() {
		t.Errorf("a source that never sends a bookmark after PutUnwatched passed")
	}
}

// A leak the source declares as not its own is not reported.
func TestIgnoreGoroutines(t *testing.T) {
	i := slices.IndexFunc(cases[obj](), func(c testCase[obj]) bool { return c.name == "Stop" })
	s := memory.New[obj](memory.Options{})
	lw := &brokenLW{s: s, leak: make(chan struct{})}
	defer close(lw.leak)
	caps := controlCaps
	caps.Timeout = 2 * time.Second // only reached if the filter fails
	caps.IgnoreGoroutines = []string{"conformance.(*brokenLW).Watch"}
	if rec := runRecorded(caps, memSource{s: s, lw: lw}, cases[obj]()[i]); rec.Failed() {
		t.Errorf("an ignored goroutine was reported: %s", strings.Join(rec.errs, "; "))
	}
}

// prefixLW reports every key with a namespace-like prefix, as the
// Kubernetes adapter reports "namespace/name".
type prefixLW struct{ s *memory.Source[obj] }

func prefixed(ev core.Event[obj]) core.Event[obj] {
	if ev.Type != core.Bookmark {
		ev.Key = "ns/" + ev.Key
	}
	return ev
}

func (p prefixLW) List(ctx context.Context, opts core.ListOptions[obj]) (core.ResourceVersion, error) {
	return p.s.List(ctx, core.ListOptions[obj]{Emit: func(ev core.Event[obj]) error { return opts.Emit(prefixed(ev)) }})
}

func (p prefixLW) Watch(ctx context.Context, from core.ResourceVersion) (core.Watcher[obj], error) {
	w, err := p.s.Watch(ctx, from)
	if err != nil {
		return nil, err
	}
	b := &brokenLW{s: p.s, batch: func(_ *watchState, b []core.Event[obj]) []core.Event[obj] {
		for i := range b {
			b[i] = prefixed(b[i])
		}
		return b
	}}
	return &brokenWatcher{b: b, w: w}, nil
}

type mappedSource struct{ memSource }

func (mappedSource) EventKey(key string) string { return "ns/" + key }

// A Source that reports its keys differently passes once it says how
// (KeyMapper), and fails without.
func TestKeyMapper(t *testing.T) {
	for _, c := range cases[obj]() {
		s := memory.New[obj](memory.Options{})
		rec := runRecorded(controlCaps, mappedSource{memSource{s: s, lw: prefixLW{s}}}, c)
		if rec.Failed() {
			t.Errorf("case %s with a KeyMapper: %s", c.name, strings.Join(rec.errs, "; "))
		}
	}
	s := memory.New[obj](memory.Options{})
	i := slices.IndexFunc(cases[obj](), func(c testCase[obj]) bool { return c.name == "ListAfterWrites" })
	if rec := runRecorded(controlCaps, memSource{s: s, lw: prefixLW{s}}, cases[obj]()[i]); !rec.Failed() {
		t.Errorf("prefixed keys passed ListAfterWrites without a KeyMapper")
	}
}

// laggySource returns, for each write, a version read after it rather than
// the write's own (one Advance later), as a Postgres writer that reads
// pg_current_wal_lsn() after its commit does.
type laggySource struct{ memSource }

func (l laggySource) Put(ctx context.Context, key string, n int) (core.ResourceVersion, error) {
	l.s.Put(key, obj{n})
	return l.s.Advance(), nil
}

func (l laggySource) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	l.s.Delete(key)
	return l.s.Advance(), nil
}

func (l laggySource) PutAll(ctx context.Context, keys []string, n int) (core.ResourceVersion, error) {
	if _, err := l.memSource.PutAll(ctx, keys, n); err != nil {
		return 0, err
	}
	return l.s.Advance(), nil
}

// With ExactWriteRV false, a source whose writers see a later version than
// their write passes, and a wrong RV still fails.
func TestInexactWriteRV(t *testing.T) {
	caps := controlCaps
	caps.ExactWriteRV = false
	for _, c := range cases[obj]() {
		s := memory.New[obj](memory.Options{})
		if rec := runRecorded(caps, laggySource{memSource{s: s, lw: s}}, c); rec.Failed() {
			t.Errorf("case %s: %s", c.name, strings.Join(rec.errs, "; "))
		}
	}
	caps.Timeout = selfCaps.Timeout
	for _, name := range []string{"WatchFromMiddle", "ListConsistentUnderWrites"} {
		i := slices.IndexFunc(cases[obj](), func(c testCase[obj]) bool { return c.name == name })
		s := memory.New[obj](memory.Options{})
		lw := &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev core.Event[obj]) []core.Event[obj] {
			ev.RV += 100
			return []core.Event[obj]{ev}
		})}
		if rec := runRecorded(caps, laggySource{memSource{s: s, lw: lw}}, cases[obj]()[i]); !rec.Failed() {
			t.Errorf("case %s passed events whose RV is after their write's", name)
		}
	}
}

// With DistinguishesUpdate false, a source that reports every put as Added
// (a NATS KV message does not say whether the key existed) passes.
func TestPutsAllAdded(t *testing.T) {
	caps := controlCaps
	caps.DistinguishesUpdate = false
	for _, c := range cases[obj]() {
		s := memory.New[obj](memory.Options{})
		lw := &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev core.Event[obj]) []core.Event[obj] {
			if ev.Type == core.Modified {
				ev.Type = core.Added
			}
			return []core.Event[obj]{ev}
		})}
		if rec := runRecorded(caps, memSource{s: s, lw: lw}, c); rec.Failed() {
			t.Errorf("case %s: %s", c.name, strings.Join(rec.errs, "; "))
		}
	}
}
