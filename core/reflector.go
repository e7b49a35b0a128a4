package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
)

// Reflector keeps a Queue in step with a driver.ListerWatcher: list (streamed
// into the queue), then watch from the list's version; bookmarks advance the
// version; an expired version relists from scratch; a permanent failure
// stops it; any other failure backs off and resumes the watch from the last
// version, never relisting needlessly (lists are what databases find
// expensive). Every event becomes a Delta here, once.
type Reflector[T any] struct {
	lw  driver.ListerWatcher[T]
	q   Queue[T]
	cfg reflectorConfig[T]

	lastRV     atomic.Uint64
	lastListRV atomic.Uint64 // the version of the last successful list (the audit's, auditrun.go)
	// skips: the source may skip superseded changes (SupersededSkipper),
	// so a batch's changes prove nothing of the versions before them.
	skips   bool
	catchUp atomic.Bool // a warm start asks its first watch for a bookmark

	mu          sync.Mutex
	progress    chan struct{}           // the open watch's Progress; nil when none can answer
	listStarted time.Time               // of the list in progress; zero when none
	listFail    failures                // since the last successful list
	watchFail   failures                // since a watch last emitted anything
	deltas      []Delta[T]              // apply's scratch
	cancelWatch context.CancelCauseFunc // the open watch's; nil between watches
	relistReq   atomic.Bool             // an audit asked for a relist (requestRelist)
}

// reflectorConfig is what a reflector runs with, defaults filled in.
type reflectorConfig[T any] struct {
	name            string
	resyncPeriod    time.Duration
	shouldResync    func() bool
	backoff         Backoff
	minWatchTimeout time.Duration // < 0: no planned timeout
	// progressInterval overrides the driver.ListerWatcher's ProgressInterval
	// when non-zero; < 0: no stuck-watch detection.
	progressInterval time.Duration
	transform        func(T) (T, error)
	undecodable      UndecodablePolicy
	rep              reporter
	met              InformerMetrics
	clk              clock.Clock
	// reserve, when set, is given a list's estimate of its size (the
	// informer sizes its empty cache with it).
	reserve func(objects int64)
	// warm and listed: a warm start's hooks (checkpointrun.go).
	warm   func(ctx context.Context) (rv ResourceVersion, watch, ok bool)
	listed func(rv ResourceVersion)
}

// NewReflector returns a Reflector that feeds q from lw. Of opts it uses
// Name, ResyncPeriod, Transform, Undecodable, Backoff, MinWatchTimeout,
// ProgressInterval, ErrorHandler, Logger, Metrics and Clock, as an informer
// would.
func NewReflector[T any](lw driver.ListerWatcher[T], q Queue[T], opts InformerOptions[T]) *Reflector[T] {
	name := opts.Name
	if name == "" {
		name = "dbinformer"
	}
	var met InformerMetrics = NoopMetrics{}
	if opts.Metrics != nil {
		met = opts.Metrics.InformerMetrics(name)
	}
	return newReflector(lw, q, reflectorConfig[T]{
		name:             name,
		resyncPeriod:     opts.ResyncPeriod,
		backoff:          opts.Backoff,
		minWatchTimeout:  opts.MinWatchTimeout,
		progressInterval: opts.ProgressInterval,
		transform:        opts.Transform,
		undecodable:      opts.Undecodable,
		rep:              newReporter(name, opts.ErrorHandler, opts.Logger, opts.Clock),
		met:              met,
		clk:              clock.Or(opts.Clock),
	})
}

