package core

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestInformer(lw *fakeLW, opts InformerOptions[string]) (*SharedIndexInformer[string], *clock.Fake, *errCollector) {
	fc := clock.NewFake(t0)
	ec := &errCollector{}
	opts.Clock = fc
	opts.ErrorHandler = ec.handle
	if opts.Name == "" {
		opts.Name = "test source"
	}
	return NewSharedIndexInformer[string](lw, opts), fc, ec
}

func bothModes(t *testing.T, f func(t *testing.T, deltaFIFO bool)) {
	t.Run("FIFO", func(t *testing.T) { f(t, false) })
	t.Run("DeltaFIFO", func(t *testing.T) { f(t, true) })
}

func TestInformerListThenWatch(t *testing.T) {
	bothModes(t, func(t *testing.T, deltaFIFO bool) {
		lw := newFakeLW()
		inf, _, _ := newTestInformer(lw, InformerOptions[string]{DeltaFIFO: deltaFIFO})
		rec := newRecorder()
		reg, err := inf.AddEventHandler(rec)
		must(t, err)
		started(t, inf)
		lw.list(t, 5, add("a", "a1", 3))
		must(t, inf.WaitForCacheSync(testCtx(t)))
		rec.expect(t, "add a=a1 initial=true")
		eventually(t, "registration synced", reg.HasSynced)

		w := lw.watch(t)
		if w.from != 5 {
			t.Fatalf("watch from %d, want the list's version 5", w.from)
		}
		w.send(t, add("b", "b1", 6), mod("a", "a2", 6))
		w.send(t, del("b", 7)) // no object: the informer fills it in
		must(t, inf.WaitFor(testCtx(t), 7))
		if deltaFIFO {
			// Grouped per key: only each key's own order is kept.
			rec.expectSet(t, "add b=b1 initial=false", "delete b=b1 unknown=false", "update a a1->a2")
		} else {
			rec.expect(t, "add b=b1 initial=false", "update a a1->a2", "delete b=b1 unknown=false")
		}
		if got, ok := inf.Lister().Get("a"); !ok || got != "a2" {
			t.Fatalf("Get(a) = %q, %v", got, ok)
		}
		if _, ok := inf.Lister().Get("b"); ok {
			t.Fatal("b still cached")
		}
		if inf.LastSyncResourceVersion() != 7 {
			t.Fatalf("LastSyncResourceVersion = %d", inf.LastSyncResourceVersion())
		}
	})
}

func TestInformerRelistsOnExpiredWithTombstones(t *testing.T) {
	bothModes(t, func(t *testing.T, deltaFIFO bool) {
		lw := newFakeLW()
		m := &countingMetrics{}
		inf, _, ec := newTestInformer(lw, InformerOptions[string]{DeltaFIFO: deltaFIFO, Metrics: m})
		rec := newRecorder()
		_, err := inf.AddEventHandler(rec)
		must(t, err)
		started(t, inf)
		lw.list(t, 5, add("a", "a1", 0), add("b", "b1", 0))
		rec.expectSet(t, "add a=a1 initial=true", "add b=b1 initial=true")
		w := lw.watch(t)
		w.send(t, mod("a", "a2", 6))
		rec.expect(t, "update a a1->a2")
		w.fail(t, driver.ErrExpired)
		// A watch that made progress relists at once, no backoff.
		lw.list(t, 20, add("a", "a3", 0), add("c", "c1", 0))
		rec.expectSet(t, "delete b=b1 unknown=true", "update a a2->a3", "add c=c1 initial=false")
		if w2 := lw.watch(t); w2.from != 20 {
			t.Fatalf("rewatch from %d, want 20", w2.from)
		}
		if lw.listCalls.Load() != 2 {
			t.Fatalf("list calls = %d", lw.listCalls.Load())
		}
		if ec.find(func(e error) bool { return errors.Is(e, driver.ErrExpired) }) == nil {
			t.Fatal("expiry not reported")
		}
		if m.lists.Load() != 2 || m.relists.Load() != 1 || m.restarts.Load() != 1 {
			t.Fatalf("metrics: lists %d relists %d watch restarts %d", m.lists.Load(), m.relists.Load(), m.restarts.Load())
		}
	})
}

