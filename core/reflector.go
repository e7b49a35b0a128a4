package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
)

// ReflectorOptions configures a Reflector. The zero value of every field
// means the default.
type ReflectorOptions[T any] struct {
	// Name names the source in errors and logs, e.g. `etcd prefix "/app/"`.
	Name string
	// ResyncPeriod is how often Queue.Resync runs (when ShouldResync
	// agrees); 0 means never.
	ResyncPeriod time.Duration
	// ShouldResync, when set, is asked before each periodic resync.
	ShouldResync func() bool
	// Backoff paces retries after list and watch failures.
	Backoff Backoff
	// MinWatchTimeout: each watch is ended and reopened from the last
	// version after a random time in [MinWatchTimeout, 2×MinWatchTimeout),
	// as client-go does, so that a watch silently stuck in the network
	// cannot stall the cache forever. 0 means 5 minutes.
	MinWatchTimeout time.Duration
	// Transform rewrites each object before it is queued (drop fields to
	// save memory, precompute). An error drops that one change and is
	// reported like a decode error.
	Transform func(T) (T, error)
	// ErrorHandler receives every failure: list and watch errors, decode
	// errors (*DecodeError naming source, key and version), out-of-order
	// events (*OrderError). nil logs them with Logger.
	ErrorHandler func(error)
	Logger       *slog.Logger
	Metrics      InformerMetrics
	Clock        clock.Clock
}

// OrderError reports a watch that broke its contract by delivering a
// version not after the last one applied. The batch is not applied, and
// the reflector relists: resuming the watch from the last applied version
// would skip the change that came late (it is below that version), and a
// stream that broke its order once cannot be trusted to have lost nothing
// else.
type OrderError struct {
	Source string
	Key    string
	RV     ResourceVersion
	After  ResourceVersion
}

func (e *OrderError) Error() string {
	return fmt.Sprintf("%s: key %q at version %d arrived after version %d: watch out of order, relisting", e.Source, e.Key, e.RV, e.After)
}

// errNoKey reports an adapter event without a key: it cannot be cached.
var errNoKey = errors.New("event has no key")

// ErrProgressNotSupported is returned by RequestProgress when no watch is
// open or the open watch cannot produce bookmarks on request.
var ErrProgressNotSupported = errors.New("dbinformer: the current watch cannot report progress on request")

// Reflector keeps a Queue in step with a ListerWatcher: list, Replace, then
// watch from the list's version; bookmarks advance the version; an expired
// version relists from scratch; any other failure backs off and resumes the
// watch from the last version, never relisting needlessly (lists are what
// databases find expensive).
type Reflector[T any] struct {
	lw   ListerWatcher[T]
	q    Queue[T]
	opts ReflectorOptions[T]
	clk  clock.Clock
	met  InformerMetrics

	lastRV atomic.Uint64

	mu          sync.Mutex
	progress    chan struct{} // the open watch's Progress; nil when none can answer
	lastListErr error
	listed      bool
}

// NewReflector returns a Reflector that feeds q from lw.
func NewReflector[T any](lw ListerWatcher[T], q Queue[T], opts ReflectorOptions[T]) *Reflector[T] {
	r := &Reflector[T]{lw: lw, q: q, opts: opts, clk: clock.Or(opts.Clock), met: opts.Metrics}
	if r.met == nil {
		r.met = NoopMetrics{}
	}
	if r.opts.Name == "" {
		r.opts.Name = "dbinformer"
	}
	if r.opts.Logger == nil {
		r.opts.Logger = slog.Default()
	}
	if r.opts.MinWatchTimeout <= 0 {
		r.opts.MinWatchTimeout = 5 * time.Minute
	}
	return r
}

// LastSyncResourceVersion is the version of the last list or watch batch
// handed to the queue.
func (r *Reflector[T]) LastSyncResourceVersion() ResourceVersion {
	return ResourceVersion(r.lastRV.Load())
}

// LastListError is the error of the last list, nil once a list succeeded.
func (r *Reflector[T]) LastListError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastListErr
}

