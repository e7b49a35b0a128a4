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
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/memory"
)

type obj struct{ N int64 }

// recorder is a tb that records failures instead of failing the real test,
// so that a case can be run against a broken source and expected to fail.
type recorder struct {
	mu       sync.Mutex
	errs     []string
	cleanups []func()
}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Cleanup(f func())    { r.mu.Lock(); r.cleanups = append(r.cleanups, f); r.mu.Unlock() }
func (r *recorder) Failed() bool        { r.mu.Lock(); defer r.mu.Unlock(); return len(r.errs) > 0 }
func (r *recorder) failures() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errs, "; ")
}
func (r *recorder) Fatalf(f string, a ...any) { r.Errorf(f, a...); runtime.Goexit() }
func (r *recorder) Errorf(f string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(f, a...))
}

// runRecorded runs one case on a recorder the way Run runs it on a
// subtest: in its own goroutine (Fatalf exits it), then the cleanups in
// reverse order.
func runRecorded(caps Capabilities, h Harness[obj], c testCase[obj]) *recorder {
	rec := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runCase(rec, caps, h, c.run)
	}()
	<-done
	for _, f := range slices.Backward(rec.cleanups) {
		f()
	}
	if b, ok := h.ListerWatcher().(*brokenLW); ok {
		b.kill()
	}
	return rec
}

// memHarness is a Harness over a memory.Source whose ListerWatcher may be
// replaced by a broken wrapper, with no optional capability.
type memHarness struct {
	s  *memory.Source[obj]
	lw driver.ListerWatcher[obj]
}

func (m memHarness) ListerWatcher() driver.ListerWatcher[obj] { return m.lw }
func (m memHarness) Put(_ context.Context, key string, n int64) (core.ResourceVersion, error) {
	return m.s.Put(key, obj{n}), nil
}
func (m memHarness) Delete(_ context.Context, key string) (core.ResourceVersion, error) {
	rv, _ := m.s.Delete(key)
	return rv, nil
}
func (m memHarness) Version(o obj) int64 { return o.N }

// memSource is a memHarness with every optional capability.
type memSource struct{ memHarness }

func newMemSource(s *memory.Source[obj], lw driver.ListerWatcher[obj]) memSource {
	return memSource{memHarness{s: s, lw: lw}}
}

func (m memSource) PutAll(_ context.Context, keys []string, n int64) (core.ResourceVersion, error) {
	var ops []memory.Op[obj]
	for _, k := range keys {
		ops = append(ops, memory.PutOp(k, obj{n}))
	}
	return m.s.Apply(ops...)
}
func (m memSource) Expire(context.Context) error { return m.s.Compact(m.s.HeadRV()) }
func (m memSource) PutUnwatched(context.Context) (core.ResourceVersion, error) {
	return m.s.Advance(), nil
}
func (m memSource) Drop(context.Context) error {
	b, ok := m.lw.(*brokenLW)
	if !ok {
		return errors.New("only a brokenLW can be dropped")
	}
	b.drop()
	return nil
}

var errDropped = errors.New("the watched set was dropped")

// brokenLW wraps the memory source with one deliberate bug. Without one it
// keeps the contract, and Drop makes its watches end with a permanent
// error.
type brokenLW struct {
	s *memory.Source[obj]
	// list replaces List when set.
	list func(ctx context.Context, sink driver.ListSink[obj]) (core.ResourceVersion, error)
	// from rewrites the version Watch starts from.
	from func(from core.ResourceVersion) core.ResourceVersion
	// batch rewrites each batch (a copy); st is the watch's state.
	batch func(st *watchState, b []driver.Event[obj]) []driver.Event[obj]
	// ignoreCtx keeps the watch running after its context ends.
	ignoreCtx bool
	// noProgress reports progress but never reads the requests.
	noProgress bool
	// noReport makes ReportsProgress false.
	noReport bool
	// leak starts a goroutine per watch that outlives it.
	leak chan struct{}
	// emptyFirst emits an empty batch first.
	emptyFirst bool
	// split emits one event per batch, splitting transactions.
	split bool
	// result rewrites what Watch returns, given its context and whether
	// the watch was inside Emit when that context ended.
	result func(ctx context.Context, err error, inEmit bool) error
	// swallowEmitErr ignores Emit's error and goes on.
	swallowEmitErr bool
	// emitAfterReturn emits a Bookmark from another goroutine just after
	// Watch returned.
	emitAfterReturn bool
	// bookmarkBeforeExpired emits a Bookmark at the head before it returns
	// an expired error.
	bookmarkBeforeExpired bool
	// dropTransient ends watches on Drop with a plain error, not a
	// permanent one.
	dropTransient bool

	mu      sync.Mutex
	dropped bool
	killed  bool
	cancels map[*context.CancelCauseFunc]struct{} // of the running watches
}

