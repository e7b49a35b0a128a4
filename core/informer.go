package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
)

// ResourceEventHandler receives the changes of an informer's cache, one
// key's changes in order. Calls for one handler never overlap; a slow
// handler delays only itself (see HandlerOptions.MaxPending).
type ResourceEventHandler[T any] interface {
	// OnAdd: key entered the cache. isInInitialList is true for objects
	// of the informer's first list, and for the replay of the cache that a
	// handler added later receives.
	OnAdd(key string, obj T, isInInitialList bool)
	// OnUpdate: key changed, or (oldObj equal to newObj) a periodic resync
	// or a relist replayed it.
	OnUpdate(key string, oldObj, newObj T)
	// OnDelete: key left the cache. obj is the last state: the source's
	// when it sent one, the cache's otherwise. finalStateUnknown is
	// client-go's DeletedFinalStateUnknown: the delete was inferred by a
	// relist because it happened while the watch was down, so obj may be
	// older than what the source deleted.
	OnDelete(key string, obj T, finalStateUnknown bool)
}

// ResourceEventHandlerFuncs adapts functions to ResourceEventHandler; nil
// functions ignore their calls.
type ResourceEventHandlerFuncs[T any] struct {
	AddFunc    func(key string, obj T, isInInitialList bool)
	UpdateFunc func(key string, oldObj, newObj T)
	DeleteFunc func(key string, obj T, finalStateUnknown bool)
}

var _ ResourceEventHandler[int] = ResourceEventHandlerFuncs[int]{}

func (f ResourceEventHandlerFuncs[T]) OnAdd(key string, obj T, initial bool) {
	if f.AddFunc != nil {
		f.AddFunc(key, obj, initial)
	}
}

func (f ResourceEventHandlerFuncs[T]) OnUpdate(key string, oldObj, newObj T) {
	if f.UpdateFunc != nil {
		f.UpdateFunc(key, oldObj, newObj)
	}
}

func (f ResourceEventHandlerFuncs[T]) OnDelete(key string, obj T, unknown bool) {
	if f.DeleteFunc != nil {
		f.DeleteFunc(key, obj, unknown)
	}
}

// InformerOptions configures a SharedIndexInformer. The zero value of
// every field means the default.
type InformerOptions[T any] struct {
	// Name names the informer (the source) in errors, logs and metrics.
	Name string
	// ResyncPeriod is the resync period of handlers added without one,
	// and the informer's initial resync check period. 0: no resync.
	ResyncPeriod time.Duration
	// Indexers are the cache's index functions.
	Indexers Indexers[T]
	// Transform rewrites each object before it is cached.
	Transform func(T) (T, error)
	// DeltaFIFO selects client-go's per-key DeltaFIFO instead of the
	// default in-order FIFO. Per-key grouping hands a key's several
	// pending changes over together, at the price of reordering changes
	// across keys.
	DeltaFIFO bool
	// Equal, when set, lets a relist tell a replayed object from a changed
	// one: a relisted object equal to the cached one is delivered only to
	// handlers that are due for a resync, as client-go does by comparing
	// resourceVersions. Without it every relisted key is an update.
	Equal func(a, b T) bool
	// Backoff and MinWatchTimeout are passed to the Reflector.
	Backoff         Backoff
	MinWatchTimeout time.Duration
	// ProgressRequestInterval rate-limits the bookmark requests WaitFor
	// makes; 0 means 250ms.
	ProgressRequestInterval time.Duration
	// ErrorHandler receives list/watch failures, decode errors, index
	// errors and handler panics; nil logs them.
	ErrorHandler func(error)
	Logger       *slog.Logger
	Metrics      MetricsProvider
	Clock        clock.Clock
}

