package informertest_test

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

	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeT records failures instead of failing the test, so that a test can
// check that the kit fails a test when it should. Its deadline is near, so
// that a wait that must give up does so within about a second.
type fakeT struct {
	mu       sync.Mutex
	errs     []string
	fatal    bool
	cleanups []func()
}

func (*fakeT) Helper()      {}
func (*fakeT) Name() string { return "fake" }
func (f *fakeT) Errorf(format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, a...))
}
func (f *fakeT) Fatalf(format string, a ...any) {
	f.Errorf(format, a...)
	f.mu.Lock()
	f.fatal = true
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeT) Cleanup(fn func())         { f.cleanups = append(f.cleanups, fn) }
func (*fakeT) Deadline() (time.Time, bool) { return time.Now(), true }
func (f *fakeT) failures() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.errs, "\n")
}
func (f *fakeT) runCleanups() {
	for _, fn := range slices.Backward(f.cleanups) {
		fn()
	}
}
func (f *fakeT) failed() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.errs) > 0 }
func run(f *fakeT, body func(t informertest.TB)) {
	done := make(chan struct{})
	go func() { defer close(done); body(f) }()
	<-done
	f.runCleanups()
}

func TestRecorderLogsAndChecksOrder(t *testing.T) {
	f := &fakeT{}
	rec := informertest.NewRecorder(f, version)
	rec.OnAdd("a", item{1}, true)
	rec.OnUpdate("a", item{1}, item{3})
	rec.OnAdd("b", item{2}, false)
	rec.OnDelete("b", item{2}, true)
	rec.OnUpdate("a", item{3}, item{3}) // a resync: same version is fine
	if f.failed() {
		t.Fatalf("in-order notifications failed: %s", f.failures())
	}
	want := []string{"add a v=1 initial", "update a 1->3", "add b v=2", "delete b v=2 unknown", "update a 3->3"}
	if got := rec.Log(); !slices.Equal(got, want) {
		t.Fatalf("log %q, want %q", got, want)
	}
	if got := rec.State(); len(got) != 1 || got["a"] != 3 {
		t.Fatalf("state %v, want map[a:3]", got)
	}

	for _, tc := range []struct {
		name string
		do   func(r *informertest.Recorder[item])
		want string
	}{
		{"update backwards", func(r *informertest.Recorder[item]) { r.OnUpdate("a", item{3}, item{2}) }, "went backwards: 2 after 3"},
		{"re-add older after delete", func(r *informertest.Recorder[item]) {
			r.OnDelete("a", item{3}, false)
			r.OnAdd("a", item{1}, false)
		}, "went backwards: 1 after 3"},
		{"update with a stale old object", func(r *informertest.Recorder[item]) { r.OnUpdate("a", item{1}, item{4}) }, "the handler holds version 3"},
		{"update of a key not held", func(r *informertest.Recorder[item]) { r.OnUpdate("z", item{1}, item{4}) }, "does not hold"},
		{"delete of a key not held", func(r *informertest.Recorder[item]) { r.OnDelete("z", item{1}, false) }, "does not hold"},
		{"delete older than held", func(r *informertest.Recorder[item]) { r.OnDelete("a", item{2}, false) }, "older than the version 3"},
	} {
		f := &fakeT{}
		r := informertest.NewRecorder(f, version)
		r.OnAdd("a", item{3}, true)
		tc.do(r)
		if !strings.Contains(f.failures(), tc.want) {
			t.Errorf("%s: failures %q, want one containing %q", tc.name, f.failures(), tc.want)
		}
	}
	// A delete inferred by a relist may carry an older object.
	f = &fakeT{}
	r := informertest.NewRecorder(f, version)
	r.OnAdd("a", item{3}, true)
	r.OnDelete("a", item{2}, true)
	if f.failed() {
		t.Errorf("unknown delete with an older object failed: %s", f.failures())
	}
}