type watchState struct {
	changes int
	last    core.ResourceVersion // RV of the last change delivered
	held    []driver.Event[obj]
}

// end cancels every running watch with cause, and the ones started later.
func (b *brokenLW) end(cause error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cause == errDropped {
		b.dropped = true
	} else {
		b.killed = true
	}
	for c := range b.cancels {
		(*c)(cause)
	}
}

func (b *brokenLW) drop() { b.end(errDropped) }

// kill ends every watch, even one that ignores its context.
func (b *brokenLW) kill() { b.end(errKilled) }

var errKilled = errors.New("killed by the test")

// register makes cancel part of the running watches; the returned func
// removes it.
func (b *brokenLW) register(cancel *context.CancelCauseFunc) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cancels == nil {
		b.cancels = map[*context.CancelCauseFunc]struct{}{}
	}
	switch {
	case b.dropped:
		(*cancel)(errDropped)
	case b.killed:
		(*cancel)(errKilled)
	}
	b.cancels[cancel] = struct{}{}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.cancels, cancel)
	}
}

func (b *brokenLW) ReportsProgress() bool { return !b.noReport }

func (b *brokenLW) List(ctx context.Context, sink driver.ListSink[obj]) (core.ResourceVersion, error) {
	if b.list != nil {
		return b.list(ctx, sink)
	}
	return b.s.List(ctx, sink)
}

func (b *brokenLW) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[obj]) error {
	if b.from != nil {
		from = b.from(from)
	}
	if b.leak != nil {
		go func() { <-b.leak }()
	}
	// The inner watch ends with ctx (unless ignoreCtx), on Drop, and when
	// the test kills every watch.
	base := ctx
	if b.ignoreCtx {
		base = context.WithoutCancel(ctx)
	}
	inner, cancel := context.WithCancelCause(base)
	defer cancel(nil)
	defer b.register(&cancel)()

	st := &watchState{}
	var emitted, cancelledInEmit bool
	emit := func(batch []driver.Event[obj]) error {
		if b.emptyFirst && !emitted {
			emitted = true
			if err := opts.Emit([]driver.Event[obj]{}); err != nil {
				return err
			}
		}
		batch = slices.Clone(batch)
		if b.batch != nil {
			batch = b.batch(st, batch)
		}
		if len(batch) == 0 {
			return nil
		}
		var err error
		if b.split {
			for _, ev := range batch {
				if err = opts.Emit([]driver.Event[obj]{ev}); err != nil {
					break
				}
			}
		} else {
			err = opts.Emit(batch)
		}
		if ctx.Err() != nil {
			cancelledInEmit = true
		}
		if err != nil && b.swallowEmitErr {
			return nil
		}
		return err
	}
	progress := opts.Progress
	if b.noProgress {
		progress = nil
	}
	err := b.s.Watch(inner, from, driver.WatchOptions[obj]{Emit: emit, Progress: progress})
	if context.Cause(inner) == errDropped && ctx.Err() == nil {
		if b.dropTransient {
			err = errDropped
		} else {
			err = driver.Permanent(errDropped)
		}
	}
	if b.bookmarkBeforeExpired && errors.Is(err, driver.ErrExpired) {
		_ = opts.Emit([]driver.Event[obj]{{Type: driver.Bookmark, RV: b.s.HeadRV()}})
	}
	if b.result != nil {
		err = b.result(ctx, err, cancelledInEmit)
	}
	if b.emitAfterReturn {
		go func() { _ = opts.Emit([]driver.Event[obj]{{Type: driver.Bookmark, RV: b.s.HeadRV()}}) }()
	}
	return err
}