// HandlerOptions configures one handler registration.
type HandlerOptions struct {
	// Name names the handler in errors and metrics.
	Name string
	// ResyncPeriod requests periodic OnUpdate(obj, obj) replays; nil uses
	// the informer's ResyncPeriod, a pointer to 0 disables. client-go's
	// rules apply: at least 1s; once the informer started, at least its
	// resync check period; before, a smaller period lowers that period.
	ResyncPeriod *time.Duration
	// MaxPending bounds the notifications waiting for this handler. When
	// full, the informer blocks (it never drops): the cache stops being
	// updated until the handler catches up. 0 means unbounded.
	MaxPending int
}

// MinimumResyncPeriod is the smallest handler resync period, as in
// client-go.
const MinimumResyncPeriod = time.Second

// ErrAlreadyRunning is returned by Run on an informer that is running.
var ErrAlreadyRunning = errors.New("dbinformer: informer is already running")

// SharedIndexInformer keeps an indexed cache of a source and tells
// handlers about its changes: a Reflector feeds a Queue, one goroutine pops
// it, applies each popped run to the Indexer under one lock and hands the
// resulting notifications to every handler's own buffer and goroutine.
type SharedIndexInformer[T any] struct {
	lw      ListerWatcher[T]
	opts    InformerOptions[T]
	name    string
	indexer *Indexer[T]
	queue   Queue[T]
	clk     clock.Clock
	met     InformerMetrics
	process PopProcessFunc[T]
	notes   []notification[T]

	mu                sync.Mutex
	running           bool
	started           bool
	runCtx            context.Context
	runWG             *sync.WaitGroup
	reflector         *Reflector[T]
	resyncCheckPeriod time.Duration
	handlerSeq        int

	// handleMu serializes applying a popped run with changes to the
	// handler list, so that a handler added meanwhile sees each key
	// exactly once, either in its replay or as a notification.
	handleMu  sync.RWMutex
	listeners []*listener[T]

	synced   atomic.Bool
	syncedCh chan struct{}
	// failure is the latest run's permanent failure (guarded by mu).
	failure *runFailure

	waiters atomic.Int32
	progMu  sync.Mutex
	progCh  chan struct{}
	lastReq time.Time
}

// NewSharedIndexInformer returns an informer over lw. Run starts it.
func NewSharedIndexInformer[T any](lw ListerWatcher[T], opts InformerOptions[T]) *SharedIndexInformer[T] {
	i := &SharedIndexInformer[T]{
		lw:                lw,
		opts:              opts,
		name:              opts.Name,
		indexer:           NewIndexer(opts.Indexers),
		clk:               clock.Or(opts.Clock),
		resyncCheckPeriod: opts.ResyncPeriod,
		syncedCh:          make(chan struct{}),
		failure:           &runFailure{done: make(chan struct{})},
		progCh:            make(chan struct{}),
	}
	if i.name == "" {
		i.name = "dbinformer"
	}
	if i.opts.Logger == nil {
		i.opts.Logger = slog.Default()
	}
	if i.opts.ProgressRequestInterval <= 0 {
		i.opts.ProgressRequestInterval = 250 * time.Millisecond
	}
	if opts.Metrics != nil {
		i.met = opts.Metrics.InformerMetrics(i.name)
	}
	if i.met == nil {
		i.met = NoopMetrics{}
	}
	if opts.DeltaFIFO {
		i.queue = NewDeltaFIFO[T](i.indexer)
	} else {
		i.queue = NewFIFO[T](i.indexer)
	}
	i.process = i.handleDeltas
	return i
}

// Name returns the informer's name.
func (i *SharedIndexInformer[T]) Name() string { return i.name }

// Indexer returns the cache. Use it (or Lister) to read; writing to it
// behind the informer's back makes the cache disagree with the source.
func (i *SharedIndexInformer[T]) Indexer() *Indexer[T] { return i.indexer }

// Lister returns a read-only view of the cache.
func (i *SharedIndexInformer[T]) Lister() Lister[T] { return NewLister(i.indexer) }