func TestReflectorBacksOffAndResumesFromLastVersion(t *testing.T) {
	lw := newFakeLW()
	inf, fc, ec := newTestInformer(lw, InformerOptions[string]{})
	started(t, inf)
	lw.list(t, 5)
	w := lw.watch(t)
	w.send(t, add("a", "a1", 8))
	must(t, inf.WaitFor(testCtx(t), 8))
	w.fail(t, errors.New("connection reset"))
	// Once the failure is reported the watch's timeout timer is gone and
	// only the backoff timer remains; step past its longest delay (800ms
	// plus up to 100% jitter).
	eventually(t, "watch error reported", func() bool {
		return ec.find(func(e error) bool { return strings.Contains(e.Error(), "connection reset") }) != nil
	})
	eventually(t, "backoff timer", func() bool { return fc.Waiters() == 1 })
	fc.Step(1600 * time.Millisecond)
	w2 := lw.watch(t)
	if w2.from != 8 {
		t.Fatalf("resumed from %d, want 8", w2.from)
	}
	if n := lw.listCalls.Load(); n != 1 {
		t.Fatalf("a retryable watch error relisted (%d lists)", n)
	}
	err := ec.find(func(e error) bool { return strings.Contains(e.Error(), "connection reset") })
	if err == nil || !strings.Contains(err.Error(), "test source") || !strings.Contains(err.Error(), "version 8") {
		t.Fatalf("error not reported with source and version: %v", err)
	}
}

func TestBackoffGrowsAndResets(t *testing.T) {
	fc := clock.NewFake(t0)
	b := newBackoffState(Backoff{Initial: time.Second, Max: 4 * time.Second, Jitter: -1, Reset: time.Minute}, fc)
	var got []time.Duration
	for range 4 {
		got = append(got, b.next())
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	fc.Step(time.Minute)
	if d := b.next(); d != time.Second {
		t.Fatalf("after a healthy minute delay = %v, want reset to 1s", d)
	}
	j := newBackoffState(Backoff{Initial: time.Second, Jitter: 1}, fc)
	j.rand = func() float64 { return 0.5 }
	if d := j.next(); d != 1500*time.Millisecond {
		t.Fatalf("jittered delay = %v", d)
	}
}

func TestWatchTimeoutReopensFromLastVersion(t *testing.T) {
	lw := newFakeLW()
	inf, fc, _ := newTestInformer(lw, InformerOptions[string]{MinWatchTimeout: time.Minute})
	started(t, inf)
	lw.list(t, 5)
	w := lw.watch(t)
	w.send(t, add("a", "a1", 6))
	must(t, inf.WaitFor(testCtx(t), 6))
	eventually(t, "watch timer", func() bool { return fc.Waiters() == 1 })
	fc.Step(2 * time.Minute)
	if w2 := lw.watch(t); w2.from != 6 {
		t.Fatalf("reopened from %d, want 6", w2.from)
	}
	if lw.listCalls.Load() != 1 {
		t.Fatal("a watch timeout relisted")
	}
}

func TestWaitForCacheSyncSaysWhy(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := inf.WaitForCacheSync(ctx); err == nil || !strings.Contains(err.Error(), "never started") {
		t.Fatalf("unstarted: %v", err)
	}
	started(t, inf)
	lw.listErr(t, 0, errors.New("permission denied for table users"))
	eventually(t, "list error recorded", func() bool { return inf.LastListError() != nil })
	err := inf.WaitForCacheSync(ctx)
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "permission denied for table users") {
		t.Fatalf("WaitForCacheSync = %v, want ctx error and the last list error", err)
	}
	if inf.HasSynced() {
		t.Fatal("HasSynced after failed list")
	}
}

func TestOutOfOrderBatchIsNotAppliedAndRelists(t *testing.T) {
	lw := newFakeLW()
	inf, _, ec := newTestInformer(lw, InformerOptions[string]{})
	rec := newRecorder()
	_, err := inf.AddEventHandler(rec)
	must(t, err)
	started(t, inf)
	lw.list(t, 5)
	w := lw.watch(t)
	w.send(t, add("a", "a1", 7))
	rec.expect(t, "add a=a1 initial=false")
	w.send(t, add("b", "b1", 9), mod("a", "old", 6))
	<-w.stop
	eventually(t, "order error", func() bool {
		var oe *OrderError
		return ec.find(func(e error) bool { return errors.As(e, &oe) && oe.Key == "a" && oe.RV == 6 }) != nil
	})
	if _, ok := inf.Lister().Get("b"); ok {
		t.Fatal("part of a broken batch was applied")
	}
	// The late change (6) is below the applied version (7): resuming the
	// watch from 7 would never fetch it again, so the reflector relists.
	lw.list(t, 9, add("a", "a2", 0), add("b", "b1", 0))
	if w2 := lw.watch(t); w2.from != 9 {
		t.Fatalf("watch after the relist from %d, want 9", w2.from)
	}
	rec.expect(t, "update a a1->a2", "add b=b1 initial=false")
	must(t, inf.WaitFor(testCtx(t), 9))
	if v, _ := inf.Lister().Get("a"); v != "a2" {
		t.Fatalf("a = %q after the relist, want a2", v)
	}
}

