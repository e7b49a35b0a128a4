package prommetrics

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/core/workqueue"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sample returns the value of the series name{labels} gathered from reg
// (counter, gauge, or a histogram's sample count), and whether it exists.
func sample(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func histogram(t *testing.T, reg *prometheus.Registry, name, queue string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "name" && lp.GetValue() == queue {
						return m.GetHistogram()
					}
				}
			}
		}
	}
	t.Fatalf("no histogram %s{name=%q}", name, queue)
	return nil
}

func want(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string, v float64) {
	t.Helper()
	got, ok := sample(t, reg, name, labels)
	if !ok || got != v {
		t.Errorf("%s%v = %v (present %v), want %v", name, labels, got, ok, v)
	}
}

// eventually waits, with a generous deadline, for a series to reach v:
// handler goroutines and watch restarts report asynchronously.
func eventually(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string, v float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, ok := sample(t, reg, name, labels)
		if ok && got == v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v (present %v), want %v", name, labels, got, ok, v)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNilRegistererIsAnError(t *testing.T) {
	if _, err := New(nil, Options{}); err == nil {
		t.Fatal("New(nil) succeeded; it must never fall back to the global registry")
	}
}

func TestSecondProviderOnOneRegistryFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg, Options{}); err == nil {
		t.Fatal("a second Provider with the same names registered on one registry")
	}
	if _, err := New(reg, Options{Namespace: "other"}); err != nil {
		t.Fatalf("another namespace: %v", err)
	}
}

func TestNothingOnTheDefaultRegistry(t *testing.T) {
	if _, err := New(prometheus.NewRegistry(), Options{}); err != nil {
		t.Fatal(err)
	}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "dbinformer_") {
			t.Fatalf("%s is on the default registry", mf.GetName())
		}
	}
}

