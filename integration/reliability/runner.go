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
	div := &divergences{scope: sc}
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

	var reported atomic.Int64
	met := &metrics{}
	aud := newAuditor(t, start)
	var audit *core.AuditOptions[T]
	if cfg.AuditPeriod > 0 {
		audit = auditOptions[T](aud, cfg.AuditPeriod)
	}
	inf := core.NewSharedIndexInformer[T](h.ListerWatcher(), core.InformerOptions[T]{
		Name: "reliability " + name,
		// Faults make errors by the dozen; they are expected. What counts
		// is convergence, checked below.
		ErrorHandler: func(err error) {
			reported.Add(1)
			t.Logf("%s informer: %v", time.Now().Format("15:04:05.000"), err)
		},
		Backoff:         core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
		MinWatchTimeout: 30 * time.Second,
		Metrics:         met,
		Audit:           audit,
		Logger:          TestLogger(t),
	})

	queue := workqueue.New(workqueue.Options[string]{
		Name:        "reliability",
		RateLimiter: workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, 50*time.Millisecond),
	})
	rec := informertest.NewRecorder(div, h.Version)
	if _, err := inf.AddEventHandler(enqueuing[T]{rec, queue}); err != nil {
		t.Fatalf("add handler: %v", err)
	}

	// A handler that records what it saw and then panics on about one
	// event in eight: the informer must recover, report it, and keep
	// feeding this handler and the others.
	panicky := informertest.NewRecorder(&prefixed{div, "panicking handler: "}, h.Version)
	if _, err := inf.AddEventHandlerWithOptions(panicking[T]{panicky, h.Version}, core.HandlerOptions{Name: "panicky"}); err != nil {
		t.Fatalf("add handler: %v", err)
	}

	// The controller: reconciles a key from the cache, failing at random;
	// a failed key is requeued with per-item exponential backoff. The
	// versions it reads must never go back either: the cache does not
	// travel in time.
	var (
		recMu      sync.Mutex
		reconciled = map[string]int64{}
		highest    = map[string]int64{}
		failRnd    = rand.New(rand.NewPCG(seed^0x5bd1e995, seed))
		requeues   atomic.Int64
		workers    sync.WaitGroup
	)
	for range 2 {
		workers.Go(func() {
			for {
				key, shutdown := queue.Get()
				if shutdown {
					return
				}
				recMu.Lock()
				fail := failRnd.Float64() < cfg.FailRate
				recMu.Unlock()
				if fail {
					requeues.Add(1)
					queue.AddRateLimited(key)
					queue.Done(key)
					continue
				}
				obj, ok := inf.Lister().Get(key)
				recMu.Lock()
				if ok {
					v := h.Version(obj)
					if v < highest[key] {
						div.add(fmt.Sprintf("reconciler read %q at version %d after version %d", key, v, highest[key]))
					}
					highest[key] = max(highest[key], v)
					reconciled[key] = v
				} else {
					delete(reconciled, key)
				}
				recMu.Unlock()
				queue.Forget(key)
				queue.Done(key)
			}
		})
	}

	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = inf.Run(runCtx) }()
	var measuring sync.WaitGroup // convergence timers
	shutdown := func() {
		stopRun()
		<-runDone
		measuring.Wait()
		queue.ShutDown()
		workers.Wait()
	}
	stopped := false
	defer func() {
		if !stopped {
			shutdown()
		}
	}()

	syncCtx, syncCancel := context.WithTimeout(ctx, cfg.Settle)
	err := inf.WaitForCacheSync(syncCtx)
	syncCancel()
	if err != nil {
		res.Divergences = append(res.Divergences, fmt.Sprintf("initial sync: %v", err))
		return res
	}

	// Plan: which op each fault precedes. Decided by the seed alone.
	kinds := h.Faults()
	plan := map[int][]conformance.Fault{}
	for _, k := range kinds {
		for range cfg.FaultsPerKind {
			at := rnd.IntN(cfg.Ops)
			plan[at] = append(plan[at], k)
		}
	}

	var ver int64
	write := func() {
		ver++
		key := fmt.Sprintf("k%02d", rnd.IntN(cfg.Keys))
		del := rnd.IntN(4) == 0
		v := ver
		Retry(t, ctx, fmt.Sprintf("write %s", key), func(ctx context.Context) error {
			var err error
			if del {
				_, err = h.Delete(ctx, key)
			} else {
				_, err = h.Put(ctx, key, v)
			}
			return err
		})
		res.Ops++
		if p := cfg.MaxPause; p > 0 {
			time.Sleep(time.Duration(rnd.Int64N(int64(p))))
		}
	}
	var convMu sync.Mutex
	var injected atomic.Int64 // faults injected so far
	converged := func(f conformance.Fault, span *faultSpan) {
		healed := time.Now()
		epoch := injected.Load()
		var head core.ResourceVersion
		// Each attempt bounded to a second: the harness's own connection
		// may have lost the request in the fault (a NATS restart), and
		// waiting out its client's 5s timeout would be counted as the
		// informer's time.
		retryEach(t, ctx, "read head", time.Second, func(ctx context.Context) error {
			var err error
			head, err = h.Head(ctx)
			return err
		})
		measuring.Go(func() {
			if err := inf.WaitFor(runCtx, head); err != nil {
				return // the run ended first; the final checks report it
			}
			d := time.Since(healed)
			aud.caughtUp(span)
			overlapped := injected.Load() != epoch
			convMu.Lock()
			if overlapped {
				res.Overlapped[f] = append(res.Overlapped[f], d)
			} else {
				res.Converge[f] = append(res.Converge[f], d)
			}
			convMu.Unlock()
		})
	}
	for i := range cfg.Ops {
		for _, f := range plan[i] {
			t.Logf("%s before write %d: %s (applied %d)", time.Now().Format("15:04:05.000"), i, f, inf.AppliedVersion())
			injected.Add(1)
			span := aud.injected(f)
			end, writable := h.Inject(sc, ctx, f)
			res.Faults[f]++
			if writable {
				for range rnd.IntN(6) {
					write()
				}
			}
			if end != nil {
				end()
			}
			converged(f, span)
		}
		write()
	}
	h.Heal(sc)

	// Settle: the cache reaches the head, then equals the source.
	var head core.ResourceVersion
	Retry(t, ctx, "read head", func(ctx context.Context) error {
		var err error
		head, err = h.Head(ctx)
		return err
	})
	var truth map[string]int64
	Retry(t, ctx, "read source", func(ctx context.Context) error {
		var err error
		truth, err = h.Truth(ctx)
		return err
	})
	if km, ok := hh.(conformance.KeyMapper); ok {
		// Truth has the keys given to Put; the cache and the handlers
		// have the keys the ListerWatcher reports.
		mapped := make(map[string]int64, len(truth))
		for k, v := range truth {
			mapped[km.EventKey(k)] = v
		}
		truth = mapped
	}
	settle, settleCancel := context.WithTimeout(ctx, cfg.Settle)
	defer settleCancel()
	var found []string
	diverge := func(format string, args ...any) { found = append(found, fmt.Sprintf(format, args...)) }
	if err := inf.WaitFor(settle, head); err != nil {
		diverge("WaitFor(head %d): %v (applied %d, informer errors %d)", head, err, inf.AppliedVersion(), reported.Load())
	}
	cache := map[string]int64{}
	inf.Indexer().Range(func(key string, obj T) bool {
		cache[key] = h.Version(obj)
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
	for _, r := range []struct {
		what string
		rec  *informertest.Recorder[T]
	}{{"handler", rec}, {"panicking handler", panicky}} {
		if !waitUntil(settle, func() bool { return informertest.Diff(r.what, r.rec.State(), truth) == nil }) {
			for _, d := range informertest.Diff(r.what, r.rec.State(), truth) {
				diverge("%s", d)
			}
		}
	}
	recDiff := func() []string {
		recMu.Lock()
		defer recMu.Unlock()
		return informertest.Diff("reconciler", reconciled, truth)
	}
	if !waitUntil(settle, func() bool { return recDiff() == nil && queue.Len() == 0 }) {
		for _, d := range recDiff() {
			diverge("%s", d)
		}
	}
	// One audit more, with every fault healed and the cache checked: it
	// must find the cache equal (every run audits at least once, however
	// short).
	if audit != nil {
		auditCtx, cancel := context.WithTimeout(ctx, time.Minute)
		inf.AuditNow(auditCtx)
		cancel()
	}
	aud.stop()
	res.Faults[Requeue] = int(requeues.Load())
	res.Relists, res.Restarts = int(met.relists.Load()), int(met.restarts.Load())
	res.Faults[Panic] = int(met.panics.Load())

	stopped = true
	shutdown()
	closed = true
	sc.close()
	res.Divergences = append(div.all(), found...)
	var auditDiv []string
	res.Audit, auditDiv = aud.finish(len(res.Divergences) == 0)
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
	t.Logf("%s seed %d (%s): %d writes, faults %v, %d handler events, %d relists, %d watch restarts, %d informer errors, converged %s, audits %s, %v",
		name, seed, res.Variant, res.Ops, res.Faults, len(rec.Log()), res.Relists, res.Restarts, reported.Load(),
		fmtConverge(res.Converge, res.Overlapped), res.Audit, time.Since(start).Round(time.Millisecond))
	return res
}