func TestDecodeErrorIsReportedAndVersionAdvances(t *testing.T) {
	lw := newFakeLW()
	m := &countingMetrics{}
	inf, _, ec := newTestInformer(lw, InformerOptions[string]{Metrics: m})
	started(t, inf)
	lw.list(t, 5, add("a", "a1", 0), driver.Event[string]{Type: driver.Added, Key: "bad", RV: 5, Err: errors.New("invalid utf8")})
	must(t, inf.WaitForCacheSync(testCtx(t)))
	w := lw.watch(t)
	w.send(t, driver.Event[string]{Type: driver.Modified, Key: "a", RV: 6, Err: errors.New("column type xid has no mapping")})
	must(t, inf.WaitFor(testCtx(t), 6))
	if v, ok := inf.Lister().Get("a"); ok {
		t.Fatalf("a key whose change did not decode keeps its previous state %q", v)
	}
	var de *driver.DecodeError
	if ec.find(func(e error) bool {
		return errors.As(e, &de) && de.Key == "a" && de.RV == 6 && de.Source == "test source"
	}) == nil {
		t.Fatalf("decode error not reported with source/key/version: %v", ec.errs)
	}
	if ec.find(func(e error) bool { return errors.As(e, &de) && de.Key == "bad" }) == nil {
		t.Fatal("list decode error not reported")
	}
	if m.decode.Load() != 2 {
		t.Fatalf("decode metric = %d", m.decode.Load())
	}
}

func TestHandlerPanicIsRecovered(t *testing.T) {
	lw := newFakeLW()
	m := &countingMetrics{}
	inf, _, ec := newTestInformer(lw, InformerOptions[string]{Metrics: m})
	calls := make(chan string, 10)
	_, err := inf.AddEventHandlerWithOptions(ResourceEventHandlerFuncs[string]{
		AddFunc: func(key, obj string, _ bool) {
			calls <- key
			if key == "boom" {
				panic("nil map")
			}
		},
	}, HandlerOptions{Name: "panicky"})
	must(t, err)
	rec := newRecorder()
	_, err = inf.AddEventHandler(rec)
	must(t, err)
	started(t, inf)
	lw.list(t, 1)
	w := lw.watch(t)
	w.send(t, add("boom", "x", 2))
	w.send(t, add("fine", "y", 3))
	rec.expect(t, "add boom=x initial=false", "add fine=y initial=false")
	if <-calls != "boom" || <-calls != "fine" {
		t.Fatal("panicking handler stopped receiving")
	}
	var pe *HandlerPanicError
	if ec.find(func(e error) bool { return errors.As(e, &pe) && pe.Handler == "panicky" && pe.Key == "boom" }) == nil {
		t.Fatal("panic not reported")
	}
	if m.panics.Load() != 1 {
		t.Fatalf("panic metric = %d", m.panics.Load())
	}
}

