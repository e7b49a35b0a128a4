package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/driver"
)

// InformerOptions configures a SharedIndexInformer. The zero value of
// every field means the default; a negative duration means "off".
type InformerOptions[T any] struct {
	// Name names the informer (the source) in errors, logs and metrics.
	Name string
	// ResyncPeriod is the resync period of handlers added without one,
	// and the informer's initial resync check period. 0 or negative: no
	// resync.
	ResyncPeriod time.Duration
	// Indexers are the cache's index functions.
	Indexers Indexers[T]
	// Transform rewrites each object before it is cached (drop fields to
	// save memory, precompute). An error (or a panic) is reported as a
	// *driver.DecodeError and handled as an undecodable change (Undecodable).
	Transform func(T) (T, error)
	// Undecodable says what happens to a key whose change does not decode
	// (or that Transform rejects): by default (RemoveUndecodable) the key
	// leaves the cache with a delete, handlers get OnDelete with
	// finalStateUnknown true, and the *driver.DecodeError goes to ErrorHandler;
	// StopOnUndecodable stops the informer with a permanent error instead.
	// No policy leaves the previous object in the cache looking current.
	Undecodable UndecodablePolicy
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
	// Backoff paces retries after list and watch failures.
	Backoff Backoff
	// MinWatchTimeout: each watch is ended and reopened from the last
	// version after a random time in [MinWatchTimeout, 2×MinWatchTimeout),
	// as client-go does, so that a watch silently stuck in the network
	// cannot stall the cache forever. 0 means 5 minutes; negative means
	// never.
	MinWatchTimeout time.Duration
	// ProgressInterval is how often an open watch is expected to show
	// progress (a change, a bookmark, or the answer to a bookmark request),
	// which tells a stuck watch (a frozen server, a half-open connection)
	// from a quiet one: after driver.StuckIntervals silent intervals the watch is
	// reopened from its last version, with an error matching driver.ErrWatchStuck
	// (see driver.ProgressIntervaler). 0 means the driver.ListerWatcher's own
	// ProgressInterval, and no detection if it declares none; negative
	// means no detection. Set it only for a source whose watches emit
	// bookmarks at least that often or answer bookmark requests
	// (driver.ProgressReporter): another source's idle watch would be reopened
	// every driver.StuckIntervals intervals (harmless, but needless).
	ProgressInterval time.Duration
	// ProgressRequestInterval rate-limits the bookmark requests WaitFor
	// makes; 0 means 250ms, negative means WaitFor never requests one.
	ProgressRequestInterval time.Duration
	// ErrorHandler receives every failure as it happens: list and watch
	// errors (each retry's, naming the source's own error), stuck watches
	// (driver.ErrWatchStuck), decode errors (*driver.DecodeError naming source, key and
	// version), out-of-order events (*OrderError), index errors
	// (*IndexError) and handler panics (*HandlerPanicError). nil logs them
	// with Logger (an expired version at Info, a stuck watch at Warn, the
	// rest at Error).
	ErrorHandler func(error)
	// Checkpoint, when set, saves the cache periodically and when a run
	// ends, and starts each run from the last checkpoint: warm, watching
	// from its version instead of listing (see CheckpointOptions).
	Checkpoint *CheckpointOptions[T]
	// Audit, when set, compares the cache with the source every period
	// and heals what differs (see AuditOptions); nil means no audit.
	Audit   *AuditOptions[T]
	Logger  *slog.Logger
	Metrics MetricsProvider
	Clock   clock.Clock
}

// ErrAlreadyRunning is returned by Run on an informer that is running.
var ErrAlreadyRunning = errors.New("dbinformer: informer is already running")