// RequestProgress asks the open watch for a bookmark (see
// ProgressReporter). It never blocks: a request already waiting to be read
// by the watch answers this one too. It returns ErrProgressNotSupported when
// no watch is open or the ListerWatcher does not report progress.
func (r *Reflector[T]) RequestProgress(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	ch := r.progress
	r.mu.Unlock()
	if ch == nil {
		return ErrProgressNotSupported
	}
	select {
	case ch <- struct{}{}:
	default:
	}
	return nil
}

func (r *Reflector[T]) report(err error) {
	if r.opts.ErrorHandler != nil {
		r.opts.ErrorHandler(err)
		return
	}
	level := slog.LevelError
	if errors.Is(err, ErrExpired) {
		level = slog.LevelInfo
	}
	r.opts.Logger.Log(context.Background(), level, "dbinformer reflector", "source", r.opts.Name, "err", err)
}

// Run lists and watches until ctx is done or the source fails permanently
// (an error matching ErrPermanent), then returns once every goroutine it
// started has ended. It returns nil when ctx ended it and the permanent
// error otherwise. One Reflector runs once at a time; an informer makes a
// new one for each of its runs.
func (r *Reflector[T]) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	if r.opts.ResyncPeriod > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.resyncLoop(ctx)
		}()
	}
	bo := newBackoffState(r.opts.Backoff, r.clk)
	needList, relist := true, false
	for ctx.Err() == nil {
		if needList {
			if err := r.list(ctx, relist); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				r.report(err)
				if errors.Is(err, ErrPermanent) {
					return err
				}
				r.sleep(ctx, bo.next())
				continue
			}
			needList, relist = false, true
		}
		progressed, err := r.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		r.met.WatchRestarted(err)
		switch {
		case err == nil: // planned timeout: reopen at once
		case errors.Is(err, ErrPermanent):
			r.report(err)
			return err
		case errors.Is(err, ErrExpired), errors.As(err, new(*OrderError)):
			r.report(err)
			needList = true
			// A watch that expires before delivering anything may mean the
			// list's version is already gone; do not hammer the source.
			if !progressed {
				r.sleep(ctx, bo.next())
			}
		default:
			r.report(err)
			r.sleep(ctx, bo.next())
		}
	}
	return nil
}

func (r *Reflector[T]) sleep(ctx context.Context, d time.Duration) {
	t := r.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	}
}

func (r *Reflector[T]) resyncLoop(ctx context.Context) {
	t := r.clk.NewTimer(r.opts.ResyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if r.opts.ShouldResync == nil || r.opts.ShouldResync() {
			if err := r.q.Resync(); err != nil {
				r.report(fmt.Errorf("%s: resync: %w", r.opts.Name, err))
			}
		}
		t.Reset(r.opts.ResyncPeriod)
	}
}

func (r *Reflector[T]) decodeFailed(ev *Event[T], err error) {
	var de *DecodeError
	if !errors.As(err, &de) {
		err = &DecodeError{Source: r.opts.Name, Key: ev.Key, RV: ev.RV, Err: err}
	}
	r.met.DecodeFailed()
	r.report(err)
}

func (r *Reflector[T]) list(ctx context.Context, relist bool) error {
	var items []Event[T]
	var received, estimated int64
	opts := ListSink[T]{
		Emit: func(ev Event[T]) error {
			if ev.Err != nil {
				r.decodeFailed(&ev, ev.Err)
				return nil
			}
			if ev.Type == Bookmark {
				return nil
			}
			if ev.Key == "" {
				r.decodeFailed(&ev, errNoKey)
				return nil
			}
			if r.opts.Transform != nil {
				obj, err := r.opts.Transform(ev.Object)
				if err != nil {
					r.decodeFailed(&ev, fmt.Errorf("transform: %w", err))
					return nil
				}
				ev.Object = obj
			}
			ev.Type, ev.HasObject = Added, true
			items = append(items, ev)
			received++
			if received&1023 == 0 {
				r.met.ListProgress(received, estimated)
			}
			return nil
		},
		Estimate: func(n int64) {
			estimated = n
			r.met.ListProgress(received, estimated)
		},
	}
	rv, err := r.lw.List(ctx, opts)
	r.met.Listed(relist, len(items), err)
	if err != nil {
		err = fmt.Errorf("%s: list: %w", r.opts.Name, err)
		r.mu.Lock()
		r.lastListErr = err
		r.mu.Unlock()
		return err
	}
	r.met.ListProgress(received, estimated)
	if err := r.q.Replace(items, rv); err != nil {
		return fmt.Errorf("%s: list at version %d: %w", r.opts.Name, rv, err)
	}
	r.lastRV.Store(uint64(rv))
	r.mu.Lock()
	r.lastListErr, r.listed = nil, true
	r.mu.Unlock()
	return nil
}