func TestResyncPeriodRules(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{ResyncPeriod: 12 * time.Hour})
	period := func(r *Registration[string]) time.Duration {
		r.l.mu.Lock()
		defer r.l.mu.Unlock()
		return r.l.resyncPeriod
	}
	h1, _ := inf.AddEventHandler(newRecorder())
	h2, _ := inf.AddEventHandlerWithOptions(newRecorder(), HandlerOptions{ResyncPeriod: time.Minute})
	if inf.resyncCheckPeriod != time.Minute || period(h1) != 12*time.Hour || period(h2) != time.Minute {
		t.Fatalf("check %v h1 %v h2 %v", inf.resyncCheckPeriod, period(h1), period(h2))
	}
	h3, _ := inf.AddEventHandlerWithOptions(newRecorder(), HandlerOptions{ResyncPeriod: 100 * time.Millisecond})
	if period(h3) != MinimumResyncPeriod || inf.resyncCheckPeriod != MinimumResyncPeriod {
		t.Fatalf("below the minimum: h3 %v check %v", period(h3), inf.resyncCheckPeriod)
	}
	h4, _ := inf.AddEventHandlerWithOptions(newRecorder(), HandlerOptions{ResyncPeriod: -1})
	if period(h4) != 0 {
		t.Fatalf("h4 %v, want no resync", period(h4))
	}
	stop := started(t, inf)
	lw.list(t, 1)
	h5, _ := inf.AddEventHandlerWithOptions(newRecorder(), HandlerOptions{ResyncPeriod: time.Second / 2})
	if period(h5) != MinimumResyncPeriod {
		t.Fatalf("h5 %v", period(h5))
	}
	stop()
	inf2, _, _ := newTestInformer(newFakeLW(), InformerOptions[string]{ResyncPeriod: time.Minute})
	inf2.mu.Lock()
	inf2.started = true
	inf2.mu.Unlock()
	h6, _ := inf2.AddEventHandlerWithOptions(newRecorder(), HandlerOptions{ResyncPeriod: 10 * time.Second})
	if period(h6) != time.Minute || inf2.resyncCheckPeriod != time.Minute {
		t.Fatalf("after start a smaller period must rise to the check period: %v", period(h6))
	}
	inf3, _, _ := newTestInformer(newFakeLW(), InformerOptions[string]{})
	h7, _ := inf3.AddEventHandlerWithOptions(newRecorder(), HandlerOptions{ResyncPeriod: 10 * time.Second})
	if period(h7) != 10*time.Second || inf3.resyncCheckPeriod != 10*time.Second {
		t.Fatalf("informer without resync, first handler sets the check period: %v", period(h7))
	}
}

func TestResyncReachesOnlyDueHandlers(t *testing.T) {
	lw := newFakeLW()
	inf, fc, _ := newTestInformer(lw, InformerOptions[string]{})
	due := newRecorder()
	_, err := inf.AddEventHandlerWithOptions(due, HandlerOptions{ResyncPeriod: time.Minute})
	must(t, err)
	other := newRecorder()
	_, err = inf.AddEventHandler(other)
	must(t, err)
	started(t, inf)
	lw.list(t, 5, add("a", "a1", 0))
	due.expect(t, "add a=a1 initial=true")
	other.expect(t, "add a=a1 initial=true")
	w := lw.watch(t)
	eventually(t, "resync and watch timers", func() bool { return fc.Waiters() == 2 })
	fc.Step(time.Minute)
	due.expect(t, "update a a1->a1")
	w.send(t, mod("a", "a2", 6))
	due.expect(t, "update a a1->a2")
	other.expect(t, "update a a1->a2")
}

func TestWaitForRequestsProgressForQuietVersions(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{})
	started(t, inf)
	lw.list(t, 5)
	w := lw.watch(t)
	eventually(t, "watch open", func() bool {
		inf.mu.Lock()
		r := inf.reflector
		inf.mu.Unlock()
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.progress != nil
	})
	done := make(chan error, 1)
	go func() { done <- inf.WaitFor(testCtx(t), 10) }()
	eventually(t, "progress request", func() bool { return w.progress.Load() > 0 })
	select {
	case err := <-done:
		t.Fatalf("WaitFor returned before the version: %v", err)
	default:
	}
	w.send(t, driver.Event[string]{Type: driver.Bookmark, RV: 10})
	must(t, <-done)
	if inf.AppliedVersion() != 10 {
		t.Fatalf("applied %d", inf.AppliedVersion())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := inf.WaitFor(ctx, 11); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "version 11") {
		t.Fatalf("WaitFor on cancelled ctx = %v", err)
	}
}

func TestLateHandlerGetsReplayAndCanBeRemoved(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{})
	started(t, inf)
	lw.list(t, 5, add("a", "a1", 0), add("b", "b1", 0))
	must(t, inf.WaitForCacheSync(testCtx(t)))
	rec := newRecorder()
	reg, err := inf.AddEventHandler(rec)
	must(t, err)
	rec.expectSet(t, "add a=a1 initial=true", "add b=b1 initial=true")
	eventually(t, "late registration synced", reg.HasSynced)
	w := lw.watch(t)
	must(t, inf.RemoveEventHandler(reg))
	select {
	case <-reg.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after Remove")
	}
	w.send(t, add("c", "c1", 6))
	must(t, inf.WaitFor(testCtx(t), 6))
	rec.expectNone(t)
	if reg.Pending() != 0 {
		t.Fatalf("removed registration pending %d", reg.Pending())
	}
}