func newReflector[T any](lw driver.ListerWatcher[T], q Queue[T], cfg reflectorConfig[T]) *Reflector[T] {
	if cfg.minWatchTimeout == 0 {
		cfg.minWatchTimeout = 5 * time.Minute
	}
	r := &Reflector[T]{lw: lw, q: q, cfg: cfg}
	if sk, ok := driver.Capability[driver.SupersededSkipper](lw); ok && sk.SkipsSuperseded() {
		r.skips = true
		if b, ok := q.(bookmarksOnlySetter); ok {
			b.setBookmarksOnly()
		}
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
	return r.listFail.err
}

// status fills in the reflector's part of a SyncStatus.
func (r *Reflector[T]) status(s *SyncStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.ListStarted = r.listStarted
	s.ListFailures = r.listFail.export()
	s.WatchFailures = r.watchFail.export()
	s.LastSyncResourceVersion = r.LastSyncResourceVersion()
}

// RequestProgress asks the open watch for a bookmark (see
// driver.ProgressReporter). It never blocks: a request already waiting to be read
// by the watch answers this one too. It returns ErrProgressNotSupported when
// no watch is open or the driver.ListerWatcher does not report progress.
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
	notify(ch)
	return nil
}

// Run lists and watches until ctx is done or the source fails permanently
// (an error matching driver.ErrPermanent), then returns once every goroutine it
// started has ended. It returns nil when ctx ended it and the permanent
// error otherwise. One Reflector runs once at a time; an informer makes a
// new one for each of its runs.
func (r *Reflector[T]) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	if r.cfg.resyncPeriod > 0 {
		wg.Go(func() { r.resyncLoop(ctx) })
	}
	bo := newBackoffState(r.cfg.backoff, r.cfg.clk)
	needList, relist := true, false
	// resumed: the next watch continues from a version an earlier watch
	// reached, not from a list's version.
	resumed := false
	if watch, ok := r.startWarm(ctx); ok { // resumed: an expired checkpoint relists at once
		needList, relist, resumed = !watch, true, true
	}
	for ctx.Err() == nil {
		if needList {
			if err := r.list(ctx, relist); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				r.cfg.rep.report(ctx, err)
				if errors.Is(err, driver.ErrPermanent) {
					return err
				}
				r.sleep(ctx, bo.next())
				continue
			}
			needList, relist, resumed = false, true, false
		}
		from, start := r.LastSyncResourceVersion(), r.cfg.clk.Now()
		err := r.watch(ctx)
		wasResumed := resumed
		resumed = true
		if ctx.Err() != nil {
			return nil
		}
		// Progress is a version that moved (a change or a bookmark) or a
		// watch that stayed up for a healthy while; only an attempt without
		// it climbs the backoff ladder.
		progressed := r.LastSyncResourceVersion() > from || r.cfg.clk.Since(start) >= bo.cfg.Reset
		if progressed {
			bo.progress()
		}
		r.cfg.met.WatchRestarted(err)
		switch {
		case err == nil: // planned timeout: reopen at once
		case errors.Is(err, driver.ErrPermanent):
			r.cfg.rep.report(ctx, err)
			return err
		case errors.Is(err, driver.ErrExpired), errors.As(err, new(*OrderError)):
			r.cfg.rep.report(ctx, err)
			needList = true
			// A watch from a list's version that expires before delivering
			// anything may mean that version is already gone: do not hammer
			// the source. A resumed watch that expires (a source back from
			// an outage whose history restarted: a kube-apiserver's watch
			// cache, a recreated slot) relists at once, whatever the ladder
			// climbed during the outage; the first watch after that list is
			// again protected.
			if !progressed && !wasResumed {
				r.sleep(ctx, bo.next())
			}
		default:
			r.cfg.rep.report(ctx, err)
			r.sleep(ctx, bo.next())
		}
	}
	return nil
}

// sleep waits d, or less when the driver.ListerWatcher says its source healed
// (driver.HealWaiter).
func (r *Reflector[T]) sleep(ctx context.Context, d time.Duration) {
	var healed chan struct{}
	if h, ok := driver.Capability[driver.HealWaiter](r.lw); ok {
		hctx, cancel := context.WithCancel(ctx)
		healed = make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			if h.WaitHealed(hctx) == nil {
				close(healed)
			}
		}()
		defer func() { cancel(); <-done }()
	}
	t := r.cfg.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C():
	case <-healed:
	}
}

