package core

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core/driver"
)

// fakeLW is a scripted ListerWatcher: each List takes the next listResult
// the test provides, each Watch hands its watcher to the test, which then
// feeds it batch by batch.
type fakeLW struct {
	lists     chan listResult
	watches   chan *fakeWatcher
	listCalls atomic.Int32
}

type listResult struct {
	items  []driver.Event[string]
	rv     ResourceVersion
	err    error
	onEmit func() // called before each item is emitted
}

func newFakeLW() *fakeLW {
	return &fakeLW{lists: make(chan listResult), watches: make(chan *fakeWatcher)}
}

func (f *fakeLW) List(ctx context.Context, sink driver.ListSink[string]) (ResourceVersion, error) {
	f.listCalls.Add(1)
	select {
	case r := <-f.lists:
		if sink.Estimate != nil {
			sink.Estimate(int64(len(r.items)))
		}
		for _, e := range r.items {
			if r.onEmit != nil {
				r.onEmit()
			}
			if err := sink.Emit(e); err != nil {
				return 0, err
			}
		}
		return r.rv, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// ReportsProgress implements ProgressReporter: the test answers requests
// (counted in fakeWatcher.progress) by sending a Bookmark.
func (f *fakeLW) ReportsProgress() bool { return true }

// Watch hands a fakeWatcher to the test and plays what the test sends to
// it until the test fails it or ctx ends; stop is closed when it returns.
func (f *fakeLW) Watch(ctx context.Context, from ResourceVersion, opts driver.WatchOptions[string]) error {
	w := &fakeWatcher{from: from, ch: make(chan step), stop: make(chan struct{})}
	defer close(w.stop)
	select {
	case f.watches <- w:
	case <-ctx.Done():
		return driver.Stopped(ctx)
	}
	for {
		select {
		case s := <-w.ch:
			if s.err != nil {
				return s.err
			}
			if err := opts.Emit(s.evs); err != nil {
				return err
			}
		case <-opts.Progress:
			w.progress.Add(1)
		case <-ctx.Done():
			return driver.Stopped(ctx)
		}
	}
}

// list serves the next List call.
func (f *fakeLW) list(t *testing.T, rv ResourceVersion, items ...driver.Event[string]) {
	t.Helper()
	f.listErr(t, rv, nil, items...)
}

func (f *fakeLW) listErr(t *testing.T, rv ResourceVersion, err error, items ...driver.Event[string]) {
	t.Helper()
	select {
	case f.lists <- listResult{items: items, rv: rv, err: err}:
	case <-time.After(10 * time.Second):
		t.Fatal("no List call")
	}
}

// watch returns the next opened watch.
func (f *fakeLW) watch(t *testing.T) *fakeWatcher {
	t.Helper()
	select {
	case w := <-f.watches:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("no Watch call")
		return nil
	}
}

type step struct {
	evs []driver.Event[string]
	err error
}

type fakeWatcher struct {
	from     ResourceVersion
	ch       chan step
	stop     chan struct{} // closed when the Watch call returned
	progress atomic.Int32  // progress requests received
}

func (w *fakeWatcher) send(t *testing.T, evs ...driver.Event[string]) {
	t.Helper()
	select {
	case w.ch <- step{evs: evs}:
	case <-time.After(10 * time.Second):
		t.Fatal("watch not read")
	}
}

func (w *fakeWatcher) fail(t *testing.T, err error) {
	t.Helper()
	select {
	case w.ch <- step{err: err}:
	case <-time.After(10 * time.Second):
		t.Fatal("watch not read")
	}
}

// recorder is a handler that writes each call as a line to a channel.
type recorder struct{ ch chan string }

func newRecorder() *recorder { return &recorder{ch: make(chan string, 1000)} }

func (r *recorder) OnAdd(key, obj string, initial bool) {
	r.ch <- fmt.Sprintf("add %s=%s initial=%v", key, obj, initial)
}
func (r *recorder) OnUpdate(key, old, obj string) {
	r.ch <- fmt.Sprintf("update %s %s->%s", key, old, obj)
}
func (r *recorder) OnDelete(key, obj string, unknown bool) {
	r.ch <- fmt.Sprintf("delete %s=%s unknown=%v", key, obj, unknown)
}

// expect reads the next n lines and compares them as a set when unordered.
func (r *recorder) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-r.ch:
			if got != w {
				t.Fatalf("handler got %q, want %q", got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("handler got nothing, want %q", w)
		}
	}
}

func (r *recorder) expectSet(t *testing.T, want ...string) {
	t.Helper()
	set := map[string]bool{}
	for _, w := range want {
		set[w] = true
	}
	for range want {
		select {
		case got := <-r.ch:
			if !set[got] {
				t.Fatalf("handler got unexpected %q, want one of %v", got, want)
			}
			delete(set, got)
		case <-time.After(10 * time.Second):
			t.Fatalf("handler missing %v", set)
		}
	}
}

func (r *recorder) expectNone(t *testing.T) {
	t.Helper()
	select {
	case got := <-r.ch:
		t.Fatalf("handler got unexpected %q", got)
	default:
	}
}

// eventually polls cond with a generous deadline; it waits for convergence,
// it does not measure time.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// errCollector is an ErrorHandler that keeps errors.
type errCollector struct {
	mu   sync.Mutex
	errs []error
}

func (c *errCollector) handle(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

func (c *errCollector) find(match func(error) bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		if match(e) {
			return e
		}
	}
	return nil
}

// started runs inf in the background and returns a stop function that
// waits for Run to return.
func started(t *testing.T, inf *SharedIndexInformer[string]) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