func TestRecorderWaits(t *testing.T) {
	rec := informertest.NewRecorder(t, version)
	go func() {
		rec.OnAdd("a", item{1}, false)
		rec.OnAdd("b", item{2}, false)
		rec.OnUpdate("a", item{1}, item{3})
	}()
	rec.ExpectSet("add b v=2", "add a v=1")
	rec.Expect("update a 1->3")
	rec.ExpectNone()
	rec.WaitState(map[string]int64{"a": 3, "b": 2})
	rec.Wait("three lines", func(log []string, _ map[string]int64) bool { return len(log) == 3 })

	// Waits that cannot be met fail the test, naming what they waited for.
	for name, wait := range map[string]func(r *informertest.Recorder[item]){
		"Expect":    func(r *informertest.Recorder[item]) { r.Expect("add a v=1", "add b v=1") },
		"ExpectSet": func(r *informertest.Recorder[item]) { r.ExpectSet("add b v=1") },
		"WaitState": func(r *informertest.Recorder[item]) { r.WaitState(map[string]int64{"a": 2}) },
		"Wait": func(r *informertest.Recorder[item]) {
			r.Wait("a at 2", func(_ []string, s map[string]int64) bool { return s["a"] == 2 })
		},
	} {
		f := &fakeT{}
		run(f, func(informertest.TB) {
			r := informertest.NewRecorder(f, version)
			r.OnAdd("a", item{1}, false)
			wait(r)
		})
		if !f.fatal {
			t.Errorf("%s: an unmet wait did not fail the test", name)
		}
		t.Logf("%s: %s", name, f.failures())
	}
	f := &fakeT{}
	run(f, func(informertest.TB) {
		r := informertest.NewRecorder(f, version)
		r.OnAdd("a", item{1}, false)
		r.Expect("add a v=2")
	})
	if !strings.Contains(f.failures(), "want\n\tadd a v=2") {
		t.Errorf("a wrong line: %q", f.failures())
	}
	f = &fakeT{}
	run(f, func(informertest.TB) {
		r := informertest.NewRecorder(f, version)
		r.OnAdd("a", item{1}, false)
		r.ExpectNone()
	})
	if !f.fatal {
		t.Errorf("ExpectNone with an unread line did not fail")
	}
}

// The Spy is faithful: a memory source wrapped in one passes the
// conformance suite.
func TestSpyConformance(t *testing.T) {
	conformance.Run(t, conformance.Capabilities{
		DeletesCarryObject: true, DistinguishesUpdate: true, ExactWriteRV: true, StrictGoroutines: true,
	}, func(t *testing.T) conformance.Harness[item] {
		s := memory.New[item](memory.Options{})
		return harness{s: s, spy: informertest.Wrap[item](s)}
	})
}

type harness struct {
	s   *memory.Source[item]
	spy *informertest.Spy[item]
}

func (h harness) ListerWatcher() driver.ListerWatcher[item] { return h.spy }
func (h harness) Put(_ context.Context, k string, n int64) (core.ResourceVersion, error) {
	return h.s.Put(k, item{n}), nil
}
func (h harness) Delete(_ context.Context, k string) (core.ResourceVersion, error) {
	rv, _ := h.s.Delete(k)
	return rv, nil
}
func (h harness) Version(it item) int64 { return it.V }
func (h harness) PutUnwatched(context.Context) (core.ResourceVersion, error) {
	return h.s.Advance(), nil
}
func (h harness) Expire(context.Context) error { return h.s.Compact(h.s.HeadRV()) }