// eachChange applies f to every change event, in order, keeping bookmarks.
func eachChange(f func(st *watchState, ev driver.Event[obj]) []driver.Event[obj]) func(*watchState, []driver.Event[obj]) []driver.Event[obj] {
	return func(st *watchState, b []driver.Event[obj]) []driver.Event[obj] {
		var out []driver.Event[obj]
		for _, ev := range b {
			if ev.Type == driver.Bookmark {
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
			return &brokenLW{s: s, batch: eachChange(func(st *watchState, ev driver.Event[obj]) []driver.Event[obj] {
				if st.changes == 2 {
					return nil
				}
				return []driver.Event[obj]{ev}
			})}
		}},
		{name: "repeats the first change", mustFail: "WatchFromList", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: eachChange(func(st *watchState, ev driver.Event[obj]) []driver.Event[obj] {
				if st.changes == 1 {
					return []driver.Event[obj]{ev, ev}
				}
				return []driver.Event[obj]{ev}
			})}
		}},
		{name: "reverses each batch", mustFail: "WatchFromList", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: func(_ *watchState, b []driver.Event[obj]) []driver.Event[obj] {
				slices.Reverse(b)
				return b
			}}
		}},
		{name: "delivers the first change after the second batch", mustFail: "WatchFromList", maxBatch: 1, lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: func(st *watchState, b []driver.Event[obj]) []driver.Event[obj] {
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
			return &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev driver.Event[obj]) []driver.Event[obj] {
				if ev.Type == driver.Modified {
					ev.Type = driver.Added
				}
				return []driver.Event[obj]{ev}
			})}
		}},
		{name: "loses the object of deletes", mustFail: "Deletes", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev driver.Event[obj]) []driver.Event[obj] {
				if ev.Type == driver.Deleted {
					ev.Object, ev.HasObject = obj{}, false
				}
				return []driver.Event[obj]{ev}
			})}
		}},
		{name: "reports the wrong RV", mustFail: "WatchFromMiddle", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev driver.Event[obj]) []driver.Event[obj] {
				ev.RV += 100
				return []driver.Event[obj]{ev}
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
		{name: "emits a Bookmark before reporting expiry", mustFail: "Expired", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, bookmarkBeforeExpired: true}
		}},
		{name: "lists at a stale RV", mustFail: "ListAfterWrites", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, list: func(ctx context.Context, sink driver.ListSink[obj]) (core.ResourceVersion, error) {
				rv, err := s.List(ctx, sink)
				return max(rv, 1) - 1, err
			}}
		}},
		{name: "tears List across concurrent writes", mustFail: "ListConsistentUnderWrites", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, list: func(ctx context.Context, sink driver.ListSink[obj]) (core.ResourceVersion, error) {
				// Take the version first and the items once a write has
				// landed, as a List that forgot to pin its pages would.
				rv := s.HeadRV()
				for s.HeadRV() == rv && ctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
				_, err := s.List(ctx, sink)
				return rv, err
			}}
		}},
		{name: "keeps emitting after Emit fails", mustFail: "ListEmitError", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, list: func(ctx context.Context, sink driver.ListSink[obj]) (core.ResourceVersion, error) {
				var first error
				rv, err := s.List(ctx, driver.ListSink[obj]{Emit: func(ev driver.Event[obj]) error {
					if err := sink.Emit(ev); err != nil && first == nil {
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
			return &brokenLW{s: s, batch: func(st *watchState, b []driver.Event[obj]) []driver.Event[obj] {
				for i, ev := range b {
					if ev.Type == driver.Bookmark {
						b[i].RV = st.last
					} else {
						st.last = ev.RV
					}
				}
				return b
			}}
		}},
		{name: "lists a deleted key", mustFail: "ListAfterWrites", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, list: func(ctx context.Context, sink driver.ListSink[obj]) (core.ResourceVersion, error) {
				rv, err := s.List(ctx, sink)
				if err == nil {
					err = sink.Emit(driver.Event[obj]{Type: driver.Added, Key: "charlie", Object: obj{1}, HasObject: true, RV: 1})
				}
				return rv, err
			}}
		}},
		{name: "reports a delete with the wrong object", mustFail: "Deletes", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev driver.Event[obj]) []driver.Event[obj] {
				if ev.Type == driver.Deleted {
					ev.Object = obj{}
				}
				return []driver.Event[obj]{ev}
			})}
		}},
		{name: "emits an empty batch", mustFail: "WatchFromList", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, emptyFirst: true}
		}},
		{name: "splits transactions across batches", mustFail: "Transaction", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, split: true}
		}},
		{name: "gives each event of a transaction its own RV", mustFail: "Transaction", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, batch: func(_ *watchState, b []driver.Event[obj]) []driver.Event[obj] {
				for i := range b {
					b[i].RV += core.ResourceVersion(i)
				}
				return b
			}}
		}},
		{name: "ignores progress requests", mustFail: "Bookmark", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, noProgress: true}
		}},
		{name: "ignores the watch context", mustFail: "Cancel", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, ignoreCtx: true}
		}},
		{name: "leaks a goroutine per watch", mustFail: "Cancel", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, leak: make(chan struct{})}
		}},
		{name: "returns nil when its context ends", mustFail: "Cancel", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, result: func(ctx context.Context, err error, _ bool) error {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}}
		}},
		{name: "returns the context's error unwrapped", mustFail: "Cancel", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, result: func(ctx context.Context, err error, _ bool) error {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return err
			}}
		}},
		{name: "returns the context's error when cancelled inside Emit", mustFail: "Cancel", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, result: func(ctx context.Context, err error, inEmit bool) error {
				if inEmit {
					return fmt.Errorf("watch: %w", ctx.Err())
				}
				return err
			}}
		}},
		{name: "loses the context's cause", mustFail: "Cancel", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, result: func(ctx context.Context, err error, _ bool) error {
				if ctx.Err() != nil {
					return fmt.Errorf("%w: %w", driver.ErrWatchStopped, ctx.Err())
				}
				return err
			}}
		}},
		{name: "emits after returning", mustFail: "Cancel", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, emitAfterReturn: true}
		}},
		{name: "swallows Emit's error", mustFail: "EmitError", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, swallowEmitErr: true}
		}},
		{name: "replaces Emit's error", mustFail: "EmitError", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, result: func(ctx context.Context, err error, _ bool) error {
				if ctx.Err() == nil {
					return errors.New("watch failed")
				}
				return err
			}}
		}},
		{name: "reports a dropped set as a transient error", mustFail: "Dropped", lw: func(s *memory.Source[obj]) *brokenLW {
			return &brokenLW{s: s, dropTransient: true}
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

func caseNamed(t *testing.T, name string) testCase[obj] {
	t.Helper()
	i := slices.IndexFunc(cases[obj](), func(c testCase[obj]) bool { return c.name == name })
	if i < 0 {
		t.Fatalf("no case %q", name)
	}
	return cases[obj]()[i]
}

func TestSuiteCatchesBrokenSources(t *testing.T) {
	for _, m := range mutants() {
		t.Run(m.name, func(t *testing.T) {
			// Only the case that must catch the bug runs: the others may
			// fail too, but a mutant that hides a delivery makes them wait
			// for their deadline, which costs time and proves nothing more.
			c := caseNamed(t, m.mustFail)
			s := memory.New[obj](memory.Options{MaxBatch: m.maxBatch})
			lw := m.lw(s)
			rec := runRecorded(selfCaps, newMemSource(s, lw), c)
			if lw.leak != nil {
				close(lw.leak)
			}
			if !rec.Failed() {
				t.Errorf("case %s did not catch a source that %s", m.mustFail, m.name)
			}
			t.Logf("%s reported: %s", m.mustFail, rec.failures())
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
			rec := runRecorded(controlCaps, newMemSource(s, &brokenLW{s: s}), c)
			if rec.Failed() {
				t.Errorf("MaxBatch %d, case %s: %s", maxBatch, c.name, rec.failures())
			}
		}
	}
}

// The memory source itself passes every case with only the required
// methods: the optional cases log and pass.
func TestSuitePassesBareHarness(t *testing.T) {
	for _, c := range cases[obj]() {
		s := memory.New[obj](memory.Options{})
		if rec := runRecorded(controlCaps, memHarness{s: s, lw: s}, c); rec.Failed() {
			t.Errorf("case %s: %s", c.name, rec.failures())
		}
	}
}

// A source whose events carry decode errors fails every case that reads
// them: the suite never writes bad data, so an Err is the adapter's bug.
func TestSuiteRejectsEventErrors(t *testing.T) {
	s := memory.New[obj](memory.Options{})
	lw := &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev driver.Event[obj]) []driver.Event[obj] {
		ev.Err = &driver.DecodeError{Source: "test", Key: ev.Key, RV: ev.RV, Err: fmt.Errorf("bad")}
		return []driver.Event[obj]{ev}
	})}
	if rec := runRecorded(controlCaps, newMemSource(s, lw), caseNamed(t, "WatchLive")); !rec.Failed() {
		t.Errorf("events with Err set passed WatchLive")
	}
}