func TestInformerRestarts(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{})
	rec := newRecorder()
	_, err := inf.AddEventHandler(rec)
	must(t, err)
	stop := started(t, inf)
	lw.list(t, 5, add("a", "a1", 0), add("b", "b1", 0))
	rec.expectSet(t, "add a=a1 initial=true", "add b=b1 initial=true")
	lw.watch(t)
	stop()
	started(t, inf)
	eventually(t, "second run listing", func() bool { return lw.listCalls.Load() == 2 })
	if err := inf.Run(context.Background()); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second concurrent Run = %v", err)
	}
	lw.list(t, 9, add("a", "a1", 0))
	// The list streams in first; the deletes it implies follow it.
	rec.expect(t, "update a a1->a1")
	rec.expect(t, "delete b=b1 unknown=true")
	if !inf.HasSynced() {
		t.Fatal("HasSynced lost on restart")
	}
}

func TestEqualTurnsUnchangedRelistIntoResync(t *testing.T) {
	lw := newFakeLW()
	inf, fc, ec := newTestInformer(lw, InformerOptions[string]{Equal: func(a, b string) bool { return a == b }})
	rec := newRecorder()
	_, err := inf.AddEventHandler(rec)
	must(t, err)
	started(t, inf)
	lw.list(t, 5, add("a", "a1", 0), add("b", "b1", 0))
	rec.expectSet(t, "add a=a1 initial=true", "add b=b1 initial=true")
	w := lw.watch(t)
	w.fail(t, driver.ErrExpired)
	// Expired before any progress: the relist waits for the backoff (armed
	// once the expiry is reported).
	eventually(t, "expiry reported", func() bool { return ec.find(func(e error) bool { return errors.Is(e, driver.ErrExpired) }) != nil })
	eventually(t, "backoff timer", func() bool { return fc.Waiters() == 1 })
	fc.Step(2 * time.Second)
	lw.list(t, 9, add("a", "a1", 0), add("b", "b2", 0))
	rec.expect(t, "update b b1->b2")
	must(t, inf.WaitFor(testCtx(t), 9))
	rec.expectNone(t)
}

func TestBoundedHandlerBlocksInsteadOfDropping(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{})
	release := make(chan struct{})
	got := make(chan string, 10)
	reg, err := inf.AddEventHandlerWithOptions(ResourceEventHandlerFuncs[string]{
		AddFunc: func(key, _ string, _ bool) {
			got <- key
			<-release
		},
	}, HandlerOptions{MaxPending: 1})
	must(t, err)
	started(t, inf)
	lw.list(t, 5)
	w := lw.watch(t)
	w.send(t, add("a", "", 6))
	<-got
	w.send(t, add("b", "", 7))
	w.send(t, add("c", "", 8))
	if n := reg.Pending(); n > 1 {
		t.Fatalf("pending %d beyond the bound", n)
	}
	if inf.AppliedVersion() >= 8 {
		t.Fatal("informer ran ahead of a full handler")
	}
	close(release)
	must(t, inf.WaitFor(testCtx(t), 8))
	if b, c := <-got, <-got; b != "b" || c != "c" {
		t.Fatalf("got %s %s", b, c)
	}
}

func TestTransformAppliesBeforeCaching(t *testing.T) {
	lw := newFakeLW()
	inf, _, ec := newTestInformer(lw, InformerOptions[string]{Transform: func(s string) (string, error) {
		if s == "reject" {
			return "", errors.New("too large")
		}
		return strings.ToUpper(s), nil
	}})
	started(t, inf)
	lw.list(t, 5, add("a", "a1", 0))
	must(t, inf.WaitForCacheSync(testCtx(t)))
	lw.watch(t).send(t, add("b", "b1", 6), add("c", "reject", 6))
	must(t, inf.WaitFor(testCtx(t), 6))
	a, _ := inf.Lister().Get("a")
	b, _ := inf.Lister().Get("b")
	if a != "A1" || b != "B1" {
		t.Fatalf("a=%q b=%q", a, b)
	}
	var de *driver.DecodeError
	if ec.find(func(e error) bool { return errors.As(e, &de) && de.Key == "c" }) == nil {
		t.Fatal("transform error not reported")
	}
}