// SharedIndexInformer keeps an indexed cache of a source and tells
// handlers about its changes: a Reflector feeds a Queue, one goroutine pops
// it, applies each popped run to the Indexer in one update and hands the
// resulting notifications to every handler's own buffer and goroutine
// (handlers.go). Create it with NewSharedIndexInformer.
type SharedIndexInformer[T any] struct {
	lw      driver.ListerWatcher[T]
	opts    InformerOptions[T]
	name    string
	indexer *Indexer[T]
	queue   Queue[T]
	clk     clock.Clock
	met     InformerMetrics
	rep     reporter
	process PopProcessFunc[T]
	notes   []notification[T]

	mu                sync.Mutex
	running           bool
	started           bool
	runCtx            context.Context
	runWG             *sync.WaitGroup
	reflector         *Reflector[T]
	runStarted        time.Time
	resyncCheckPeriod time.Duration
	handlerSeq        int
	// failure is the latest run's permanent failure.
	failure *runFailure

	// handleMu serializes applying a popped run with changes to the
	// handler list, so that a handler added meanwhile sees each key
	// exactly once, either in its replay or as a notification.
	handleMu  sync.RWMutex
	listeners []*listener[T]

	synced   atomic.Bool
	syncedCh chan struct{}

	progMu  sync.Mutex
	lastReq time.Time

	head headCache // Head's shared reads

	ckpt *checkpointer[T]          // nil without Options.Checkpoint
	warm atomic.Pointer[warmState] // the run's warm start, if any
	// ckptRec is ckpt's record of changes (set with ckpt, read by
	// handleDeltas without i.mu); replay, the changes a warm start
	// drops (a loaded object's state is later than them).
	ckptRec atomic.Pointer[changeRecord]
	replay  atomic.Pointer[replayFilter]

	auditMu   sync.Mutex                   // one audit at a time
	auditTr   atomic.Pointer[changeRecord] // the running audit's record
	lastAudit atomic.Pointer[AuditResult]  // for LastAudit and SyncStatus
}