// A source that can neither write elsewhere nor answer progress requests
// passes the Bookmark case with a log line; one that can write elsewhere
// but never sends a bookmark fails it.
func TestBookmarkWithoutProgress(t *testing.T) {
	c := caseNamed(t, "Bookmark")
	s := memory.New[obj](memory.Options{})
	lw := &brokenLW{s: s, noReport: true}
	if rec := runRecorded(controlCaps, memHarness{s: s, lw: lw}, c); rec.Failed() {
		t.Errorf("a source with neither PutUnwatched nor progress failed: %s", rec.failures())
	}
	s = memory.New[obj](memory.Options{})
	lw = &brokenLW{s: s, noReport: true}
	if rec := runRecorded(selfCaps, newMemSource(s, lw), c); !rec.Failed() {
		t.Errorf("a source that never sends a bookmark after PutUnwatched passed")
	}
}

// A leak the source declares as not its own is not reported.
func TestIgnoreGoroutines(t *testing.T) {
	s := memory.New[obj](memory.Options{})
	lw := &brokenLW{s: s, leak: make(chan struct{})}
	defer close(lw.leak)
	caps := controlCaps
	caps.Timeout = 2 * time.Second // only reached if the filter fails
	caps.IgnoreGoroutines = []string{"conformance.(*brokenLW).Watch"}
	if rec := runRecorded(caps, newMemSource(s, lw), caseNamed(t, "Cancel")); rec.Failed() {
		t.Errorf("an ignored goroutine was reported: %s", rec.failures())
	}
}

