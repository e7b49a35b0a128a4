package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/memory"
)

// restartCounter counts watch restarts.
type restartCounter struct {
	core.NoopMetrics
	n *atomic.Int32
}

func (m restartCounter) InformerMetrics(string) core.InformerMetrics { return m }
func (m restartCounter) WatchRestarted(error)                        { m.n.Add(1) }

// waitUntil polls cond with a generous deadline; it waits, it does not
// measure time.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// emitCounter wraps a memory source and counts the batches its watches
// emit.
type emitCounter struct {
	*memory.Source[string]
	watches, emits atomic.Int32
}

func (c *emitCounter) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[string]) error {
	c.watches.Add(1)
	emit := opts.Emit
	opts.Emit = func(b []driver.Event[string]) error {
		err := emit(b)
		c.emits.Add(1)
		return err
	}
	return c.Source.Watch(ctx, from, opts)
}

// An idle source that answers bookmark requests (core/memory) is never
// restarted, however long it stays idle; the interval comes from
// InformerOptions here.
func TestIdleSourceThatAnswersIsNeverRestarted(t *testing.T) {
	src := &emitCounter{Source: memory.New[string](memory.Options{})}
	src.Put("a", "a1")
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var restarts, errs atomic.Int32
	met := restartCounter{n: &restarts}
	inf := core.NewSharedIndexInformer[string](src, core.InformerOptions[string]{
		Clock:            fc,
		ErrorHandler:     func(error) { errs.Add(1) },
		Metrics:          met,
		MinWatchTimeout:  -1,
		ProgressInterval: 10 * time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := inf.WaitForCacheSync(wctx); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		waitUntil(t, "watchdog armed", func() bool { return fc.Waiters() == 1 })
		fc.Step(10 * time.Second)
		// The request is answered with a bookmark: one more emit.
		waitUntil(t, "bookmark", func() bool { return src.emits.Load() == int32(i+1) })
	}
	if n := restarts.Load(); n != 0 {
		t.Fatalf("an idle healthy watch was restarted %d times", n)
	}
	if n := src.watches.Load(); n != 1 {
		t.Fatalf("%d watches opened, want 1", n)
	}
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d errors reported", n)
	}
	// It still delivers.
	if err := inf.WaitFor(wctx, src.Put("b", "b1")); err != nil {
		t.Fatal(err)
	}
}
