package reliability

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/workqueue"
)

// Obj is the value every adapter stores: its key and the version the
// workload gave it.
type Obj struct {
	K string `json:"k" db:"k"`
	V int64  `json:"v" db:"v"`
}

// Fault is a kind of fault.
type Fault string

// The fault kinds. An adapter supports a subset of Cut, Restart and Expire;
// Requeue (a handler that fails and is retried by a rate-limited WorkQueue)
// runs in every run.
const (
	Cut     Fault = "cut"     // every connection between informer and server cut (proxy)
	Pause   Fault = "pause"   // connections cut and refused while the workload writes (proxy)
	Restart Fault = "restart" // server killed and restarted with its data
	Expire  Fault = "expire"  // the informer's position made unusable (compaction, slot drop, purge)
	Requeue Fault = "requeue" // a handler failed and its key was requeued
	Panic   Fault = "panic"   // a handler panicked (recovered and reported by the informer)
)

// Adapter drives one source for the runner. Writes and ground-truth reads
// go to the server directly; the informer's ListerWatcher goes through a
// proxy so that faults can cut it off.
type Adapter[T any] interface {
	// Name is the subtest name: etcd, postgres, nats, kube.
	Name() string
	// Start starts the server and the clients; rnd may pick a variant
	// (e.g. a permanent or temporary Postgres slot), described by the
	// returned string.
	Start(t testing.TB, rnd *rand.Rand) (variant string)
	// ListerWatcher is the informer's source, connected through the proxy.
	ListerWatcher() core.ListerWatcher[T]
	Put(ctx context.Context, key string, ver int64) error
	Delete(ctx context.Context, key string) error
	// Truth reads the source directly: key -> version.
	Truth(ctx context.Context) (map[string]int64, error)
	// Head is the source's current version, read directly.
	Head(ctx context.Context) (core.ResourceVersion, error)
	Version(obj T) int64
	// Faults lists the kinds Inject supports.
	Faults() []Fault
	// Inject starts fault f. The runner writes while the fault lasts if
	// writable, then calls end (which may be nil).
	Inject(t testing.TB, ctx context.Context, f Fault) (end func(), writable bool)
	// Heal ends any outage (proxy resumed, server running).
	Heal(t testing.TB)
	// Stop closes clients, proxy and server.
	Stop(t testing.TB)
}

// Config sizes a run. The zero value of each field means its default.
type Config struct {
	Keys          int           // key space; default 16
	Ops           int           // writes; default 60
	FaultsPerKind int           // faults of each kind the adapter supports; default 1
	FailRate      float64       // chance that the WorkQueue handler fails; default 0.3
	MaxPause      time.Duration // longest pause between writes; default 20ms
	Settle        time.Duration // deadline for convergence after the workload; default 3m
}

func (c Config) withDefaults() Config {
	if c.Keys <= 0 {
		c.Keys = 16
	}
	if c.Ops <= 0 {
		c.Ops = 60
	}
	if c.FaultsPerKind <= 0 {
		c.FaultsPerKind = 1
	}
	if c.FailRate <= 0 {
		c.FailRate = 0.3
	}
	if c.MaxPause <= 0 {
		c.MaxPause = 20 * time.Millisecond
	}
	if c.Settle <= 0 {
		c.Settle = 3 * time.Minute
	}
	return c
}

// Result is what one run did and found.
type Result struct {
	Adapter     string
	Variant     string
	Seed        uint64
	Config      Config // as run, defaults filled in
	Ops         int
	Faults      map[Fault]int
	Relists     int      // successful relists after the first list
	Restarts    int      // watches that ended with an error (expired included)
	Divergences []string // empty when the run passed
	Elapsed     time.Duration
}

// Failure describes a divergent run with the command that replays it.
func (r Result) Failure() string {
	return fmt.Sprintf("%s seed %d (%s): %d divergence(s):\n  %s\nreplay: %s",
		r.Adapter, r.Seed, r.Variant, len(r.Divergences), strings.Join(r.Divergences, "\n  "), r.Replay())
}

// Replay is the command that runs this seed again.
func (r Result) Replay() string {
	return fmt.Sprintf("go test ./integration/reliability -run 'TestReliability/%s$' -seed %d -ops %d -faults %d -v",
		r.Adapter, r.Seed, r.Config.Ops, r.Config.FaultsPerKind)
}