// NewSharedIndexInformer returns an informer over lw. Run starts it.
func NewSharedIndexInformer[T any](lw driver.ListerWatcher[T], opts InformerOptions[T]) *SharedIndexInformer[T] {
	i := &SharedIndexInformer[T]{
		lw:                lw,
		opts:              opts,
		name:              opts.Name,
		indexer:           NewIndexer(opts.Indexers),
		clk:               clock.Or(opts.Clock),
		resyncCheckPeriod: max(opts.ResyncPeriod, 0),
		syncedCh:          make(chan struct{}),
		failure:           &runFailure{done: make(chan struct{})},
	}
	if i.name == "" {
		i.name = "dbinformer"
	}
	i.rep = newReporter(i.name, opts.ErrorHandler, opts.Logger, i.clk)
	if i.opts.ProgressRequestInterval == 0 {
		i.opts.ProgressRequestInterval = 250 * time.Millisecond
	}
	if opts.Metrics != nil {
		i.met = opts.Metrics.InformerMetrics(i.name)
	}
	if i.met == nil {
		i.met = NoopMetrics{}
	}
	i.rep.schemaMet, _ = i.met.(SchemaMetrics)
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

// Indexer returns the cache itself, for advanced use (adding indexes,
// sharing it with code that wants the concrete type). Read through Lister;
// writing to the Indexer behind the informer's back makes the cache
// disagree with the source.
func (i *SharedIndexInformer[T]) Indexer() *Indexer[T] { return i.indexer }

// Lister returns a read-only view of the cache.
func (i *SharedIndexInformer[T]) Lister() Lister[T] { return NewLister(i.indexer) }

// AddIndexers adds index functions, also after the informer started.
func (i *SharedIndexInformer[T]) AddIndexers(indexers Indexers[T]) error {
	return i.indexer.AddIndexers(indexers)
}

// runFailure is one run's permanent failure: err is set before done is
// closed.
type runFailure struct {
	done chan struct{}
	err  error
}

// Run runs the informer until ctx is done and returns once every goroutine
// it started (reflector, processing, handlers) has ended. A source that
// fails permanently (an error matching driver.ErrPermanent) ends the run: Run
// returns that error, and so does WaitForCacheSync if the cache never
// synced. Options that cannot work (a checkpoint without a codec) fail a
// run before it starts, the same way. Run returns nil when ctx ended it. It can be called
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
	if err := i.setupCheckpoint(); err != nil {
		err = i.failBeforeStartLocked(err)
		i.mu.Unlock()
		return err
	}
	ckpt := i.ckpt
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg := &sync.WaitGroup{}
	i.running, i.started, i.runCtx, i.runWG = true, true, ctx, wg
	i.runStarted = i.clk.Now()
	failure := i.failure
	if failure.err != nil {
		failure = &runFailure{done: make(chan struct{})}
		i.failure = failure
	}
	i.reflector = newReflector(i.lw, i.queue, reflectorConfig[T]{
		name:             i.name,
		resyncPeriod:     i.resyncCheckPeriod,
		shouldResync:     i.shouldResync,
		backoff:          i.opts.Backoff,
		minWatchTimeout:  i.opts.MinWatchTimeout,
		progressInterval: i.opts.ProgressInterval,
		transform:        i.opts.Transform,
		undecodable:      i.opts.Undecodable,
		rep:              i.rep,
		met:              i.met,
		clk:              i.clk,
		reserve:          i.indexer.reserve,
	})
	i.warm.Store(nil)
	i.replay.Store(nil)
	if ckpt != nil {
		ws := &warmState{began: i.clk.Now()}
		ws.errsAt, _ = i.rep.reported()
		i.reflector.cfg.warm = func(ctx context.Context) (ResourceVersion, bool, bool) { return i.warmStart(ctx, ckpt, ws) }
		i.reflector.cfg.listed = ws.listed
		wg.Go(func() { i.checkpointLoop(ctx, ckpt) })
	}
	i.handleMu.RLock()
	for _, l := range i.listeners {
		i.startListenerLocked(l)
	}
	i.handleMu.RUnlock()
	r := i.reflector
	var runErr error
	wg.Go(func() {
		if err := r.Run(ctx); err != nil {
			runErr = err
			failure.err = err
			close(failure.done)
			cancel()
		}
	})
	wg.Go(func() { i.processLoop(ctx) })
	wg.Go(func() { i.followQueue(ctx) })
	if i.opts.Audit != nil {
		wg.Go(func() { i.auditLoop(ctx) })
	}
	i.mu.Unlock()

	<-ctx.Done()
	i.mu.Lock()
	// No listener can be started after this, so Wait cannot race an Add.
	i.running = false
	i.mu.Unlock()
	wg.Wait()
	i.finalCheckpoint(ctx, ckpt)
	return runErr
}

func (i *SharedIndexInformer[T]) processLoop(ctx context.Context) {
	for {
		err := i.queue.Pop(ctx, i.process)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			i.rep.report(ctx, fmt.Errorf("%s: %w", i.name, err))
		}
	}
}

// followQueue reports the applied version and notices the sync, whenever
// the queue says they may have moved.
func (i *SharedIndexInformer[T]) followQueue(ctx context.Context) {
	// Both queues kick without allocating; Changed would make a channel
	// per change.
	kicks := i.queue.(interface{ kicks() <-chan struct{} }).kicks()
	for {
		i.checkSynced()
		applied := i.queue.AppliedVersion()
		i.met.Applied(applied)
		if r := i.replay.Load(); r != nil && applied >= r.upTo {
			i.replay.CompareAndSwap(r, nil)
		}
		select {
		case <-kicks:
		case <-ctx.Done():
			return
		}
	}
}

// checkSynced closes syncedCh once the queue has handed over its first
// list; it reports whether the informer has synced.
func (i *SharedIndexInformer[T]) checkSynced() bool {
	if i.synced.Load() {
		return true
	}
	if !i.queue.HasSynced() || !i.warmSynced() {
		return false
	}
	// What the initial list staged is filed before anyone is told the
	// cache is synced: the time it takes is the sync's.
	i.indexer.settleListed()
	if i.synced.CompareAndSwap(false, true) {
		close(i.syncedCh)
		if ws := i.warm.Load(); ws != nil {
			i.logWarmSynced(context.Background(), ws)
		}
	}
	return true
}

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