func TestListerAndIndexes(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{Indexers: Indexers[string]{
		"first": func(s string) ([]string, error) { return []string{s[:1]}, nil },
	}})
	started(t, inf)
	lw.list(t, 5, add("1", "apple", 0), add("2", "avocado", 0), add("3", "banana", 0))
	must(t, inf.WaitForCacheSync(testCtx(t)))
	l := inf.Lister()
	as, err := l.ByIndex("first", "a")
	must(t, err)
	if len(as) != 2 {
		t.Fatalf("ByIndex a = %v", as)
	}
	long := l.List(func(s string) bool { return len(s) > 5 })
	if len(long) != 2 {
		t.Fatalf("List(filter) = %v", long)
	}
	if len(l.List(nil)) != 3 {
		t.Fatal("List(nil)")
	}
}

func TestFactorySharesAndShutsDown(t *testing.T) {
	lw := newFakeLW()
	f := NewFactory()
	a := InformerFor[string](f, "src", lw, InformerOptions[string]{})
	if b := InformerFor[string](f, "src", newFakeLW(), InformerOptions[string]{}); a != b {
		t.Fatal("same source and type gave two informers")
	}
	if a.Name() != "src" {
		t.Fatalf("name %q", a.Name())
	}
	other := InformerFor[int](f, "src", memLW[int]{}, InformerOptions[int]{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.Start(ctx)
	f.Start(ctx)
	lw.list(t, 1)
	must(t, f.WaitForCacheSync(testCtx(t)))
	if !other.HasSynced() || lw.listCalls.Load() != 1 {
		t.Fatalf("other synced %v, lists %d", other.HasSynced(), lw.listCalls.Load())
	}
	f.Shutdown()
	f.Start(ctx) // no-op after Shutdown; goleak checks nothing runs
}

// memLW is an always-empty source that never changes.
type memLW[T any] struct{}

func (memLW[T]) List(context.Context, driver.ListSink[T]) (ResourceVersion, error) { return 1, nil }
func (memLW[T]) Watch(ctx context.Context, _ ResourceVersion, _ driver.WatchOptions[T]) error {
	<-ctx.Done()
	return driver.Stopped(ctx)
}

func TestStopWithFullBoundedHandlerDoesNotHang(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{})
	release := make(chan struct{})
	got := make(chan string, 10)
	reg, err := inf.AddEventHandlerWithOptions(ResourceEventHandlerFuncs[string]{
		AddFunc: func(key, _ string, _ bool) {
			got <- key
			<-release
		},
	}, HandlerOptions{MaxPending: 1})
	must(t, err)
	stop := started(t, inf)
	lw.list(t, 5)
	w := lw.watch(t)
	w.send(t, add("a", "", 6), add("b", "", 6), add("c", "", 6))
	<-got
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	close(release)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	// What was not delivered before the stop is kept for the next run:
	// b and c arrive exactly once, in order, across the two runs.
	started(t, inf)
	lw.list(t, 6, add("a", "", 0), add("b", "", 0), add("c", "", 0))
	if b, c := <-got, <-got; b != "b" || c != "c" {
		t.Fatalf("got %s %s", b, c)
	}
	must(t, inf.WaitForCacheSync(testCtx(t)))
	eventually(t, "drained", func() bool { return reg.Pending() == 0 })
	select {
	case k := <-got:
		t.Fatalf("duplicate add %s", k)
	default:
	}
}

func TestEventWithoutKeyIsReported(t *testing.T) {
	lw := newFakeLW()
	inf, _, ec := newTestInformer(lw, InformerOptions[string]{})
	started(t, inf)
	lw.list(t, 5, add("", "orphan", 0), add("a", "a1", 0))
	must(t, inf.WaitForCacheSync(testCtx(t)))
	lw.watch(t).send(t, add("", "orphan2", 6))
	must(t, inf.WaitFor(testCtx(t), 6))
	if n := inf.Indexer().Len(); n != 1 {
		t.Fatalf("cache has %d keys", n)
	}
	var de *driver.DecodeError
	if ec.find(func(e error) bool { return errors.As(e, &de) && de.RV == 6 && strings.Contains(e.Error(), "no key") }) == nil {
		t.Fatalf("keyless event not reported: %v", ec.errs)
	}
}

func TestRegistrationSyncsAfterItsInitialAdds(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{})
	release := make(chan struct{})
	slow, err := inf.AddEventHandler(ResourceEventHandlerFuncs[string]{
		AddFunc: func(string, string, bool) { <-release },
	})
	must(t, err)
	fast, err := inf.AddEventHandler(newRecorder())
	must(t, err)
	started(t, inf)
	lw.list(t, 5, add("a", "a1", 0), add("b", "b1", 0))
	must(t, inf.WaitForCacheSync(testCtx(t)))
	must(t, fast.WaitForCacheSync(testCtx(t)))
	if slow.HasSynced() {
		t.Fatal("registration synced with its initial adds undelivered")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := slow.WaitForCacheSync(ctx); err == nil || !strings.Contains(err.Error(), "initial notifications left") {
		t.Fatalf("WaitForCacheSync = %v", err)
	}
	close(release)
	must(t, WaitForCacheSync(testCtx(t), slow, fast, inf))
	if !slow.HasSynced() {
		t.Fatal("not synced after delivery")
	}
}

func TestIndexErrorIsReportedOutsideTheCacheLock(t *testing.T) {
	lw := newFakeLW()
	var inf *SharedIndexInformer[string]
	reported := make(chan error, 1)
	inf = NewSharedIndexInformer[string](lw, InformerOptions[string]{
		Name: "src",
		Indexers: Indexers[string]{"len": func(s string) ([]string, error) {
			if s == "" {
				return nil, errors.New("empty value")
			}
			return []string{strings.Repeat("x", len(s))}, nil
		}},
		ErrorHandler: func(err error) {
			_, _ = inf.Lister().Get("a") // would deadlock under the cache lock
			reported <- err
		},
	})
	started(t, inf)
	lw.list(t, 5, add("a", "a1", 0), add("bad", "", 0))
	must(t, inf.WaitForCacheSync(testCtx(t)))
	err := <-reported
	var ie *IndexError
	if !errors.As(err, &ie) || ie.Key != "bad" || !strings.Contains(err.Error(), "src: list") {
		t.Fatalf("err = %v", err)
	}
	if _, ok := inf.Lister().Get("bad"); ok {
		t.Fatal("object whose index failed was cached")
	}
}

// skippingLW is a fakeLW whose watch may skip superseded changes.
type skippingLW struct{ *fakeLW }

func (skippingLW) SkipsSuperseded() bool { return true }

// A source that may skip a superseded change (SupersededSkipper): neither
// its list at 5 nor the change it delivers at 8 proves the versions before
// them (a skipped change at 7 may still come, as its key's later message),
// so WaitFor(7) waits for a Bookmark, in both queue modes; the change is
// applied at once all the same.
func TestSupersededSkipperAppliesAtBookmarksOnly(t *testing.T) {
	bothModes(t, func(t *testing.T, deltaFIFO bool) {
		lw := newFakeLW()
		fc := clock.NewFake(t0)
		inf := NewSharedIndexInformer[string](skippingLW{lw}, InformerOptions[string]{Name: "skipping", Clock: fc, DeltaFIFO: deltaFIFO, ErrorHandler: (&errCollector{}).handle})
		started(t, inf)
		lw.list(t, 5)
		must(t, inf.WaitForCacheSync(testCtx(t)))
		w := lw.watch(t)
		w.send(t, add("b", "b8", 8))
		eventually(t, "b applied", func() bool { _, ok := inf.Indexer().Get("b"); return ok })
		if v := inf.AppliedVersion(); v != 0 {
			t.Fatalf("applied %d after a list at 5 and a change at 8 from a source that skips superseded changes, want 0 (no bookmark yet)", v)
		}
		done := make(chan error, 1)
		go func() { done <- inf.WaitFor(testCtx(t), 7) }()
		eventually(t, "progress request", func() bool { return w.progress.Load() > 0 })
		select {
		case err := <-done:
			t.Fatalf("WaitFor(7) returned before a bookmark: %v", err)
		default:
		}
		w.send(t, add("a", "a9", 9), driver.Event[string]{Type: driver.Bookmark, RV: 9})
		must(t, <-done)
		must(t, inf.WaitFor(testCtx(t), 9))
		if _, ok := inf.Indexer().Get("a"); !ok {
			t.Fatal("WaitFor(9) returned before the change delivered with the bookmark at 9")
		}
	})
}