func (r *Reflector[T]) resyncLoop(ctx context.Context) {
	t := r.cfg.clk.NewTimer(r.cfg.resyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if r.cfg.shouldResync == nil || r.cfg.shouldResync() {
			if err := r.q.Resync(); err != nil {
				r.cfg.rep.report(ctx, fmt.Errorf("%s: resync: %w", r.cfg.name, err))
			}
		}
		t.Reset(r.cfg.resyncPeriod)
	}
}

// admit is the one path from an Event to a Delta, for lists and watches
// alike. An event with Err, without a key or of an unknown type, or that
// Transform rejects (a panic in it is an error too), is reported as a
// *driver.DecodeError and handled by the UndecodablePolicy: it becomes a delete
// of its key marked Undecodable (ok), or nothing (no key), or stop, the
// permanent error that ends the reflector. Bookmarks never reach it.
func (r *Reflector[T]) admit(ctx context.Context, ev *driver.Event[T]) (d Delta[T], ok bool, stop error) {
	if ev.Err != nil {
		return r.undecodable(ctx, ev, ev.Err)
	}
	if ev.Key == "" {
		return r.undecodable(ctx, ev, errNoKey)
	}
	d = Delta[T]{Key: ev.Key, Object: ev.Object, HasObject: ev.HasObject, RV: ev.RV}
	switch ev.Type {
	case driver.Added:
		d.Type, d.HasObject = DeltaAdded, true
	case driver.Modified:
		d.Type, d.HasObject = DeltaUpdated, true
	case driver.Deleted:
		d.Type = DeltaDeleted
	default:
		return r.undecodable(ctx, ev, fmt.Errorf("unexpected event type %v", ev.Type))
	}
	switch {
	case ev.Fill != nil && ev.Type == driver.Deleted:
		// A wrapper turned the change into a delete (shard.Source): its
		// object is not whole, and the cache's is the last state.
		d.HasObject = false
		return d, true, nil
	case ev.Fill != nil && ev.Type != driver.Modified:
		return r.undecodable(ctx, ev, fmt.Errorf("a %v event with a Fill (only a Modified event can be completed from the cache)", ev.Type))
	}
	if ev.Fill != nil {
		// The object is whole only once filled from the cache: Transform
		// runs after Fill, when the informer applies the delta.
		fill := ev.Fill
		d.Fill = fill
		if r.cfg.transform != nil {
			d.Fill = func(cached T) (T, error) {
				obj, err := fill(cached)
				if err != nil {
					return obj, err
				}
				if obj, err = r.transform(obj); err != nil {
					return obj, fmt.Errorf("transform: %w", err)
				}
				return obj, nil
			}
		}
		return d, true, nil
	}
	if r.cfg.transform != nil && d.HasObject {
		obj, err := r.transform(d.Object)
		if err != nil {
			return r.undecodable(ctx, ev, fmt.Errorf("transform: %w", err))
		}
		d.Object = obj
	}
	return d, true, nil
}

func (r *Reflector[T]) transform(obj T) (out T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return r.cfg.transform(obj)
}

