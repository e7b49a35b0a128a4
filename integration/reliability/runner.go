package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/workqueue"
)

// Run runs one seed against a fresh harness from makeHarness and returns
// what it did and found; it fails t only when the run itself cannot
// proceed (a server that does not start, a write failing for a minute).
// The caller reports res.Divergences, with Failure for the message.
//
// The informer runs with three handlers: one that records what it sees
// (informertest.Recorder), one that records and then panics on about one
// event in eight, and one that enqueues keys into a rate-limited WorkQueue
// whose workers reconcile from the cache and fail at random (FailRate).
// The workload writes Ops times to Keys keys (a quarter of the writes
// delete), every value carrying the next version of one counter; before
// planned writes, chosen by the seed, it injects each fault kind the
// harness supports FaultsPerKind times, writing while the fault lasts when
// the harness says it can. Then, after Heal: WaitFor(head), cache == truth,
// every handler's view and the reconciler's == truth, no handler saw a
// key's version go backwards, the reconciler never read an older version
// than it had read before, and no goroutine is left once the harness is
// closed.
func Run[T any](t testing.TB, name string, makeHarness MakeHarness[T], seed uint64, cfg Config) (res Result) {
	t.Helper()
	cfg = cfg.withDefaults()
	leaks := goleak.IgnoreCurrent()
	start := time.Now()
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	res = Result{Adapter: name, Seed: seed, Config: cfg, Faults: map[conformance.Fault]int{}, Converge: map[conformance.Fault][]time.Duration{}, Overlapped: map[conformance.Fault][]time.Duration{}}
	sc := &scope{TB: t}
	closed := false
	defer func() {
		res.Elapsed = time.Since(start)
		if !closed {
			sc.close()
		}
	}()

	hh, variant := makeHarness(sc, rnd)
	res.Variant = variant
	h, ok := hh.(Harness[T])
	if !ok {
		t.Fatalf("reliability: the %s harness (%T) must implement conformance.Truth and conformance.Faults", name, hh)
	}

	ctx, cancel := context.WithTimeout(context.Background(), cfg.Settle+5*time.Minute)
	defer cancel()

	r := &seedRun[T]{t: t, name: name, seed: seed, cfg: cfg, start: start, rnd: rnd, res: &res,
		sc: sc, div: &divergences{scope: sc}, hh: hh, h: h, ctx: ctx}
	r.startInformer()
	r.addHandlers()
	r.startController()
	r.startRun()
	stopped := false
	defer func() {
		if !stopped {
			r.shutdown()
		}
	}()

	if err := r.waitSync(); err != nil {
		res.Divergences = append(res.Divergences, fmt.Sprintf("initial sync: %v", err))
		return res
	}
	r.workload()
	h.Heal(sc)
	found := r.finalChecks()
	r.tally()

	stopped = true
	r.shutdown()
	closed = true
	sc.close()
	r.result(found, leaks)
	return res
}

// seedRun is one Run: its harness, informer, handlers and controller,
// shared by Run's phases (set-up, the workload with faults, the final
// checks, the result) so that each can be read on its own.
type seedRun[T any] struct {
	t     testing.TB
	name  string
	seed  uint64
	cfg   Config
	start time.Time
	rnd   *rand.Rand
	res   *Result // Run's result, filled in by the phases
	sc    *scope
	div   *divergences
	hh    conformance.Harness[T] // as made, for its optional interfaces
	h     Harness[T]
	ctx   context.Context

	reported atomic.Int64 // informer errors
	met      *metrics
	aud      *auditor
	audit    *core.AuditOptions[T] // nil: no audit
	inf      *core.SharedIndexInformer[T]
	queue    *workqueue.Queue[string]
	rec      *informertest.Recorder[T]
	panicky  *informertest.Recorder[T]

	// The controller's state.
	recMu      sync.Mutex
	reconciled map[string]int64
	highest    map[string]int64
	failRnd    *rand.Rand
	requeues   atomic.Int64
	workers    sync.WaitGroup

	runCtx    context.Context
	stopRun   context.CancelFunc
	runDone   chan struct{}
	measuring sync.WaitGroup // convergence timers

	ver      int64 // the workload's counter
	convMu   sync.Mutex
	injected atomic.Int64 // faults injected so far
}

