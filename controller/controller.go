package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/workqueue"
	"github.com/dbinformer/dbinformer/leader"
)

// Options configures a Controller. The zero value of every field means its
// default.
type Options[K comparable] struct {
	// Workers is how many reconciles run at once (never two of one key);
	// 0 means 1.
	Workers int
	// RateLimiter paces the retries of failing keys; nil means
	// workqueue.DefaultControllerRateLimiter (5 ms doubling per failure to
	// 1000 s, under a 10 qps bucket with a burst of 100).
	RateLimiter workqueue.RateLimiter[K]
	// MaxRetries > 0 gives a key up (result "dropped") once it has failed
	// that many times in a row; 0 retries forever, as client-go's
	// controllers do. A change to the key enqueues it again either way.
	MaxRetries int
	// DrainTimeout is how long, once Run's context ends, reconciles in
	// flight may go on before their context is cancelled; 0 means 30 s,
	// negative means cancel at once. A lost leadership cancels them at once
	// whatever this says: a deposed leader must stop writing.
	DrainTimeout time.Duration
	// QueueMetrics receives the work queue's metrics (depth, latency, work
	// duration, retries), named after the controller.
	QueueMetrics workqueue.MetricsProvider
	// Metrics receives the reconcile metrics (results, duration, workers).
	Metrics MetricsProvider
	// ErrorHandler receives every failed reconcile (the error wraps the
	// reconcile's, naming the controller and the key), every recovered
	// panic (*PanicError) and every key given up. nil logs them with
	// Logger.
	ErrorHandler func(error)
	Logger       *slog.Logger
	// Clock drives the queue's delays, the rate limiter and resyncs.
	Clock clock.Clock
}

// Controller runs a Reconciler over the keys its watches enqueue: N
// workers over one work queue, which hands a key to one worker at a time,
// deduplicates a key enqueued again before a worker took it, and delays
// retries through the rate limiter. Create it with New, connect informers
// with Watch, and run it with Run (or add it to a Manager).
type Controller[K comparable] struct {
	name    string
	r       Reconciler[K]
	q       *workqueue.Queue[K]
	limiter workqueue.RateLimiter[K]
	opts    Options[K]
	log     *slog.Logger
	clock   clock.Clock
	metrics *metrics
	writes  writeLog[K]

	mu      sync.Mutex
	watches []watch
	running bool
}

// ErrRunning is returned by Run while another Run of the same controller
// has not returned.
var ErrRunning = errors.New("controller: already running")

// New returns a controller named name (in logs, metrics, errors) that
// reconciles with r. It does no I/O; its queue accepts keys at once, so
// watches fill it before Run (a warm standby).
func New[K comparable](name string, r Reconciler[K], opts Options[K]) *Controller[K] {
	c := &Controller[K]{
		name:    name,
		r:       r,
		opts:    opts,
		log:     opts.Logger,
		clock:   clock.Or(opts.Clock),
		metrics: newMetrics(opts.Metrics, name),
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.log = c.log.With("controller", name)
	c.limiter = opts.RateLimiter
	if c.limiter == nil {
		c.limiter = workqueue.DefaultControllerRateLimiter[K](c.clock)
	}
	c.q = workqueue.New(workqueue.Options[K]{
		Name: name, Clock: c.clock, MetricsProvider: opts.QueueMetrics, RateLimiter: c.limiter,
	})
	c.writes.init()
	return c
}

// Name is the controller's name.
func (c *Controller[K]) Name() string { return c.name }

// Enqueue adds keys to be reconciled, for events no informer reports (a
// webhook, a timer of the program's own).
func (c *Controller[K]) Enqueue(keys ...K) {
	for _, k := range keys {
		c.q.Add(k)
	}
}

// Queue is the controller's work queue, for what Enqueue does not cover
// (priorities, delays). Do not Get from it: the workers do.
func (c *Controller[K]) Queue() *workqueue.Queue[K] { return c.q }

// Run waits until every watched informer has delivered its initial list
// to the controller, runs the workers and the resyncs until ctx ends, and
// returns nil once the workers have stopped: at ctx's end it stops taking
// keys, lets reconciles in flight finish within Options.DrainTimeout (at
// once if ctx ended with leader.ErrLost as its cause) and keeps what is
// still queued for a later Run. It returns early with an error if a
// watched informer fails for good before syncing. Run may be called again
// after it returned; ShutDown ends the controller for good.
func (c *Controller[K]) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return fmt.Errorf("controller %q: %w", c.name, ErrRunning)
	}
	c.running = true
	watches := c.watches
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()
	if err := c.waitSynced(ctx, watches); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// Reconciles run on a context of their own, so that the end of ctx
	// stops the intake without cutting short what is in flight.
	work, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelWork(nil)
	var wg sync.WaitGroup
	for range max(c.opts.Workers, 1) {
		wg.Go(func() {
			// One record of writes per worker, reached through its
			// context: a reconcile that records none allocates nothing.
			ws := &writes{}
			wctx := context.WithValue(work, writesKey{}, ws)
			for {
				t, err := c.q.Take(ctx)
				if err != nil {
					return
				}
				c.process(wctx, ws, t)
			}
		})
	}
	for _, w := range watches {
		if p := w.resyncPeriod(); p > 0 {
			wg.Go(func() { c.resyncLoop(ctx, w, p) })
		}
	}
	<-ctx.Done()
	cause := context.Cause(ctx)
	drain := c.opts.DrainTimeout
	if drain == 0 {
		drain = 30 * time.Second
	}
	if drain < 0 || errors.Is(cause, leader.ErrLost) {
		cancelWork(cause)
	} else {
		t := c.clock.NewTimer(drain)
		stopped := make(chan struct{})
		var timer sync.WaitGroup
		timer.Go(func() {
			defer t.Stop()
			select {
			case <-t.C():
				cancelWork(fmt.Errorf("controller %q: reconciles still running %v after the stop: %w", c.name, drain, context.DeadlineExceeded))
			case <-stopped:
			}
		})
		defer timer.Wait()
		defer close(stopped)
	}
	wg.Wait()
	return nil
}