// list streams one list into the queue: each object goes through admit
// and on to the queue as it arrives; nothing here holds the list.
func (r *Reflector[T]) list(ctx context.Context, relist bool) error {
	r.mu.Lock()
	r.listStarted = r.cfg.clk.Now()
	r.mu.Unlock()
	var received, estimated int64
	var rv ResourceVersion
	err := r.q.Replace(ctx, func(put func(Delta[T]) error) (ResourceVersion, error) {
		var err error
		rv, err = r.lw.List(ctx, driver.ListSink[T]{
			Emit: func(ev driver.Event[T]) error {
				if ev.Type == driver.Bookmark {
					return nil
				}
				ev.Type = driver.Added
				d, ok, stop := r.admit(ctx, &ev)
				if stop != nil {
					return stop
				}
				// An object that did not decode is left out of the
				// list, so that a relist deletes its key.
				if !ok || d.Undecodable {
					return nil
				}
				d.Type, d.RV = DeltaReplaced, 0
				if err := put(d); err != nil {
					return err
				}
				received++
				if received&1023 == 0 {
					r.cfg.met.ListProgress(received, estimated)
				}
				return nil
			},
			Estimate: func(n int64) {
				estimated = n
				if r.cfg.reserve != nil {
					r.cfg.reserve(n)
				}
				r.cfg.met.ListProgress(received, estimated)
			},
		})
		return rv, err
	})
	r.cfg.met.Listed(relist, int(received), err)
	if err != nil {
		cause := err
		err = fmt.Errorf("%s: list: %w", r.cfg.name, err)
		r.mu.Lock()
		r.listStarted = time.Time{}
		if ctx.Err() == nil {
			r.listFail.add(err, "list", cause, r.cfg.clk.Now())
		}
		r.mu.Unlock()
		return err
	}
	r.cfg.met.ListProgress(received, estimated)
	r.lastRV.Store(uint64(rv))
	r.lastListRV.Store(uint64(rv))
	if r.cfg.listed != nil {
		r.cfg.listed(rv)
	}
	r.mu.Lock()
	r.listStarted = time.Time{}
	r.listFail = failures{}
	r.mu.Unlock()
	return nil
}

// watch runs one watch until it ends. It returns nil when the planned
// timeout ended it.
func (r *Reflector[T]) watch(ctx context.Context) error {
	from := r.LastSyncResourceVersion()
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer r.openWatch(cancel)() // for an audit's HealRelist
	// The helpers below (planned timeout, stuck-watch detection) end with
	// the watch: done stops them, wg waits for them.
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)

	// The planned timeout only cancels the watch's context: the watch ends
	// itself and returns Stopped(wctx).
	if base := r.cfg.minWatchTimeout; base > 0 {
		timer := r.cfg.clk.NewTimer(base + time.Duration(rand.Int64N(int64(base))))
		wg.Go(func() {
			select {
			case <-timer.C():
				cancel(errWatchTimeout)
			case <-done:
				timer.Stop()
			}
		})
	}

	var progress chan struct{}
	if pr, ok := driver.Capability[driver.ProgressReporter](r.lw); ok && pr.ReportsProgress() {
		progress = make(chan struct{}, 1)
		// A source that may skip superseded changes moves the applied
		// version by bookmarks only: each watch asks for one at once, so
		// that a list's version counts soon after it (SupersededSkipper).
		if r.catchUp.Swap(false) || r.skips {
			notify(progress)
		}
		r.mu.Lock()
		r.progress = progress
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.progress = nil
			r.mu.Unlock()
		}()
	}

	act := &watchActivity{}
	act.last.Store(r.cfg.clk.Now().UnixNano())
	if interval := r.ProgressInterval(); interval > 0 {
		wg.Go(func() { r.watchdog(done, cancel, interval, progress, act) })
	}

	err := r.lw.Watch(wctx, from, driver.WatchOptions[T]{
		Emit: func(batch []driver.Event[T]) error {
			act.busy.Add(1)
			defer func() {
				act.last.Store(r.cfg.clk.Now().UnixNano())
				act.busy.Add(-1)
			}()
			return r.apply(ctx, batch)
		},
		Progress: progress,
		Fills:    true, // handleDeltas resolves Event.Fill
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	cause := context.Cause(wctx)
	switch {
	case errors.Is(err, driver.ErrWatchStopped) && errors.Is(cause, errWatchTimeout):
		return nil
	case errors.Is(cause, errAuditRelist):
		err = cause
	case errors.Is(cause, driver.ErrWatchStuck):
		// Whatever the watch answered to its cancellation, the reason it
		// ended is that it was stuck.
		err = cause
	case err == nil:
		err = errors.New("watch returned nil (the contract says it never does)")
	}
	what := fmt.Sprintf("watch from version %d", r.LastSyncResourceVersion())
	wrapped := fmt.Errorf("%s: %s: %w", r.cfg.name, what, err)
	r.mu.Lock()
	r.watchFail.add(wrapped, what, err, r.cfg.clk.Now())
	r.mu.Unlock()
	return wrapped
}