// startInformer builds the informer over the harness's ListerWatcher, its
// errors counted and logged and its audit reporting to r.aud.
func (r *seedRun[T]) startInformer() {
	t := r.t
	r.met = &metrics{}
	r.aud = newAuditor(t, r.start)
	if r.cfg.AuditPeriod > 0 {
		r.audit = auditOptions[T](r.aud, r.cfg.AuditPeriod)
	}
	r.inf = core.NewSharedIndexInformer[T](r.h.ListerWatcher(), core.InformerOptions[T]{
		Name: "reliability " + r.name,
		// Faults make errors by the dozen; they are expected. What counts
		// is convergence, checked below.
		ErrorHandler: func(err error) {
			r.reported.Add(1)
			t.Logf("%s informer: %v", time.Now().Format("15:04:05.000"), err)
		},
		Backoff:         core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
		MinWatchTimeout: 30 * time.Second,
		Metrics:         r.met,
		Audit:           r.audit,
		Logger:          TestLogger(t),
	})
}

// addHandlers adds the recording handler (which also feeds the
// controller's queue) and the panicking one.
func (r *seedRun[T]) addHandlers() {
	r.queue = workqueue.New(workqueue.Options[string]{
		Name:        "reliability",
		RateLimiter: workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, 50*time.Millisecond),
	})
	r.rec = informertest.NewRecorder(r.div, r.h.Version)
	if _, err := r.inf.AddEventHandler(enqueuing[T]{r.rec, r.queue}); err != nil {
		r.t.Fatalf("add handler: %v", err)
	}

	// A handler that records what it saw and then panics on about one
	// event in eight: the informer must recover, report it, and keep
	// feeding this handler and the others.
	r.panicky = informertest.NewRecorder(&prefixed{r.div, "panicking handler: "}, r.h.Version)
	if _, err := r.inf.AddEventHandlerWithOptions(panicking[T]{r.panicky, r.h.Version}, core.HandlerOptions{Name: "panicky"}); err != nil {
		r.t.Fatalf("add handler: %v", err)
	}
}

// startController starts the controller: it reconciles a key from the
// cache, failing at random; a failed key is requeued with per-item
// exponential backoff. The versions it reads must never go back either:
// the cache does not travel in time.
func (r *seedRun[T]) startController() {
	r.reconciled = map[string]int64{}
	r.highest = map[string]int64{}
	r.failRnd = rand.New(rand.NewPCG(r.seed^0x5bd1e995, r.seed))
	for range 2 {
		r.workers.Go(r.reconcile)
	}
}

// reconcile is one of the controller's workers, until the queue shuts
// down.
func (r *seedRun[T]) reconcile() {
	queue := r.queue
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return
		}
		r.recMu.Lock()
		fail := r.failRnd.Float64() < r.cfg.FailRate
		r.recMu.Unlock()
		if fail {
			r.requeues.Add(1)
			queue.AddRateLimited(key)
			queue.Done(key)
			continue
		}
		obj, ok := r.inf.Lister().Get(key)
		r.recMu.Lock()
		if ok {
			v := r.h.Version(obj)
			if v < r.highest[key] {
				r.div.add(fmt.Sprintf("reconciler read %q at version %d after version %d", key, v, r.highest[key]))
			}
			r.highest[key] = max(r.highest[key], v)
			r.reconciled[key] = v
		} else {
			delete(r.reconciled, key)
		}
		r.recMu.Unlock()
		queue.Forget(key)
		queue.Done(key)
	}
}

// startRun runs the informer until shutdown.
func (r *seedRun[T]) startRun() {
	r.runCtx, r.stopRun = context.WithCancel(r.ctx)
	r.runDone = make(chan struct{})
	go func() { defer close(r.runDone); _ = r.inf.Run(r.runCtx) }()
}

// shutdown stops the informer, the convergence timers and the controller,
// and waits for them.
func (r *seedRun[T]) shutdown() {
	r.stopRun()
	<-r.runDone
	r.measuring.Wait()
	r.queue.ShutDown()
	r.workers.Wait()
}