// Run runs one seed against a and returns what it did and found; it fails
// t only when the run itself cannot proceed (a server that does not start,
// a write failing for a minute). The caller reports res.Divergences, with
// Failure for the message.
func Run[T any](t testing.TB, a Adapter[T], seed uint64, cfg Config) (res Result) {
	cfg = cfg.withDefaults()
	leaks := goleak.IgnoreCurrent()
	start := time.Now()
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	res = Result{Adapter: a.Name(), Seed: seed, Config: cfg, Faults: map[Fault]int{}}
	diverge := func(format string, args ...any) {
		res.Divergences = append(res.Divergences, fmt.Sprintf(format, args...))
	}
	defer func() { res.Elapsed = time.Since(start) }()

	res.Variant = a.Start(t, rnd)
	stopped := false
	defer func() {
		if !stopped {
			a.Stop(t)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), cfg.Settle+5*time.Minute)
	defer cancel()

	var listErrs atomic.Int64
	met := &metrics{}
	inf := core.NewSharedIndexInformer[T](a.ListerWatcher(), core.InformerOptions[T]{
		Name: "reliability " + a.Name(),
		// Faults make errors by the dozen; they are expected. What counts
		// is convergence, checked below.
		ErrorHandler: func(err error) {
			listErrs.Add(1)
			t.Logf("%s informer: %v", time.Now().Format("15:04:05.000"), err)
		},
		Backoff:         core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
		MinWatchTimeout: 30 * time.Second,
		Metrics:         met,
	})

	hist := NewHistory()
	queue := workqueue.New(workqueue.Config[string]{
		Name:        "reliability",
		RateLimiter: workqueue.NewItemExponentialFailureRateLimiter[string](time.Millisecond, 50*time.Millisecond),
	})
	enqueue := func(key string) { queue.Add(key) }
	if _, err := inf.AddEventHandler(core.ResourceEventHandlerFuncs[T]{
		AddFunc:    func(key string, obj T, _ bool) { hist.Saw(key, a.Version(obj)); enqueue(key) },
		UpdateFunc: func(key string, _, obj T) { hist.Saw(key, a.Version(obj)); enqueue(key) },
		DeleteFunc: func(key string, obj T, _ bool) { hist.Deleted(key, a.Version(obj)); enqueue(key) },
	}); err != nil {
		t.Fatalf("add handler: %v", err)
	}

	// A handler that records what it saw and then panics on about one
	// event in eight: the informer must recover, report it, and keep
	// feeding this handler and the others.
	panicky := NewHistory()
	boom := func(key string, ver int64) {
		if (uint64(ver)*0x9e3779b97f4a7c15+uint64(len(key)))%8 == 0 {
			panic(fmt.Sprintf("reliability: planned panic at %s version %d", key, ver))
		}
	}
	if _, err := inf.AddEventHandlerWithOptions(core.ResourceEventHandlerFuncs[T]{
		AddFunc: func(key string, obj T, _ bool) { v := a.Version(obj); panicky.Saw(key, v); boom(key, v) },
		UpdateFunc: func(key string, _, obj T) {
			v := a.Version(obj)
			panicky.Saw(key, v)
			boom(key, v)
		},
		DeleteFunc: func(key string, obj T, _ bool) { v := a.Version(obj); panicky.Deleted(key, v); boom(key, v) },
	}, core.HandlerOptions{Name: "panicky"}); err != nil {
		t.Fatalf("add handler: %v", err)
	}

	// The controller: reconciles a key from the cache, failing at random;
	// a failed key is requeued with per-item exponential backoff.
	var (
		recMu      sync.Mutex
		reconciled = map[string]int64{}
		failRnd    = rand.New(rand.NewPCG(seed^0x5bd1e995, seed))
		requeues   atomic.Int64
		workers    sync.WaitGroup
	)
	for range 2 {
		workers.Add(1)
		go func() {
			defer workers.Done()
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
					reconciled[key] = a.Version(obj)
				} else {
					delete(reconciled, key)
				}
				recMu.Unlock()
				queue.Forget(key)
				queue.Done(key)
			}
		}()
	}

	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = inf.Run(runCtx) }()
	shutdown := func() {
		stopRun()
		<-runDone
		queue.ShutDown()
		workers.Wait()
	}
	defer func() {
		if !stopped {
			shutdown()
		}
	}()

	syncCtx, syncCancel := context.WithTimeout(ctx, cfg.Settle)
	err := inf.WaitForCacheSync(syncCtx)
	syncCancel()
	if err != nil {
		diverge("initial sync: %v", err)
		return res
	}

	// Plan: which op each fault precedes. Decided by the seed alone.
	kinds := a.Faults()
	plan := map[int][]Fault{}
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
		retry(t, ctx, fmt.Sprintf("write %s", key), func(ctx context.Context) error {
			if del {
				return a.Delete(ctx, key)
			}
			return a.Put(ctx, key, v)
		})
		res.Ops++
		if p := cfg.MaxPause; p > 0 {
			time.Sleep(time.Duration(rnd.Int64N(int64(p))))
		}
	}
	for i := range cfg.Ops {
		for _, f := range plan[i] {
			t.Logf("%s before write %d: %s (applied %d)", time.Now().Format("15:04:05.000"), i, f, inf.AppliedVersion())
			end, writable := a.Inject(t, ctx, f)
			res.Faults[f]++
			if writable {
				for range rnd.IntN(6) {
					write()
				}
			}
			if end != nil {
				end()
			}
		}
		write()
	}
	a.Heal(t)

	// Settle: the cache reaches the head, then equals the source.
	var head core.ResourceVersion
	retry(t, ctx, "read head", func(ctx context.Context) error {
		var err error
		head, err = a.Head(ctx)
		return err
	})
	var truth map[string]int64
	retry(t, ctx, "read source", func(ctx context.Context) error {
		var err error
		truth, err = a.Truth(ctx)
		return err
	})
	settle, settleCancel := context.WithTimeout(ctx, cfg.Settle)
	defer settleCancel()
	if err := inf.WaitFor(settle, head); err != nil {
		diverge("WaitFor(head %d): %v (applied %d, list errors %d)", head, err, inf.AppliedVersion(), listErrs.Load())
	}
	cache := map[string]int64{}
	inf.Indexer().Range(func(key string, obj T) bool {
		cache[key] = a.Version(obj)
		return true
	})
	for _, d := range Diff("cache", cache, truth) {
		diverge("%s", d)
	}
	if len(res.Divergences) > 0 {
		// The handlers will not fix what the cache got wrong: do not wait
		// the whole deadline for them.
		var cancel context.CancelFunc
		settle, cancel = context.WithTimeout(settle, 2*time.Second)
		defer cancel()
	}
	if !waitUntil(settle, func() bool { return hist.Diff(truth) == nil }) {
		for _, d := range hist.Diff(truth) {
			diverge("%s", d)
		}
	}
	if !waitUntil(settle, func() bool { return panicky.Diff(truth) == nil }) {
		for _, d := range panicky.Diff(truth) {
			diverge("panicking %s", d)
		}
	}
	for _, v := range panicky.Violations() {
		diverge("panicking handler: %s", v)
	}
	recDiff := func() []string {
		recMu.Lock()
		defer recMu.Unlock()
		return Diff("reconciler", reconciled, truth)
	}
	if !waitUntil(settle, func() bool { return recDiff() == nil && queue.Len() == 0 }) {
		for _, d := range recDiff() {
			diverge("%s", d)
		}
	}
	for _, v := range hist.Violations() {
		diverge("%s", v)
	}
	res.Faults[Requeue] = int(requeues.Load())
	res.Relists, res.Restarts = int(met.relists.Load()), int(met.restarts.Load())
	res.Faults[Panic] = int(met.panics.Load())

	stopped = true
	shutdown()
	a.Stop(t)
	if err := goleak.Find(leaks); err != nil {
		diverge("goroutines left after stop: %v", err)
	}
	t.Logf("%s seed %d (%s): %d writes, faults %v, %d handler events, %d relists, %d watch restarts, %d informer errors, %v",
		a.Name(), seed, res.Variant, res.Ops, res.Faults, hist.Events(), res.Relists, res.Restarts, listErrs.Load(), time.Since(start).Round(time.Millisecond))
	return res
}

// retry calls f until it succeeds; a write may fail while a fault lasts
// (the direct connection broken by a restart). It gives up after a minute.
func retry(t testing.TB, ctx context.Context, what string, f func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var err error
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = f(cctx)
		cancel()
		if err == nil || errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: still failing after a minute: %v", what, err)
}

// waitUntil polls cond until it holds or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// sortedFaults returns the fault kinds in a fixed order for reports.
func sortedFaults(m map[Fault]int) []Fault {
	out := make([]Fault, 0, len(m))
	for f := range m {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

// metrics counts what the faults made the informer do, so that the report
// shows they bit.
type metrics struct {
	core.NoopMetrics
	relists, restarts, panics atomic.Int64
}

func (m *metrics) HandlerPanicked(string) { m.panics.Add(1) }

func (m *metrics) InformerMetrics(string) core.InformerMetrics { return m }

func (m *metrics) Listed(relist bool, _ int, err error) {
	if relist && err == nil {
		m.relists.Add(1)
	}
}

func (m *metrics) WatchRestarted(reason error) {
	if reason != nil {
		m.restarts.Add(1)
	}
}