// AddIndexers adds index functions, also after the informer started.
func (i *SharedIndexInformer[T]) AddIndexers(indexers Indexers[T]) error {
	return i.indexer.AddIndexers(indexers)
}

func (i *SharedIndexInformer[T]) report(err error) {
	if i.opts.ErrorHandler != nil {
		i.opts.ErrorHandler(err)
		return
	}
	i.opts.Logger.Error("dbinformer informer", "informer", i.name, "err", err)
}

// Run runs the informer until ctx is done and returns once every goroutine
// it started (reflector, processing, handlers) has ended. A source that
// fails permanently (an error matching ErrPermanent) ends the run: Run
// returns that error, and so does WaitForCacheSync if the cache never
// synced. Run returns nil when ctx ended it. It can be called
// again after it returned: the cache, the handlers and their undelivered
// notifications are kept, and the new run's list reconciles the cache
// with the source (keys that vanished meanwhile are deleted with
// finalStateUnknown).
func (i *SharedIndexInformer[T]) Run(ctx context.Context) error {
	i.mu.Lock()
	if i.running {
		i.mu.Unlock()
		return ErrAlreadyRunning
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg := &sync.WaitGroup{}
	i.running, i.started, i.runCtx, i.runWG = true, true, ctx, wg
	failure := i.failure
	if failure.err != nil {
		failure = &runFailure{done: make(chan struct{})}
		i.failure = failure
	}
	i.reflector = NewReflector[T](i.lw, signalingQueue[T]{i.queue, i}, ReflectorOptions[T]{
		Name:            i.name,
		ResyncPeriod:    i.resyncCheckPeriod,
		ShouldResync:    i.shouldResync,
		Backoff:         i.opts.Backoff,
		MinWatchTimeout: i.opts.MinWatchTimeout,
		Transform:       i.opts.Transform,
		ErrorHandler:    i.opts.ErrorHandler,
		Logger:          i.opts.Logger,
		Metrics:         i.met,
		Clock:           i.clk,
	})
	i.handleMu.RLock()
	for _, l := range i.listeners {
		i.startListenerLocked(l)
	}
	i.handleMu.RUnlock()
	r := i.reflector
	var runErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := r.Run(ctx); err != nil {
			runErr = err
			failure.err = err
			close(failure.done)
			cancel()
		}
	}()
	go func() {
		defer wg.Done()
		i.processLoop(ctx)
	}()
	i.mu.Unlock()

	<-ctx.Done()
	i.mu.Lock()
	// No listener can be started after this, so Wait cannot race an Add.
	i.running = false
	i.mu.Unlock()
	wg.Wait()
	return runErr
}

// startListenerLocked needs i.mu held and the informer running.
func (i *SharedIndexInformer[T]) startListenerLocked(l *listener[T]) {
	l.mu.Lock()
	if l.removed || l.active {
		l.mu.Unlock()
		return
	}
	l.active, l.stopping = true, false
	l.mu.Unlock()
	ctx, wg := i.runCtx, i.runWG
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.run(ctx)
	}()
}

func (i *SharedIndexInformer[T]) processLoop(ctx context.Context) {
	for {
		err := i.queue.Pop(ctx, i.process)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			i.report(fmt.Errorf("%s: %w", i.name, err))
		}
		i.advanced()
	}
}

// advanced runs after anything that may move the applied version or the
// sync state.
func (i *SharedIndexInformer[T]) advanced() {
	if !i.synced.Load() && i.queue.HasSynced() {
		if i.synced.CompareAndSwap(false, true) {
			close(i.syncedCh)
		}
	}
	i.met.Applied(i.queue.AppliedVersion())
	if i.waiters.Load() == 0 {
		return
	}
	i.progMu.Lock()
	close(i.progCh)
	i.progCh = make(chan struct{})
	i.progMu.Unlock()
}

// runFailure is one run's permanent failure: err is set before done is
// closed.
type runFailure struct {
	done chan struct{}
	err  error
}