// waitSync waits (cfg.Settle at most) for the informer's initial sync.
func (r *seedRun[T]) waitSync() error {
	syncCtx, syncCancel := context.WithTimeout(r.ctx, r.cfg.Settle)
	defer syncCancel()
	return r.inf.WaitForCacheSync(syncCtx)
}

// workload writes cfg.Ops times, injecting before planned writes each
// fault kind the harness supports cfg.FaultsPerKind times (writing while
// the fault lasts when the harness says it can), and times each fault's
// convergence.
func (r *seedRun[T]) workload() {
	// Plan: which op each fault precedes. Decided by the seed alone.
	kinds := r.h.Faults()
	plan := map[int][]conformance.Fault{}
	for _, k := range kinds {
		for range r.cfg.FaultsPerKind {
			at := r.rnd.IntN(r.cfg.Ops)
			plan[at] = append(plan[at], k)
		}
	}
	for i := range r.cfg.Ops {
		for _, f := range plan[i] {
			r.t.Logf("%s before write %d: %s (applied %d)", time.Now().Format("15:04:05.000"), i, f, r.inf.AppliedVersion())
			r.injected.Add(1)
			span := r.aud.injected(f)
			end, writable := r.h.Inject(r.sc, r.ctx, f)
			r.res.Faults[f]++
			if writable {
				for range r.rnd.IntN(6) {
					r.write()
				}
			}
			if end != nil {
				end()
			}
			r.converged(f, span)
		}
		r.write()
	}
}

// write puts (or, one time in four, deletes) a random key, the value
// carrying the counter's next version, then pauses up to cfg.MaxPause.
func (r *seedRun[T]) write() {
	r.ver++
	key := fmt.Sprintf("k%02d", r.rnd.IntN(r.cfg.Keys))
	del := r.rnd.IntN(4) == 0
	v := r.ver
	Retry(r.t, r.ctx, fmt.Sprintf("write %s", key), func(ctx context.Context) error {
		var err error
		if del {
			_, err = r.h.Delete(ctx, key)
		} else {
			_, err = r.h.Put(ctx, key, v)
		}
		return err
	})
	r.res.Ops++
	if p := r.cfg.MaxPause; p > 0 {
		time.Sleep(time.Duration(r.rnd.Int64N(int64(p))))
	}
}

// converged times fault f from its heal (now) until the informer has
// caught up with the head read then, in the background; the time counts
// as overlapped when another fault was injected meanwhile.
func (r *seedRun[T]) converged(f conformance.Fault, span *faultSpan) {
	healed := time.Now()
	epoch := r.injected.Load()
	var head core.ResourceVersion
	// Each attempt bounded to a second: the harness's own connection
	// may have lost the request in the fault (a NATS restart), and
	// waiting out its client's 5s timeout would be counted as the
	// informer's time.
	retryEach(r.t, r.ctx, "read head", time.Second, func(ctx context.Context) error {
		var err error
		head, err = r.h.Head(ctx)
		return err
	})
	r.measuring.Go(func() {
		if err := r.inf.WaitFor(r.runCtx, head); err != nil {
			return // the run ended first; the final checks report it
		}
		d := time.Since(healed)
		r.aud.caughtUp(span)
		overlapped := r.injected.Load() != epoch
		r.convMu.Lock()
		if overlapped {
			r.res.Overlapped[f] = append(r.res.Overlapped[f], d)
		} else {
			r.res.Converge[f] = append(r.res.Converge[f], d)
		}
		r.convMu.Unlock()
	})
}

// readTruth reads the source's head and its state, keyed as the cache
// and the handlers key it.
func (r *seedRun[T]) readTruth() (core.ResourceVersion, map[string]int64) {
	var head core.ResourceVersion
	Retry(r.t, r.ctx, "read head", func(ctx context.Context) error {
		var err error
		head, err = r.h.Head(ctx)
		return err
	})
	var truth map[string]int64
	Retry(r.t, r.ctx, "read source", func(ctx context.Context) error {
		var err error
		truth, err = r.h.Truth(ctx)
		return err
	})
	if km, ok := r.hh.(conformance.KeyMapper); ok {
		// Truth has the keys given to Put; the cache and the handlers
		// have the keys the ListerWatcher reports.
		mapped := make(map[string]int64, len(truth))
		for k, v := range truth {
			mapped[km.EventKey(k)] = v
		}
		truth = mapped
	}
	return head, truth
}