func (c *Controller[K]) resyncLoop(ctx context.Context, w watch, p time.Duration) {
	t := c.clock.NewTicker(p)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			w.resync()
		}
	}
}

// WaitForCacheSync waits until every watch has delivered its informer's
// initial list to the queue.
func (c *Controller[K]) WaitForCacheSync(ctx context.Context) error {
	c.mu.Lock()
	watches := c.watches
	c.mu.Unlock()
	return c.waitSynced(ctx, watches)
}

func (c *Controller[K]) waitSynced(ctx context.Context, watches []watch) error {
	for _, w := range watches {
		if err := w.waitSynced(ctx); err != nil {
			return fmt.Errorf("controller %q: %w", c.name, err)
		}
	}
	return nil
}

// ShutDown removes the controller's handlers from its informers and shuts
// its queue down. Call it after the last Run returned.
func (c *Controller[K]) ShutDown() {
	c.mu.Lock()
	watches := c.watches
	c.watches = nil
	c.mu.Unlock()
	for _, w := range watches {
		w.remove()
	}
	c.q.ShutDown()
}

// process reconciles one key and decides its future: forgotten on
// success, delayed by the rate limiter on failure, given up after
// MaxRetries, requeued plainly when the failure was the stop's.
func (c *Controller[K]) process(ctx context.Context, ws *writes, t workqueue.Taken[K]) {
	defer t.Done()
	key := t.Item
	var start time.Time
	if c.metrics != nil {
		c.metrics.active.Inc()
		start = c.clock.Now()
	}
	res, err := c.call(ctx, ws, key)
	result := ResultSuccess
	switch {
	case err == nil:
		c.q.Forget(key)
		if res.RequeueAfter > 0 {
			result = ResultRequeue
			c.q.AddAfter(key, res.RequeueAfter)
		}
	case errors.Is(err, ErrTerminal):
		result = ResultTerminal
		c.q.Forget(key)
		c.report(fmt.Errorf("controller %q: reconcile %v: %w (not retried)", c.name, key, err))
	case ctx.Err() != nil:
		// The failure is the stop's (or the lost leadership's), not the
		// key's: keep it for the next run without counting a retry.
		result = ResultError
		c.q.Add(key)
	default:
		var perr *PanicError
		if errors.As(err, &perr) {
			result = ResultPanic
		} else {
			result = ResultError
			err = fmt.Errorf("controller %q: reconcile %v: %w", c.name, key, err)
		}
		if n := c.q.NumRequeues(key); c.opts.MaxRetries > 0 && n >= c.opts.MaxRetries {
			if result == ResultError {
				result = ResultDropped
			}
			c.q.Forget(key)
			c.report(fmt.Errorf("%w; giving the key up after %d retries", err, n))
			break
		}
		d := c.limiter.When(key)
		c.q.AddAfter(key, d)
		c.report(&RetryError{Err: err, Retry: c.q.NumRequeues(key), After: d})
	}
	if m := c.metrics; m != nil {
		m.duration.Observe(c.clock.Since(start).Seconds())
		m.results[result].Inc()
		m.active.Dec()
	}
}

// RetryError is what ErrorHandler receives for a failure that will be
// retried: the reconcile's error, which retry this is and its delay.
type RetryError struct {
	Err   error
	Retry int
	After time.Duration
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("%v; retry %d in %v", e.Err, e.Retry, e.After)
}

func (e *RetryError) Unwrap() error { return e.Err }

// call runs the reconcile, turning a panic into a *PanicError.
func (c *Controller[K]) call(ctx context.Context, ws *writes, key K) (res Result, err error) {
	c.writes.begin(ws, key)
	defer func() {
		c.writes.end(ws, key)
		if v := recover(); v != nil {
			err = &PanicError{Controller: c.name, Key: fmt.Sprint(key), Value: v, Stack: debug.Stack()}
		}
	}()
	return c.r.Reconcile(ctx, key)
}

func (c *Controller[K]) report(err error) {
	if c.opts.ErrorHandler != nil {
		c.opts.ErrorHandler(err)
		return
	}
	c.log.Error("reconcile failed", "err", err)
}