func TestSpyFailsHoldsAndBreaks(t *testing.T) {
	ctx := context.Background()
	src := memory.New[item](memory.Options{})
	src.Put("a", item{1})
	spy := informertest.Wrap[item](src)
	// The Spy's Unwrap keeps what it wraps visible to driver.Capability,
	// and only that.
	if pr, ok := driver.Capability[driver.ProgressReporter](spy); !ok || !pr.ReportsProgress() {
		t.Error("ProgressReporter not found through the Spy")
	}
	if h, ok := driver.Capability[driver.HeadReader](spy); !ok {
		t.Error("HeadReader not found through the Spy")
	} else if head, err := h.Head(ctx); err != nil || head != 1 {
		t.Errorf("Head = %d, %v; want 1", head, err)
	}
	if _, ok := driver.Capability[driver.HeadReader](informertest.Wrap[item](noHead{src})); ok {
		t.Error("a HeadReader found through a Spy of a ListerWatcher without one")
	}
	if _, ok := driver.Capability[driver.HealWaiter](spy); ok {
		t.Error("a HealWaiter found through a Spy of a ListerWatcher without one")
	}
	healed := errors.New("healed answer")
	if h, ok := driver.Capability[driver.HealWaiter](informertest.Wrap[item](healer{noHead{src}, healed})); !ok {
		t.Error("HealWaiter not found through the Spy")
	} else if err := h.WaitHealed(ctx); err != healed {
		t.Errorf("WaitHealed not the wrapped one's: %v", err)
	}

	boom := errors.New("boom")
	spy.FailNextList(boom)
	spy.FailNextList(boom)
	spy.FailNextWatch(boom)
	for range 2 {
		if _, err := spy.List(ctx, driver.ListSink[item]{Emit: func(driver.Event[item]) error { return nil }}); !errors.Is(err, boom) {
			t.Fatalf("List with a failure planned: %v", err)
		}
	}
	if rv, err := spy.List(ctx, driver.ListSink[item]{Emit: func(driver.Event[item]) error { return nil }}); err != nil || rv != 1 {
		t.Fatalf("List after the planned failures: %d, %v", rv, err)
	}
	if c, ok := spy.LastList(); !ok || c.RV != 1 || c.Err != nil {
		t.Errorf("LastList = %v, %v", c, ok)
	}
	if err := spy.Watch(ctx, 1, driver.WatchOptions[item]{Emit: func([]driver.Event[item]) error { return nil }}); !errors.Is(err, boom) {
		t.Fatalf("Watch with a failure planned: %v", err)
	}

	// A held List waits at the gate, then runs.
	gate := spy.HoldLists()
	if spy.HoldLists() != gate {
		t.Error("a second HoldLists returned another gate")
	}
	listed := make(chan error, 1)
	go func() {
		_, err := spy.List(ctx, driver.ListSink[item]{Emit: func(driver.Event[item]) error { return nil }})
		listed <- err
	}()
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if gate.Held() != 1 {
		t.Errorf("Held = %d, want 1", gate.Held())
	}
	gate.Release()
	gate.Release()
	if err := <-listed; err != nil {
		t.Fatal(err)
	}
	// A held Watch whose context ends returns ErrWatchStopped.
	wgate := spy.HoldWatches()
	wctx, cancel := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() {
		watched <- spy.Watch(wctx, 1, driver.WatchOptions[item]{Emit: func([]driver.Event[item]) error { return nil }})
	}()
	if err := wgate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-watched; !errors.Is(err, driver.ErrWatchStopped) {
		t.Errorf("held Watch cancelled: %v", err)
	}
	wgate.Release()

	// Break ends open watches with the given error, after what they emitted.
	got := make(chan []driver.Event[item], 10)
	go func() {
		watched <- spy.Watch(ctx, 1, driver.WatchOptions[item]{Emit: func(b []driver.Event[item]) error {
			got <- slices.Clone(b)
			return nil
		}})
	}()
	if err := spy.WaitOpen(ctx, 1); err != nil {
		t.Fatal(err)
	}
	src.Put("a", item{2})
	<-got
	if err := spy.WaitWatch(ctx, spy.Watches()); err != nil {
		t.Fatal(err)
	}
	reset := errors.New("connection reset")
	if n := spy.Break(reset); n != 1 {
		t.Errorf("Break broke %d watches, want 1", n)
	}
	if err := <-watched; !errors.Is(err, reset) {
		t.Errorf("broken Watch returned %v, want the break's error", err)
	}
	if spy.Open() != 0 {
		t.Errorf("Open = %d after the break", spy.Open())
	}
	if spy.Lists() != 4 || spy.Watches() != 3 {
		t.Errorf("Lists %d, Watches %d; want 4 and 3 (calls %v)", spy.Lists(), spy.Watches(), spy.Calls())
	}
	// Wait gives up with the calls when ctx ends.
	sctx, scancel := context.WithTimeout(ctx, time.Millisecond)
	defer scancel()
	if err := spy.WaitOpen(sctx, 5); err == nil || !strings.Contains(err.Error(), "watch from 1") {
		t.Errorf("WaitOpen that cannot be met: %v", err)
	}
}