// finalChecks settles the run once healed: the cache reaches the head,
// then equals the source, and so do the handlers' views and the
// reconciler's; it returns what diverged.
func (r *seedRun[T]) finalChecks() []string {
	inf := r.inf
	// Settle: the cache reaches the head, then equals the source.
	head, truth := r.readTruth()
	settle, settleCancel := context.WithTimeout(r.ctx, r.cfg.Settle)
	defer settleCancel()
	var found []string
	diverge := func(format string, args ...any) { found = append(found, fmt.Sprintf(format, args...)) }
	if err := inf.WaitFor(settle, head); err != nil {
		diverge("WaitFor(head %d): %v (applied %d, informer errors %d)", head, err, inf.AppliedVersion(), r.reported.Load())
	}
	cache := map[string]int64{}
	inf.Indexer().Range(func(key string, obj T) bool {
		cache[key] = r.h.Version(obj)
		return true
	})
	for _, d := range informertest.Diff("cache", cache, truth) {
		diverge("%s", d)
	}
	if len(found) > 0 {
		// The handlers will not fix what the cache got wrong: do not wait
		// the whole deadline for them.
		var cancel context.CancelFunc
		settle, cancel = context.WithTimeout(settle, 2*time.Second)
		defer cancel()
	}
	for _, h := range []struct {
		what string
		rec  *informertest.Recorder[T]
	}{{"handler", r.rec}, {"panicking handler", r.panicky}} {
		if !waitUntil(settle, func() bool { return informertest.Diff(h.what, h.rec.State(), truth) == nil }) {
			for _, d := range informertest.Diff(h.what, h.rec.State(), truth) {
				diverge("%s", d)
			}
		}
	}
	recDiff := func() []string {
		r.recMu.Lock()
		defer r.recMu.Unlock()
		return informertest.Diff("reconciler", r.reconciled, truth)
	}
	if !waitUntil(settle, func() bool { return recDiff() == nil && r.queue.Len() == 0 }) {
		for _, d := range recDiff() {
			diverge("%s", d)
		}
	}
	// One audit more, with every fault healed and the cache checked: it
	// must find the cache equal (every run audits at least once, however
	// short).
	if r.audit != nil {
		auditCtx, cancel := context.WithTimeout(r.ctx, time.Minute)
		inf.AuditNow(auditCtx)
		cancel()
	}
	return found
}

// tally stops the audit's bookkeeping and counts into the result what the
// informer and the controller did: requeues, relists, watch restarts,
// handler panics.
func (r *seedRun[T]) tally() {
	r.aud.stop()
	r.res.Faults[Requeue] = int(r.requeues.Load())
	r.res.Relists, r.res.Restarts = int(r.met.relists.Load()), int(r.met.restarts.Load())
	r.res.Faults[Panic] = int(r.met.panics.Load())
}

// result completes the result once everything is stopped: the divergences
// (the handlers', the final checks' found, the audit's, goroutines left
// since leaks), the convergence times sorted, and a line in the log.
func (r *seedRun[T]) result(found []string, leaks goleak.Option) {
	res := r.res
	res.Divergences = append(r.div.all(), found...)
	var auditDiv []string
	res.Audit, auditDiv = r.aud.finish(len(res.Divergences) == 0)
	res.Divergences = append(res.Divergences, auditDiv...)
	if err := goleak.Find(leaks); err != nil {
		res.Divergences = append(res.Divergences, fmt.Sprintf("goroutines left after stop: %v", err))
	}
	for _, ds := range res.Converge {
		slices.Sort(ds)
	}
	for _, ds := range res.Overlapped {
		slices.Sort(ds)
	}
	r.t.Logf("%s seed %d (%s): %d writes, faults %v, %d handler events, %d relists, %d watch restarts, %d informer errors, converged %s, audits %s, %v",
		r.name, r.seed, res.Variant, res.Ops, res.Faults, len(r.rec.Log()), res.Relists, res.Restarts, r.reported.Load(),
		fmtConverge(res.Converge, res.Overlapped), res.Audit, time.Since(r.start).Round(time.Millisecond))
}