// signalingQueue wakes WaitFor when the reflector queues a bookmark or a
// list, which can move the applied version without anything to pop.
type signalingQueue[T any] struct {
	Queue[T]
	i *SharedIndexInformer[T]
}

func (q signalingQueue[T]) Add(events []Event[T]) error {
	err := q.Queue.Add(events)
	q.i.advanced()
	return err
}

func (q signalingQueue[T]) Replace(list []Event[T], rv ResourceVersion) error {
	err := q.Queue.Replace(list, rv)
	q.i.advanced()
	return err
}

type noteKind uint8

const (
	noteAdd noteKind = iota + 1
	noteUpdate
	noteDelete
)

// notification is stored by value in each handler's buffer: no boxing,
// no allocation per change.
type notification[T any] struct {
	kind noteKind
	// flag is isInInitialList for adds and finalStateUnknown for deletes.
	flag bool
	// sync marks a replay only handlers due for a resync receive.
	sync     bool
	key      string
	old, obj T
}

func (i *SharedIndexInformer[T]) handleDeltas(deltas []Delta[T], initial bool) error {
	i.handleMu.RLock()
	defer i.handleMu.RUnlock()
	notes := i.notes[:0]
	// Errors are reported after the lock is released: an error handler
	// that reads the cache must not deadlock.
	var errs []error
	s := i.indexer
	s.mu.Lock()
	for k := range deltas {
		d := &deltas[k]
		switch d.Type {
		case DeltaSync:
			// The cache, not the delta, is the current state: in the
			// in-order queue newer deltas of the key may precede this one.
			obj, ok := s.items[d.Key]
			if !ok {
				continue
			}
			notes = append(notes, notification[T]{kind: noteUpdate, sync: true, key: d.Key, old: obj, obj: obj})
		case DeltaAdded, DeltaUpdated, DeltaReplaced:
			old, existed := s.items[d.Key]
			if _, err := s.putLocked(d.Key, d.Object); err != nil {
				errs = append(errs, fmt.Errorf("%s: version %d: %w", i.name, d.RV, err))
				continue
			}
			if existed {
				sync := d.Type == DeltaReplaced && i.opts.Equal != nil && i.opts.Equal(old, d.Object)
				notes = append(notes, notification[T]{kind: noteUpdate, sync: sync, key: d.Key, old: old, obj: d.Object})
			} else {
				notes = append(notes, notification[T]{kind: noteAdd, flag: initial, key: d.Key, obj: d.Object})
			}
		case DeltaDeleted:
			old, existed, err := s.deleteLocked(d.Key)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: version %d: %w", i.name, d.RV, err))
			}
			if !existed {
				// No handler ever saw this key (client-go drops such
				// deletes too): there is nothing to undo.
				continue
			}
			obj := old
			if d.HasObject {
				obj = d.Object
			}
			notes = append(notes, notification[T]{kind: noteDelete, flag: d.FinalStateUnknown, key: d.Key, obj: obj})
		}
	}
	s.mu.Unlock()
	for _, err := range errs {
		i.report(err)
	}
	if len(notes) > 0 {
		for _, l := range i.listeners {
			l.add(notes)
		}
	}
	clear(notes)
	i.notes = notes[:0]
	return nil
}

// shouldResync is the reflector's ShouldResync: it marks which handlers
// are due, so that the Sync deltas that follow reach only them.
func (i *SharedIndexInformer[T]) shouldResync() bool {
	i.handleMu.RLock()
	defer i.handleMu.RUnlock()
	now := i.clk.Now()
	need := false
	for _, l := range i.listeners {
		l.mu.Lock()
		l.syncing = l.resyncPeriod > 0 && !now.Before(l.nextResync)
		if l.syncing {
			need = true
			l.nextResync = now.Add(l.resyncPeriod)
		}
		l.mu.Unlock()
	}
	return need
}

