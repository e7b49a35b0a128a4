package informertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// Run starts an informer over lw for the length of the test (Start) and
// waits for its cache to sync, failing the test (Fatalf) with
// WaitForCacheSync's reason when it does not within Timeout.
func Run[T any](t TB, lw driver.ListerWatcher[T], opts core.InformerOptions[T], handlers ...core.ResourceEventHandler[T]) (*core.SharedIndexInformer[T], *Errors) {
	t.Helper()
	inf, errs := Start(t, lw, opts, handlers...)
	sctx, scancel := waitContext(t)
	defer scancel()
	if err := inf.WaitForCacheSync(sctx); err != nil {
		t.Fatalf("informertest: %v (reported errors: %v)", err, errs.All())
	}
	return inf, errs
}

// Start starts an informer over lw for the length of the test without
// waiting for it to sync (for a test of a sync that cannot finish yet): it
// registers handlers before the informer starts (so they see the initial
// list as initial adds) and runs it in its own goroutine. The informer is
// stopped, and its Run waited for, by t's cleanup; an error Run returns
// then (a permanent failure) is among the reported errors.
//
// Every error the informer reports is collected in the returned Errors
// (and still passed to opts.ErrorHandler when set); Start never fails the
// test for them, since faults are what many tests inject. opts.Name
// defaults to the test's name.
func Start[T any](t TB, lw driver.ListerWatcher[T], opts core.InformerOptions[T], handlers ...core.ResourceEventHandler[T]) (*core.SharedIndexInformer[T], *Errors) {
	t.Helper()
	errs := &Errors{}
	if opts.Name == "" {
		opts.Name = t.Name()
	}
	user := opts.ErrorHandler
	opts.ErrorHandler = func(err error) {
		errs.add(err)
		if user != nil {
			user(err)
		}
	}
	inf := core.NewSharedIndexInformer(lw, opts)
	for _, h := range handlers {
		if _, err := inf.AddEventHandler(h); err != nil {
			t.Fatalf("informertest: AddEventHandler: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := inf.Run(ctx); err != nil && ctx.Err() == nil {
			errs.add(fmt.Errorf("informertest: Run returned: %w", err))
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return inf, errs
}

// SaysWhy waits until inf's sync status names cause (ignoring case, as
// clients spell one error differently), then checks that the error
// handler got an error naming it and that WaitForCacheSyncTimeout's error
// names it too: a wait that says why. When secret is not empty, none of
// them may contain it (a password, a token).
func SaysWhy[T any](t TB, inf *core.SharedIndexInformer[T], errs *Errors, cause, secret string) {
	t.Helper()
	names := func(s string) bool { return strings.Contains(strings.ToLower(s), strings.ToLower(cause)) }
	ctx, cancel := waitContext(t)
	defer cancel()
	if !poll(ctx, func() bool { return names(inf.SyncStatus().String()) }) {
		t.Fatalf("informertest: gave up after %s waiting for the sync status to name %q; it says: %s (reported errors: %v)", budget(ctx), cause, inf.SyncStatus(), errs.All())
	}
	if errs.Find(func(err error) bool { return names(err.Error()) }) == nil {
		t.Errorf("the error handler got %v, none naming %q (sync status: %s)", errs.All(), cause, inf.SyncStatus())
	}
	err := core.WaitForCacheSyncTimeout(context.Background(), 100*time.Millisecond, inf)
	if err == nil || !names(err.Error()) {
		t.Errorf("WaitForCacheSyncTimeout = %v, want an error naming %q", err, cause)
	}
	if secret == "" {
		return
	}
	for _, e := range append(errs.All(), err, errors.New(inf.SyncStatus().String())) {
		if e != nil && strings.Contains(e.Error(), secret) {
			t.Errorf("a secret appears in %q", e)
		}
	}
}

// WaitFor waits until inf has applied every change up to rv
// (SharedIndexInformer.WaitFor) and fails the test after Timeout.
func WaitFor[T any](t TB, inf *core.SharedIndexInformer[T], rv core.ResourceVersion) {
	t.Helper()
	ctx, cancel := waitContext(t)
	defer cancel()
	if err := inf.WaitFor(ctx, rv); err != nil {
		t.Fatalf("informertest: WaitFor(%d): %v (applied %d)", rv, err, inf.AppliedVersion())
	}
}

// Errors collects the errors an informer reports. It is safe for
// concurrent use.
type Errors struct {
	mu      sync.Mutex
	list    []error
	changed notifier
}

func (e *Errors) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, err)
	e.changed.notify()
}

// Add records err, for a test that runs its own informer with
// ErrorHandler: errs.Add.
func (e *Errors) Add(err error) { e.add(err) }

// All returns every error reported so far.
func (e *Errors) All() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

// Len returns how many errors were reported.
func (e *Errors) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.list)
}

// Find returns the first reported error for which match returns true, or
// nil.
func (e *Errors) Find(match func(error) bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, err := range e.list {
		if match(err) {
			return err
		}
	}
	return nil
}

// Is returns the first reported error matching target (errors.Is), or nil.
func (e *Errors) Is(target error) error {
	return e.Find(func(err error) bool { return errors.Is(err, target) })
}

// Wait waits until an error for which match returns true is reported and
// returns it; it fails the test (Fatalf) after Timeout, naming what and
// listing what was reported.
func (e *Errors) Wait(t TB, what string, match func(error) bool) error {
	t.Helper()
	ctx, cancel := waitContext(t)
	defer cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := 0; ; {
		for ; i < len(e.list); i++ {
			if match(e.list[i]) {
				return e.list[i]
			}
		}
		if ctx.Err() != nil {
			var b strings.Builder
			for _, err := range e.list {
				b.WriteString("\n\t" + err.Error())
			}
			t.Fatalf("informertest: gave up after %s waiting for %s to be reported; reported:%s", budget(ctx), what, b.String())
		}
		ch := e.changed.wait()
		e.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		e.mu.Lock()
	}
}

// As is Errors.Wait for the first reported error that errors.As can
// assign to E, such as *driver.DecodeError or *core.OrderError.
func As[E error](t TB, errs *Errors) E {
	t.Helper()
	var target E
	errs.Wait(t, fmt.Sprintf("an error of type %T", target), func(err error) bool { return errors.As(err, &target) })
	return target
}
