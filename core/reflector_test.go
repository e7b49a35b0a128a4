package core

import (
	"context"
	"errors"
	"testing"

	"github.com/dbinformer/dbinformer/core/driver"
)

// quietLW is a ListerWatcher that does not report progress: it wraps a
// fakeLW and hides its ReportsProgress.
type quietLW struct{ f *fakeLW }

func (q quietLW) List(ctx context.Context, sink driver.ListSink[string]) (ResourceVersion, error) {
	return q.f.List(ctx, sink)
}

func (q quietLW) Watch(ctx context.Context, from ResourceVersion, opts driver.WatchOptions[string]) error {
	return q.f.Watch(ctx, from, opts)
}

func TestRequestProgressNeedsAReporterAndAnOpenWatch(t *testing.T) {
	lw := newFakeLW()
	r := NewReflector[string](quietLW{lw}, NewFIFO[string](NewIndexer[string](nil)), InformerOptions[string]{})
	if err := r.RequestProgress(context.Background()); !errors.Is(err, ErrProgressNotSupported) {
		t.Fatalf("RequestProgress before any watch: %v, want ErrProgressNotSupported", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	lw.list(t, 5)
	lw.watch(t)
	if err := r.RequestProgress(context.Background()); !errors.Is(err, ErrProgressNotSupported) {
		t.Fatalf("RequestProgress of a watch that cannot report progress: %v, want ErrProgressNotSupported", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
}

func TestRequestProgressNeverBlocks(t *testing.T) {
	lw := newFakeLW()
	r := NewReflector[string](lw, NewFIFO[string](NewIndexer[string](nil)), InformerOptions[string]{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	lw.list(t, 5)
	w := lw.watch(t)
	eventually(t, "progress channel", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.progress != nil
	})
	// Nobody reads the watch's requests while the test does not send: many
	// requests coalesce into the one buffered.
	for range 10 {
		must(t, r.RequestProgress(context.Background()))
	}
	eventually(t, "progress request", func() bool { return w.progress.Load() > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if err := r.RequestProgress(context.Background()); !errors.Is(err, ErrProgressNotSupported) {
		t.Fatalf("RequestProgress after the watch ended: %v, want ErrProgressNotSupported", err)
	}
}

func TestPermanentWatchErrorStopsTheInformer(t *testing.T) {
	lw := newFakeLW()
	inf, _, ec := newTestInformer(lw, InformerOptions[string]{})
	gone := errors.New(`table "users" was dropped`)
	done := make(chan error, 1)
	go func() { done <- inf.Run(context.Background()) }()
	lw.list(t, 5)
	must(t, inf.WaitForCacheSync(testCtx(t)))
	w := lw.watch(t)
	w.fail(t, driver.Permanent(gone))
	err := <-done
	if !errors.Is(err, driver.ErrPermanent) || !errors.Is(err, gone) {
		t.Fatalf("Run = %v, want the permanent error", err)
	}
	if ec.find(func(e error) bool { return errors.Is(e, gone) }) == nil {
		t.Fatal("permanent error not reported")
	}
}

func TestPermanentListErrorIsTheSyncFailure(t *testing.T) {
	lw := newFakeLW()
	inf, _, _ := newTestInformer(lw, InformerOptions[string]{})
	gone := errors.New("bucket deleted")
	done := make(chan error, 1)
	go func() { done <- inf.Run(context.Background()) }()
	lw.listErr(t, 0, driver.Permanent(gone))
	// No context deadline: the failure itself ends the wait.
	if err := inf.WaitForCacheSync(context.Background()); !errors.Is(err, driver.ErrPermanent) || !errors.Is(err, gone) {
		t.Fatalf("WaitForCacheSync = %v, want the permanent error", err)
	}
	if err := <-done; !errors.Is(err, gone) {
		t.Fatalf("Run = %v, want the permanent error", err)
	}
	if lw.listCalls.Load() != 1 {
		t.Fatalf("a permanent error was retried (%d lists)", lw.listCalls.Load())
	}
}