// prefixLW reports every key with a namespace-like prefix, as the
// Kubernetes adapter reports "namespace/name".
func prefixLW(s *memory.Source[obj]) *brokenLW {
	prefixed := func(ev driver.Event[obj]) driver.Event[obj] {
		if ev.Type != driver.Bookmark {
			ev.Key = "ns/" + ev.Key
		}
		return ev
	}
	return &brokenLW{s: s,
		list: func(ctx context.Context, sink driver.ListSink[obj]) (core.ResourceVersion, error) {
			return s.List(ctx, driver.ListSink[obj]{Emit: func(ev driver.Event[obj]) error { return sink.Emit(prefixed(ev)) }})
		},
		batch: func(_ *watchState, b []driver.Event[obj]) []driver.Event[obj] {
			for i := range b {
				b[i] = prefixed(b[i])
			}
			return b
		},
	}
}

type mappedSource struct{ memSource }

func (mappedSource) EventKey(key string) string { return "ns/" + key }

// A Harness whose ListerWatcher reports its keys differently passes once it
// says how (KeyMapper), and fails without.
func TestKeyMapper(t *testing.T) {
	for _, c := range cases[obj]() {
		s := memory.New[obj](memory.Options{})
		rec := runRecorded(controlCaps, mappedSource{newMemSource(s, prefixLW(s))}, c)
		if rec.Failed() {
			t.Errorf("case %s with a KeyMapper: %s", c.name, rec.failures())
		}
	}
	s := memory.New[obj](memory.Options{})
	if rec := runRecorded(controlCaps, newMemSource(s, prefixLW(s)), caseNamed(t, "ListAfterWrites")); !rec.Failed() {
		t.Errorf("prefixed keys passed ListAfterWrites without a KeyMapper")
	}
}

// laggySource returns, for each write, a version read after it rather than
// the write's own (one Advance later), as a Postgres writer that reads
// pg_current_wal_lsn() after its commit does.
type laggySource struct{ memSource }

func (l laggySource) Put(ctx context.Context, key string, n int64) (core.ResourceVersion, error) {
	l.s.Put(key, obj{n})
	return l.s.Advance(), nil
}

func (l laggySource) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	l.s.Delete(key)
	return l.s.Advance(), nil
}

func (l laggySource) PutAll(ctx context.Context, keys []string, n int64) (core.ResourceVersion, error) {
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
		if rec := runRecorded(caps, laggySource{newMemSource(s, &brokenLW{s: s})}, c); rec.Failed() {
			t.Errorf("case %s: %s", c.name, rec.failures())
		}
	}
	caps.Timeout = selfCaps.Timeout
	for _, name := range []string{"WatchFromMiddle", "ListConsistentUnderWrites"} {
		s := memory.New[obj](memory.Options{})
		lw := &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev driver.Event[obj]) []driver.Event[obj] {
			ev.RV += 100
			return []driver.Event[obj]{ev}
		})}
		if rec := runRecorded(caps, laggySource{newMemSource(s, lw)}, caseNamed(t, name)); !rec.Failed() {
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
		lw := &brokenLW{s: s, batch: eachChange(func(_ *watchState, ev driver.Event[obj]) []driver.Event[obj] {
			if ev.Type == driver.Modified {
				ev.Type = driver.Added
			}
			return []driver.Event[obj]{ev}
		})}
		if rec := runRecorded(caps, newMemSource(s, lw), c); rec.Failed() {
			t.Errorf("case %s: %s", c.name, rec.failures())
		}
	}
}