type noHead struct{ s *memory.Source[item] }

type healer struct {
	noHead
	err error
}

func (h healer) WaitHealed(context.Context) error { return h.err }

func (n noHead) List(ctx context.Context, sink driver.ListSink[item]) (core.ResourceVersion, error) {
	return n.s.List(ctx, sink)
}
func (n noHead) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[item]) error {
	return n.s.Watch(ctx, from, opts)
}

// Run fails the test with the reason when the cache does not sync, and
// stops its informer at cleanup.
func TestRunFailsWithoutSync(t *testing.T) {
	src := memory.New[item](memory.Options{})
	spy := informertest.Wrap[item](src)
	gate := spy.HoldLists()
	defer gate.Release()
	f := &fakeT{}
	run(f, func(tb informertest.TB) { informertest.Run[item](tb, spy, core.InformerOptions[item]{}) })
	if !f.fatal || !strings.Contains(f.failures(), "not synced") {
		t.Errorf("Run without a sync: %q", f.failures())
	}
}

func TestRunCollectsErrors(t *testing.T) {
	src := memory.New[item](memory.Options{})
	spy := informertest.Wrap[item](src)
	var seen []error
	var mu sync.Mutex
	opts := fastRetry()
	opts.ErrorHandler = func(err error) { mu.Lock(); seen = append(seen, err); mu.Unlock() }
	inf, errs := informertest.Run[item](t, spy, opts)
	// Break only breaks open watches: wait for the first one.
	if err := spy.WaitOpen(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if n := spy.Break(fmt.Errorf("reset: %w", driver.ErrExpired)); n != 1 {
		t.Fatalf("Break broke %d watches, want 1", n)
	}
	src.Put("a", item{1})
	informertest.WaitFor(t, inf, src.HeadRV())
	if err := errs.Wait(t, "the expired watch", func(err error) bool { return errors.Is(err, driver.ErrExpired) }); err == nil {
		t.Fatal("Wait returned nil")
	}
	if errs.Is(driver.ErrExpired) == nil || errs.Len() == 0 || len(errs.All()) != errs.Len() {
		t.Errorf("errors: %v", errs.All())
	}
	mu.Lock()
	n := len(seen)
	mu.Unlock()
	if n == 0 {
		t.Error("the ErrorHandler given in the options was not called")
	}
	// The reflector relists after an expired watch.
	informertest.Eventually(t, "a relist", func() bool { return spy.Lists() >= 2 })
	src.InjectDecodeError("bad", errors.New("not json"))
	de := informertest.As[*driver.DecodeError](t, errs)
	if de.Key != "bad" {
		t.Errorf("DecodeError for %q", de.Key)
	}

	f := &fakeT{}
	run(f, func(tb informertest.TB) {
		errs.Wait(tb, "an error never reported", func(err error) bool { return false })
	})
	if !f.fatal || !strings.Contains(f.failures(), "an error never reported") {
		t.Errorf("Errors.Wait that cannot be met: %q", f.failures())
	}
	f = &fakeT{}
	run(f, func(tb informertest.TB) { informertest.Eventually(tb, "never", func() bool { return false }) })
	if !f.fatal || !strings.Contains(f.failures(), "never") {
		t.Errorf("Eventually that cannot be met: %q", f.failures())
	}
}