// AddEventHandler registers h with the informer's default resync period.
func (i *SharedIndexInformer[T]) AddEventHandler(h ResourceEventHandler[T]) (*Registration[T], error) {
	return i.AddEventHandlerWithOptions(h, HandlerOptions{})
}

// AddEventHandlerWithResyncPeriod registers h with its own resync period.
func (i *SharedIndexInformer[T]) AddEventHandlerWithResyncPeriod(h ResourceEventHandler[T], period time.Duration) (*Registration[T], error) {
	return i.AddEventHandlerWithOptions(h, HandlerOptions{ResyncPeriod: &period})
}

// AddEventHandlerWithOptions registers h. If the cache already holds
// objects, h first receives an OnAdd (isInInitialList true) for each.
func (i *SharedIndexInformer[T]) AddEventHandlerWithOptions(h ResourceEventHandler[T], o HandlerOptions) (*Registration[T], error) {
	if h == nil {
		return nil, errors.New("dbinformer: nil handler")
	}
	period := i.opts.ResyncPeriod
	if o.ResyncPeriod != nil {
		period = *o.ResyncPeriod
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	requested := period
	if period > 0 {
		if period < MinimumResyncPeriod {
			period = MinimumResyncPeriod
		}
		// Unlike client-go, an informer created without a resync period
		// that has not started adopts the handler's: client-go silently
		// disables such a handler's resync, a classic surprise.
		if period < i.resyncCheckPeriod || (i.resyncCheckPeriod == 0 && !i.started) {
			if i.started {
				period = i.resyncCheckPeriod
			} else {
				i.resyncCheckPeriod = period
				for _, l := range i.listeners {
					l.mu.Lock()
					l.resyncPeriod = determineResyncPeriod(l.requestedResync, period)
					l.mu.Unlock()
				}
			}
		}
		requested = period
	}
	i.handlerSeq++
	name := o.Name
	if name == "" {
		// Numbered, so that two handlers of one type are told apart in
		// metrics.
		name = fmt.Sprintf("%T#%d", h, i.handlerSeq)
	}
	l := &listener[T]{
		inf:             i,
		name:            name,
		h:               h,
		max:             o.MaxPending,
		wake:            make(chan struct{}, 1),
		done:            make(chan struct{}),
		requestedResync: requested,
		resyncPeriod:    determineResyncPeriod(requested, i.resyncCheckPeriod),
	}
	l.cond = sync.NewCond(&l.mu)
	l.nextResync = i.clk.Now().Add(l.resyncPeriod)

	i.handleMu.Lock()
	// Replay the cache so the new handler starts from the same state as
	// the others; nothing is applied meanwhile (handleMu).
	i.indexer.mu.RLock()
	if n := len(i.indexer.items); n > 0 {
		l.buf = make([]notification[T], 0, n)
		for k, v := range i.indexer.items {
			l.buf = append(l.buf, notification[T]{kind: noteAdd, flag: true, key: k, obj: v})
		}
		l.initialPending = n
	}
	i.indexer.mu.RUnlock()
	i.listeners = append(i.listeners, l)
	i.handleMu.Unlock()
	if i.running {
		i.startListenerLocked(l)
	}
	l.reportPending()
	return &Registration[T]{l: l}, nil
}

// determineResyncPeriod is client-go's: a handler cannot resync more often
// than the informer checks, and not at all if the informer never checks.
func determineResyncPeriod(desired, check time.Duration) time.Duration {
	if desired == 0 {
		return 0
	}
	if check == 0 {
		return 0
	}
	if desired < check {
		return check
	}
	return desired
}

// RemoveEventHandler stops delivering to the registration's handler.
// Undelivered notifications are dropped. It does not wait for a call in
// progress; Registration.Done does.
func (i *SharedIndexInformer[T]) RemoveEventHandler(reg *Registration[T]) error {
	if reg == nil || reg.l.inf != i {
		return errors.New("dbinformer: registration does not belong to this informer")
	}
	l := reg.l
	l.mu.Lock()
	l.removed = true
	l.buf, l.head = nil, 0
	if l.initialCh != nil {
		close(l.initialCh)
		l.initialCh = nil
	}
	l.cond.Broadcast()
	if !l.active {
		l.closeDone()
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	i.handleMu.Lock()
	for k, x := range i.listeners {
		if x == l {
			i.listeners = append(i.listeners[:k], i.listeners[k+1:]...)
			break
		}
	}
	i.handleMu.Unlock()
	l.reportPending()
	return nil
}

// HasSynced reports whether the cache holds a complete list. It stays
// true once it became true, also across restarts.
func (i *SharedIndexInformer[T]) HasSynced() bool { return i.synced.Load() }

// LastSyncResourceVersion is the version of the last list or watch batch
// received (not necessarily applied yet; see WaitFor).
func (i *SharedIndexInformer[T]) LastSyncResourceVersion() ResourceVersion {
	i.mu.Lock()
	r := i.reflector
	i.mu.Unlock()
	if r == nil {
		return 0
	}
	return r.LastSyncResourceVersion()
}

// AppliedVersion is the version up to which every change is in the cache.
func (i *SharedIndexInformer[T]) AppliedVersion() ResourceVersion { return i.queue.AppliedVersion() }

// LastListError is the error of the last failed list of the current or last
// run, nil after a successful list.
func (i *SharedIndexInformer[T]) LastListError() error {
	i.mu.Lock()
	r := i.reflector
	i.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.LastListError()
}

// WaitForCacheSync blocks until HasSynced. When the run ends on a
// permanent failure first, it returns an error wrapping that failure
// (matching ErrPermanent). When ctx ends first, the error wraps ctx's error
// and says why the cache is not synced: the last list error, or that the
// informer was never started.
func (i *SharedIndexInformer[T]) WaitForCacheSync(ctx context.Context) error {
	select {
	case <-i.syncedCh:
		return nil
	default:
	}
	i.mu.Lock()
	failure := i.failure
	i.mu.Unlock()
	select {
	case <-i.syncedCh:
		return nil
	case <-failure.done:
		return fmt.Errorf("%s: cache not synced: %w", i.name, failure.err)
	case <-ctx.Done():
	}
	i.mu.Lock()
	started := i.started
	i.mu.Unlock()
	if !started {
		return fmt.Errorf("%s: cache not synced, the informer was never started: %w", i.name, ctx.Err())
	}
	if le := i.LastListError(); le != nil {
		return fmt.Errorf("%s: cache not synced: %w; last list error: %w", i.name, ctx.Err(), le)
	}
	return fmt.Errorf("%s: cache not synced (the list has not finished): %w", i.name, ctx.Err())
}

// WaitFor blocks until the cache has applied every change up to rv (and
// every bookmark), which gives read-your-writes: write, take the version
// the source returned, WaitFor it, read the cache. When the ListerWatcher
// is a ProgressReporter the open watch is asked for a bookmark (at most once per
// ProgressRequestInterval), so a version that touched no watched key is
// reached too. Without one, such a version is reached at the next change or
// bookmark the source sends.
func (i *SharedIndexInformer[T]) WaitFor(ctx context.Context, rv ResourceVersion) error {
	if i.queue.AppliedVersion() >= rv {
		return nil
	}
	i.waiters.Add(1)
	defer i.waiters.Add(-1)
	for {
		i.progMu.Lock()
		ch := i.progCh
		i.progMu.Unlock()
		applied := i.queue.AppliedVersion()
		if applied >= rv {
			return nil
		}
		i.requestProgress(ctx)
		t := i.clk.NewTimer(i.opts.ProgressRequestInterval)
		select {
		case <-ch:
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: waiting for version %d (applied %d): %w", i.name, rv, applied, ctx.Err())
		}
		t.Stop()
	}
}

func (i *SharedIndexInformer[T]) requestProgress(ctx context.Context) {
	i.progMu.Lock()
	now := i.clk.Now()
	if !i.lastReq.IsZero() && now.Sub(i.lastReq) < i.opts.ProgressRequestInterval {
		i.progMu.Unlock()
		return
	}
	i.lastReq = now
	i.progMu.Unlock()
	i.mu.Lock()
	r := i.reflector
	i.mu.Unlock()
	if r == nil {
		return
	}
	err := r.RequestProgress(ctx)
	switch {
	case errors.Is(err, ErrProgressNotSupported):
		// No watch open yet (or none that can): let the next wake-up try
		// again instead of waiting out the interval.
		i.progMu.Lock()
		i.lastReq = time.Time{}
		i.progMu.Unlock()
	case err != nil && ctx.Err() == nil:
		i.report(fmt.Errorf("%s: request progress: %w", i.name, err))
	}
}

// Registration is one handler's registration.
type Registration[T any] struct{ l *listener[T] }

// HasSynced reports whether the informer has synced and this handler has
// received every notification of the initial list (or of its replay).
func (r *Registration[T]) HasSynced() bool {
	if !r.l.inf.HasSynced() {
		return false
	}
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	return r.l.initialPending == 0
}

// WaitForCacheSync blocks until HasSynced. When ctx ends first, the error
// says why (see SharedIndexInformer.WaitForCacheSync) or that this handler
// is still working through its initial adds.
func (r *Registration[T]) WaitForCacheSync(ctx context.Context) error {
	if err := r.l.inf.WaitForCacheSync(ctx); err != nil {
		return err
	}
	for {
		r.l.mu.Lock()
		if r.l.initialPending == 0 || r.l.removed {
			r.l.mu.Unlock()
			return nil
		}
		if r.l.initialCh == nil {
			r.l.initialCh = make(chan struct{})
		}
		ch, left := r.l.initialCh, r.l.initialPending
		r.l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s: handler %s has %d initial notifications left: %w", r.l.inf.name, r.l.name, left, ctx.Err())
		}
	}
}

// Pending counts the notifications not yet delivered to this handler.
func (r *Registration[T]) Pending() int {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	return r.l.pendingLocked()
}

// Name is the handler's name in errors and metrics.
func (r *Registration[T]) Name() string { return r.l.name }

// Remove is RemoveEventHandler.
func (r *Registration[T]) Remove() error { return r.l.inf.RemoveEventHandler(r) }

// Done is closed once the registration was removed and no call to its
// handler is in progress.
func (r *Registration[T]) Done() <-chan struct{} { return r.l.done }

// listener owns one handler's buffer and goroutine.
type listener[T any] struct {
	inf  *SharedIndexInformer[T]
	name string
	h    ResourceEventHandler[T]
	max  int
	wake chan struct{}

	mu   sync.Mutex
	cond *sync.Cond // signalled when the buffer has room or stop was asked
	buf  []notification[T]
	head int
	// delivering counts notifications taken from buf and not yet
	// handled.
	delivering int
	// initialPending counts undelivered adds with isInInitialList;
	// initialCh, when waited on, is closed as it reaches zero.
	initialPending int
	initialCh      chan struct{}
	active         bool
	removed        bool
	stopping       bool
	done           chan struct{}
	doneOnce       sync.Once

	requestedResync time.Duration
	resyncPeriod    time.Duration
	nextResync      time.Time
	syncing         bool
}

func (l *listener[T]) closeDone() { l.doneOnce.Do(func() { close(l.done) }) }

func (l *listener[T]) pendingLocked() int { return len(l.buf) - l.head + l.delivering }

// reportPending reports under l.mu so that reports from the informer and
// from the delivery goroutine reach the metric in the order the counts were
// taken; reported after unlocking, an older count could land last and leave
// the gauge stale. InformerMetrics methods must not block, so this is safe.
func (l *listener[T]) reportPending() {
	l.mu.Lock()
	l.inf.met.PendingNotifications(l.name, l.pendingLocked())
	l.mu.Unlock()
}

// add appends notes under one lock, blocking while the buffer is full.
func (l *listener[T]) add(notes []notification[T]) {
	l.mu.Lock()
	if l.removed {
		l.mu.Unlock()
		return
	}
	added := 0
	for k := range notes {
		n := &notes[k]
		if n.sync && !l.syncing {
			continue
		}
		for l.max > 0 && l.pendingLocked() >= l.max && !l.removed && !l.stopping {
			l.signal()
			l.cond.Wait()
		}
		if l.removed {
			break
		}
		l.buf = append(l.buf, *n)
		if n.kind == noteAdd && n.flag {
			l.initialPending++
		}
		added++
	}
	if added > 0 {
		l.inf.met.PendingNotifications(l.name, l.pendingLocked()) // under l.mu: see reportPending
	}
	l.mu.Unlock()
	if added > 0 {
		l.signal()
	}
}

func (l *listener[T]) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *listener[T]) run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		l.stopping = true
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer func() {
		stop()
		l.mu.Lock()
		// stopping stays set until the next start: the informer's
		// processing may still be adding to this buffer, and must not
		// wait for room that nobody will make. It is set here too because
		// stop() can win against a cancellation that has closed Done but
		// not yet run the AfterFunc.
		l.active = false
		if ctx.Err() != nil {
			l.stopping = true
			l.cond.Broadcast()
		}
		if l.removed {
			l.closeDone()
		}
		l.mu.Unlock()
	}()
	var batch []notification[T]
	for {
		l.mu.Lock()
		for l.head == len(l.buf) && !l.removed {
			l.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-l.wake:
			}
			l.mu.Lock()
		}
		if l.removed || ctx.Err() != nil {
			l.mu.Unlock()
			return
		}
		// Swap buffers: the handler drains one while add fills the other.
		batch, l.buf = l.buf[l.head:], batch[:0]
		l.head = 0
		l.delivering = len(batch)
		l.cond.Broadcast()
		l.mu.Unlock()

		for k := range batch {
			n := &batch[k]
			l.call(n)
			l.mu.Lock()
			l.delivering--
			if n.kind == noteAdd && n.flag && l.initialPending > 0 {
				l.initialPending--
				if l.initialPending == 0 && l.initialCh != nil {
					close(l.initialCh)
					l.initialCh = nil
				}
			}
			removed := l.removed
			if l.max > 0 {
				l.cond.Broadcast()
			}
			l.mu.Unlock()
			if removed {
				return
			}
		}
		clear(batch)
		l.reportPending()
	}
}

// call delivers one notification; a panicking handler is reported and
// skipped, and the informer and the other handlers go on.
func (l *listener[T]) call(n *notification[T]) {
	defer func() {
		if p := recover(); p != nil {
			l.inf.met.HandlerPanicked(l.name)
			l.inf.report(&HandlerPanicError{Informer: l.inf.name, Handler: l.name, Key: n.key, Value: fmt.Sprint(p), Stack: debug.Stack()})
		}
	}()
	switch n.kind {
	case noteAdd:
		l.h.OnAdd(n.key, n.obj, n.flag)
	case noteUpdate:
		l.h.OnUpdate(n.key, n.old, n.obj)
	case noteDelete:
		l.h.OnDelete(n.key, n.obj, n.flag)
	}
}

// HandlerPanicError reports a handler that panicked on a key.
type HandlerPanicError struct {
	Informer, Handler, Key string
	// Value is the panic value, formatted.
	Value string
	Stack []byte
}

func (e *HandlerPanicError) Error() string {
	return fmt.Sprintf("%s: handler %s panicked on key %q: %v", e.Informer, e.Handler, e.Key, e.Value)
}