// Head returns the newest version of the informer's source (driver.HeadReader,
// found through wrappers by driver.Capability), for lag: AppliedVersion's
// distance to it. Calls within a second of a finished read get that
// read's answer, and concurrent calls share one read, so every observer
// of the informer (a status page, Prometheus) reads through it at no extra
// cost to the source. When the source cannot tell its head, the error
// matches errors.ErrUnsupported.
func (i *SharedIndexInformer[T]) Head(ctx context.Context) (ResourceVersion, error) {
	h, ok := driver.Capability[driver.HeadReader](i.lw)
	if !ok {
		return 0, errNoHead
	}
	c := &i.head
	for {
		c.mu.Lock()
		if c.readOnce && c.reading == nil && i.clk.Since(c.at) < headReuse {
			rv, err := c.rv, c.err
			c.mu.Unlock()
			return rv, err
		}
		if wait := c.reading; wait != nil {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		done := make(chan struct{})
		c.reading = done
		c.mu.Unlock()
		rv, err := h.Head(ctx)
		c.mu.Lock()
		c.reading = nil
		close(done)
		// A read that ended because its caller gave up says nothing about
		// the source: the next caller reads again.
		if ctx.Err() == nil || err == nil {
			c.rv, c.err, c.at, c.readOnce = rv, err, i.clk.Now(), true
		}
		c.mu.Unlock()
		if err != nil {
			return 0, fmt.Errorf("%s: read the source's head: %w", i.name, err)
		}
		return rv, nil
	}
}

// Source names the kind of the informer's source: the Go type of the
// driver.ListerWatcher beneath any wrappers (see driver.Capability), without package
// path or type arguments, such as "etcdinformer.Prefix" for an
// *etcdinformer.Prefix[User] inside a filter.Wrap (what SyncStatus.Source
// holds).
func (i *SharedIndexInformer[T]) Source() string {
	lw := i.lw
	for range 64 {
		next := driver.Unwrap(lw)
		if next == nil {
			break
		}
		lw = next
	}
	t := reflect.TypeOf(lw)
	if t == nil {
		return ""
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s := t.String()
	if j := strings.IndexByte(s, '['); j >= 0 {
		s = s[:j]
	}
	return s
}

// LastAudit returns the latest audit run's result; false when none ran.
func (i *SharedIndexInformer[T]) LastAudit() (AuditResult, bool) {
	r := i.lastAudit.Load()
	if r == nil {
		return AuditResult{}, false
	}
	return *r, true
}

// AuditNow runs one audit at once (whatever InformerOptions.Audit says,
// with its options or the defaults) and returns its result: for tests, and
// for an operator's "check now" button. It waits for the cache to sync.
func (i *SharedIndexInformer[T]) AuditNow(ctx context.Context) AuditResult {
	if err := i.WaitForCacheSync(ctx); err != nil {
		return AuditResult{Outcome: AuditFailed, Err: err}
	}
	return i.audit(ctx, i.auditOptions())
}

// Checkpoint saves a checkpoint now, if the cache is synced and has moved
// since the last one. Without InformerOptions.Checkpoint it returns an
// error.
func (i *SharedIndexInformer[T]) Checkpoint(ctx context.Context) error {
	i.mu.Lock()
	err := i.setupCheckpoint()
	c := i.ckpt
	i.mu.Unlock()
	if err != nil {
		return err
	}
	if c == nil {
		return fmt.Errorf("%s: no checkpoint store (set InformerOptions.Checkpoint)", i.name)
	}
	return i.saveCheckpoint(ctx, c)
}

// ServingCheckpoint reports whether the cache serves a loaded checkpoint
// that has not caught up with the source yet, and the checkpoint's
// version. Once the informer has synced it reports false.
func (i *SharedIndexInformer[T]) ServingCheckpoint() (ResourceVersion, bool) {
	ws := i.warm.Load()
	if ws == nil || i.checkSynced() {
		return 0, false
	}
	return ws.from, true
}