// An informer driven over the in-memory source through list, panicking
// handler, decode error, broken and expired watches reports each to its
// series, and lag is head − applied at scrape time.
func TestInformerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm, err := New(reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := memory.New[string](memory.Options{})
	src.Put("a", "1")
	src.Put("b", "2")
	src.Put("c", "3")

	spy := informertest.Wrap[string](src)
	inf := core.NewSharedIndexInformer[string](spy, core.InformerOptions[string]{
		Name:         "things",
		Metrics:      pm,
		Backoff:      core.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond},
		ErrorHandler: func(error) {}, // the errors provoked here are expected
	})
	pm.TrackLag(inf) // its head through the Spy, read by the informer
	var mu sync.Mutex
	var seen []string
	if _, err := inf.AddEventHandlerWithOptions(core.ResourceEventHandlerFuncs[string]{
		AddFunc: func(key, obj string, _ bool) {
			if obj == "panic" {
				panic("handler bug")
			}
			mu.Lock()
			seen = append(seen, key)
			mu.Unlock()
		},
	}, core.HandlerOptions{Name: "printer"}); err != nil {
		t.Fatal(err)
	}
	// A handler that blocks on key "g" until released, to hold a known
	// number of notifications pending.
	entered, release := make(chan struct{}), make(chan struct{})
	if _, err := inf.AddEventHandlerWithOptions(core.ResourceEventHandlerFuncs[string]{
		AddFunc: func(key, _ string, _ bool) {
			if key == "g" {
				close(entered)
				<-release
			}
		},
	}, core.HandlerOptions{Name: "slow"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- inf.Run(runCtx) }()
	defer func() { stop(); <-done }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}

	inf1 := map[string]string{"informer": "things"}
	want(t, reg, "dbinformer_informer_lists_total", map[string]string{"informer": "things", "kind": "list", "result": "success"}, 1)
	want(t, reg, "dbinformer_informer_listed_objects", inf1, 3)
	want(t, reg, "dbinformer_informer_list_received_objects", inf1, 3)

	if err := inf.WaitFor(ctx, src.Put("d", "panic")); err != nil {
		t.Fatal(err)
	}
	eventually(t, reg, "dbinformer_informer_handler_panics_total", map[string]string{"informer": "things", "handler": "printer"}, 1)

	rv := src.InjectDecodeError("e", errors.New("not a string"))
	if err := inf.WaitFor(ctx, rv); err != nil {
		t.Fatal(err)
	}
	want(t, reg, "dbinformer_informer_decode_errors_total", inf1, 1)
	eventually(t, reg, "dbinformer_informer_applied_resource_version", inf1, float64(rv))
	// The informer reuses a head read for a second: the scrapes see
	// the new head soon, not at once.
	eventually(t, reg, "dbinformer_informer_head_resource_version", inf1, float64(rv))
	eventually(t, reg, "dbinformer_informer_lag", inf1, 0)

	// Writes elsewhere in the source move the head; nothing reaches the
	// watch until it asks for progress, so the cache lags by two.
	src.Advance()
	head := src.Advance()
	eventually(t, reg, "dbinformer_informer_head_resource_version", inf1, float64(head))
	want(t, reg, "dbinformer_informer_lag", inf1, 2)
	if err := inf.WaitFor(ctx, head); err != nil {
		t.Fatal(err)
	}
	eventually(t, reg, "dbinformer_informer_lag", inf1, 0)

	n := spy.Watches()
	if err := spy.WaitWatch(ctx, n); err != nil {
		t.Fatal(err)
	}
	spy.Break(errors.New("connection reset"))
	eventually(t, reg, "dbinformer_informer_watch_restarts_total", map[string]string{"informer": "things", "reason": "error"}, 1)
	if err := spy.WaitWatch(ctx, n+1); err != nil {
		t.Fatal(err)
	}
	spy.Break(fmt.Errorf("history gone: %w", driver.ErrExpired))
	eventually(t, reg, "dbinformer_informer_watch_restarts_total", map[string]string{"informer": "things", "reason": "expired"}, 1)
	eventually(t, reg, "dbinformer_informer_lists_total", map[string]string{"informer": "things", "kind": "relist", "result": "success"}, 1)
	want(t, reg, "dbinformer_informer_listed_objects", inf1, 4)
	want(t, reg, "dbinformer_informer_watch_restarts_total", map[string]string{"informer": "things", "reason": "timeout"}, 0)

	if err := inf.WaitFor(ctx, src.Put("f", "6")); err != nil {
		t.Fatal(err)
	}
	if _, ok := sample(t, reg, "dbinformer_informer_pending_notifications", map[string]string{"informer": "things", "handler": "printer"}); !ok {
		t.Error("no pending_notifications series for handler printer")
	}

	// The slow handler is held inside "g": it and the two changes after it
	// are pending. Only the adds report while it is held, and only its own
	// goroutine once released, so both values are exact. (The printer's
	// final value is not asserted: core reports pending counts after
	// releasing the listener's lock, so an add's report racing a delivery's
	// can leave the gauge at a stale 1.)
	src.Put("g", "7")
	<-entered
	src.Put("h", "8")
	if err := inf.WaitFor(ctx, src.Put("i", "9")); err != nil {
		t.Fatal(err)
	}
	slow := map[string]string{"informer": "things", "handler": "slow"}
	eventually(t, reg, "dbinformer_informer_pending_notifications", slow, 3)
	close(release)
	eventually(t, reg, "dbinformer_informer_pending_notifications", slow, 0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := append([]string(nil), seen...)
		mu.Unlock()
		sort.Strings(got)
		if strings.Join(got, ",") == "a,b,c,f,g,h,i" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handler saw %v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHeadErrorsAreCountedAndDoNotBlockScrapes(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm, err := New(reg, Options{HeadTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pm.TrackLag(named{"stuck", stuckHead{}})
	if _, ok := sample(t, reg, "dbinformer_informer_lag", map[string]string{"informer": "stuck"}); ok {
		t.Error("lag reported for a source whose head could not be read")
	}
	pm.UntrackLag("stuck") // the next scrape reads no head and sees the count settled
	want(t, reg, "dbinformer_informer_head_errors_total", map[string]string{"informer": "stuck"}, 1)
}

// stuckHead never answers until its context ends, like a source behind a
// dead connection.
type stuckHead struct{}

func (stuckHead) Head(ctx context.Context) (core.ResourceVersion, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// The workqueue's metrics under a fake clock: exact durations, no sleeps.
func TestWorkqueueMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm, err := New(reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(1000, 0))
	q := workqueue.New(workqueue.Options[string]{Name: "jobs", MetricsProvider: pm, Clock: clk})
	defer q.ShutDown()
	jobs := map[string]string{"name": "jobs"}

	q.Add("a")
	q.Add("b")
	q.Add("a") // deduplicated: not an add
	want(t, reg, "dbinformer_workqueue_adds_total", jobs, 2)
	want(t, reg, "dbinformer_workqueue_depth", jobs, 2)

	clk.Step(time.Second)
	item, _ := q.Get()
	if item != "a" {
		t.Fatalf("got %q", item)
	}
	want(t, reg, "dbinformer_workqueue_depth", jobs, 1)
	if h := histogram(t, reg, "dbinformer_workqueue_queue_duration_seconds", "jobs"); h.GetSampleCount() != 1 || h.GetSampleSum() != 1 {
		t.Errorf("queue duration: count %d sum %v, want 1 and 1s", h.GetSampleCount(), h.GetSampleSum())
	}

	clk.Step(2 * time.Second)
	eventually(t, reg, "dbinformer_workqueue_unfinished_work_seconds", jobs, 2)
	eventually(t, reg, "dbinformer_workqueue_longest_running_processor_seconds", jobs, 2)
	q.Done("a")
	if h := histogram(t, reg, "dbinformer_workqueue_work_duration_seconds", "jobs"); h.GetSampleCount() != 1 || h.GetSampleSum() != 2 {
		t.Errorf("work duration: count %d sum %v, want 1 and 2s", h.GetSampleCount(), h.GetSampleSum())
	}

	q.AddRateLimited("a")
	q.AddAfter("c", time.Minute)
	want(t, reg, "dbinformer_workqueue_retries_total", jobs, 2)
}

// Direct calls: the restart reason mapping, including a wrapped ErrExpired.
func TestWatchRestartReasons(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm, err := New(reg, Options{Namespace: "x", ConstLabels: prometheus.Labels{"role": "test"}})
	if err != nil {
		t.Fatal(err)
	}
	m := pm.InformerMetrics("i")
	m.WatchRestarted(nil)
	m.WatchRestarted(nil)
	m.WatchRestarted(fmt.Errorf("compacted: %w", driver.ErrExpired))
	m.WatchRestarted(errors.New("eof"))
	m.WatchRestarted(fmt.Errorf("watch from version 5: %w (no event or bookmark for 30s)", driver.ErrWatchStuck))
	m.Listed(false, 0, errors.New("denied"))
	for reason, n := range map[string]float64{"timeout": 2, "expired": 1, "stuck": 1, "error": 1} {
		want(t, reg, "x_informer_watch_restarts_total", map[string]string{"informer": "i", "reason": reason, "role": "test"}, n)
	}
	want(t, reg, "x_informer_lists_total", map[string]string{"informer": "i", "kind": "list", "result": "error"}, 1)
	want(t, reg, "x_informer_listed_objects", map[string]string{"informer": "i"}, 0) // a failed list does not set it
	m.Listed(true, 7, nil)
	want(t, reg, "x_informer_listed_objects", map[string]string{"informer": "i"}, 7)
	want(t, reg, "x_informer_lists_total", map[string]string{"informer": "i", "kind": "relist", "result": "success"}, 1)
}

// named gives a HeadReader the name TrackLag needs.
type named struct {
	name string
	driver.HeadReader
}

func (n named) Name() string { return n.name }