// errWatchTimeout is the cause with which the reflector ends a watch at
// its planned timeout.
var errWatchTimeout = errors.New("dbinformer: planned watch timeout")

// watch runs one watch until it ends. It returns nil when the planned
// timeout ended it, and whether any batch was applied.
func (r *Reflector[T]) watch(ctx context.Context) (progressed bool, err error) {
	from := r.LastSyncResourceVersion()
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// The planned timeout only cancels the watch's context: the watch ends
	// itself and returns Stopped(wctx).
	minTimeout := r.opts.MinWatchTimeout
	timer := r.clk.NewTimer(minTimeout + time.Duration(rand.Int64N(int64(minTimeout))))
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-timer.C():
			cancel(errWatchTimeout)
		case <-done:
			timer.Stop()
		}
	}()
	defer wg.Wait()
	defer close(done)

	var progress chan struct{}
	if pr, ok := r.lw.(ProgressReporter); ok && pr.ReportsProgress() {
		progress = make(chan struct{}, 1)
		r.mu.Lock()
		r.progress = progress
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.progress = nil
			r.mu.Unlock()
		}()
	}

	var applied atomic.Bool
	err = r.lw.Watch(wctx, from, WatchOptions[T]{
		Emit: func(batch []Event[T]) error {
			if err := r.apply(batch); err != nil {
				return err
			}
			applied.Store(true)
			return nil
		},
		Progress: progress,
	})
	progressed = applied.Load()
	if ctx.Err() != nil {
		return progressed, ctx.Err()
	}
	if errors.Is(err, ErrWatchStopped) && errors.Is(context.Cause(wctx), errWatchTimeout) {
		return progressed, nil
	}
	if err == nil {
		err = errors.New("watch returned nil (the contract says it never does)")
	}
	return progressed, fmt.Errorf("%s: watch from version %d: %w", r.opts.Name, r.LastSyncResourceVersion(), err)
}

// apply checks and queues one watch batch. Nothing of a batch that breaks
// the version order is queued: a transaction is applied whole or not at
// all, and the watch restarts from the last version fully applied.
func (r *Reflector[T]) apply(batch []Event[T]) error {
	last := r.LastSyncResourceVersion()
	prev := last
	for i := range batch {
		ev := &batch[i]
		if ev.Type == Bookmark {
			// A stale bookmark says nothing new; the queue keeps the
			// highest version it saw.
			continue
		}
		if ev.RV <= last || ev.RV < prev {
			return &OrderError{Source: r.opts.Name, Key: ev.Key, RV: ev.RV, After: prev}
		}
		prev = ev.RV
	}
	top := last
	for i := range batch {
		ev := &batch[i]
		if ev.RV > top {
			top = ev.RV
		}
		if ev.Type == Bookmark {
			continue
		}
		if ev.Err == nil && ev.Key == "" {
			ev.Err = errNoKey
		}
		if ev.Err != nil {
			r.decodeFailed(ev, ev.Err)
			// Keep the version, drop the change: the key keeps its last
			// good state and the watch moves on.
			*ev = Event[T]{Type: Bookmark, RV: ev.RV}
			continue
		}
		if r.opts.Transform != nil && ev.HasObject {
			obj, err := r.opts.Transform(ev.Object)
			if err != nil {
				r.decodeFailed(ev, fmt.Errorf("transform: %w", err))
				*ev = Event[T]{Type: Bookmark, RV: ev.RV}
				continue
			}
			ev.Object = obj
		}
	}
	if err := r.q.Add(batch); err != nil {
		r.report(fmt.Errorf("%s: %w", r.opts.Name, err))
	}
	r.lastRV.Store(uint64(top))
	return nil
}
