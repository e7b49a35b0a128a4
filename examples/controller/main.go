// Command controller is a controller in the client-go style over etcd:
//
//	etcd ──watch──▶ informer (typed cache) ──handler: key──▶ workqueue ──▶ workers: reconcile(key)
//	                                                          ▲                      │ error
//	                                                          └── AddRateLimited ◀───┘ (backoff per key)
//
// Desired state lives under /controller/apps/<name> (an App as JSON); for
// each app the reconcile writes its observed state under
// /controller/status/<name>, outside the watched prefix, so its own writes
// do not wake it again. A deleted app has its status removed.
//
// To show retries, the reconcile of the app named by -flaky fails its first
// -fail attempts: the worker requeues it with AddRateLimited (the delay
// doubles per failure: per-item exponential backoff, under an overall token
// bucket, like client-go's default controller rate limiter) and, once it
// succeeds, calls Forget so that its next failure starts from the shortest
// delay again. After -max-retries failures a key is dropped.
//
//	go run ./examples/controller -endpoints localhost:2379 -seed
//	etcdctl put /controller/apps/web '{"image":"nginx:1.27","replicas":3}'
//	etcdctl del /controller/apps/web
//	curl localhost:8081/metrics    # dbinformer_workqueue_* and dbinformer_informer_*
//
// Ctrl-C stops it: the queue shuts down, workers finish the item in hand,
// the informer stops.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/workqueue"
	prommetrics "github.com/dbinformer/dbinformer/metrics/prometheus"
	"github.com/dbinformer/dbinformer/statuspage"
)

// App is the desired state of one application.
type App struct {
	Image    string `json:"image"`
	Replicas int    `json:"replicas"`
}

// Status is what the reconcile records for an app.
type Status struct {
	ObservedImage    string `json:"observedImage"`
	ObservedReplicas int    `json:"observedReplicas"`
	Attempts         int    `json:"attempts"`
}

const (
	appsPrefix   = "/controller/apps/"
	statusPrefix = "/controller/status/"
)

type config struct {
	syncTimeout time.Duration // 0: wait for the initial sync until Ctrl-C
	endpoints   []string
	listen      string        // "" serves no /metrics
	workers     int           // concurrent reconciles (never two for one key)
	seed        bool          // write demo apps at start
	flaky       string        // app whose reconcile fails its first fail attempts
	fail        int           // failures before the flaky app succeeds
	baseDelay   time.Duration // first retry delay; doubles per failure
	maxRetries  int           // failures after which a key is dropped
}

func main() {
	var cfg config
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	flag.StringVar(&cfg.listen, "listen", "127.0.0.1:8081", "HTTP address for /metrics; empty for none")
	flag.IntVar(&cfg.workers, "workers", 2, "reconcile workers")
	flag.BoolVar(&cfg.seed, "seed", false, "write three demo apps (web, api, worker) at start")
	flag.StringVar(&cfg.flaky, "flaky", "api", "app whose reconcile fails its first -fail attempts")
	flag.IntVar(&cfg.fail, "fail", 3, "failing attempts of the -flaky app before it succeeds")
	flag.DurationVar(&cfg.baseDelay, "base-delay", 100*time.Millisecond, "first retry delay, doubled per failure")
	flag.IntVar(&cfg.maxRetries, "max-retries", 5, "failures after which a key is dropped")
	flag.DurationVar(&cfg.syncTimeout, "sync-timeout", time.Minute, "give up when the initial sync has not finished after this long (0: never); the error says why")
	flag.Parse()
	cfg.endpoints = strings.Split(*endpoints, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(1)
	}
}

// controller holds what every reconcile needs.
type controller struct {
	apps  *core.SharedIndexInformer[App]
	queue *workqueue.Queue[string]
	cli   *clientv3.Client
	cfg   config
	out   io.Writer
	start time.Time

	mu       sync.Mutex
	attempts map[string]int // per key, since its last success
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.workers <= 0 {
		cfg.workers = 1
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	if cfg.seed {
		for name, app := range map[string]App{"web": {"nginx:1.27", 3}, "api": {"api:2.4.1", 2}, "worker": {"worker:2.4.1", 5}} {
			b, _ := json.Marshal(app)
			if _, err := cli.Put(ctx, appsPrefix+name, string(b)); err != nil {
				return fmt.Errorf("seed: %w", err)
			}
		}
	}

	reg := prometheus.NewRegistry()
	pm, err := prommetrics.New(reg, prommetrics.Options{})
	if err != nil {
		return err
	}
	lw, err := etcdinformer.NewPrefix(ctx, cli, appsPrefix, etcdinformer.Options[App]{})
	if err != nil {
		return err
	}
	page := statuspage.New(statuspage.Options{Title: "controller"})
	c := &controller{
		apps: core.NewSharedIndexInformer[App](lw, core.InformerOptions[App]{
			Name:         "apps",
			Metrics:      core.MultiMetrics(page, pm),
			ErrorHandler: func(err error) { fmt.Fprintln(out, "informer error:", err) },
		}),
		queue: workqueue.New(workqueue.Options[string]{
			Name:            "apps",
			MetricsProvider: workqueue.MultiMetrics(page, pm),
			// client-go's default controller limiter with the base delay
			// as a flag: the worse of a per-key exponential backoff and an
			// overall 10 qps bucket (burst 100).
			RateLimiter: workqueue.NewMaxOfRateLimiter(
				workqueue.NewItemExponentialFailureRateLimiter[string](cfg.baseDelay, time.Minute),
				&workqueue.BucketRateLimiter[string]{Limiter: rate.NewLimiter(10, 100)},
			),
		}),
		cli:      cli,
		cfg:      cfg,
		out:      out,
		start:    time.Now(),
		attempts: map[string]int{},
	}
	page.Add(c.apps)
	pm.TrackLag(c.apps)
	defer c.queue.ShutDown()

	// The stock handler only enqueues keys: the reconcile reads the current
	// state from the cache, so several changes to one key before a worker
	// gets to it cost one reconcile.
	if _, err := c.apps.AddEventHandlerWithOptions(workqueue.EnqueueKeys[App](c.queue), core.HandlerOptions{Name: "enqueue"}); err != nil {
		return err
	}

	if cfg.listen != "" {
		ln, err := net.Listen("tcp", cfg.listen)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.Handle("/debug/informers/", page) // status page, ?format=json, readyz, livez
		mux.Handle("GET /readyz", page.ReadyHandler())
		mux.Handle("GET /livez", page.LiveHandler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		fmt.Fprintf(out, "serving http://%s/metrics and the status page http://%s/debug/informers/\n", ln.Addr(), ln.Addr())
	}

	var wg sync.WaitGroup
	runCtx, stopInformer := context.WithCancel(ctx)
	wg.Go(func() { _ = c.apps.Run(runCtx) })
	defer func() { stopInformer(); wg.Wait() }()

	// Workers start once the cache is complete, so that a reconcile never
	// acts on a partial view (client-go's WaitForCacheSync before Run). A
	// source that keeps failing (a missing privilege, say) is retried with
	// backoff forever by the informer; the timeout turns that into an error
	// that says why. Ctrl-C during the wait is a clean stop.
	if err := core.WaitForCacheSyncTimeout(ctx, cfg.syncTimeout, c.apps); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fmt.Fprintf(out, "cache synced: %d apps; starting %d workers\n", c.apps.Indexer().Len(), cfg.workers)
	var workers sync.WaitGroup
	for range cfg.workers {
		workers.Go(func() {
			for c.processNextItem(ctx) {
			}
		})
	}

	<-ctx.Done()
	fmt.Fprintln(out, "stopping: shutting the queue down")
	c.queue.ShutDown()
	workers.Wait()
	fmt.Fprintln(out, "workers stopped")
	return nil
}

// processNextItem is client-go's worker loop body: Get, reconcile, then
// Forget on success or AddRateLimited on failure, and always Done.
func (c *controller) processNextItem(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)

	c.mu.Lock()
	c.attempts[key]++
	attempt := c.attempts[key]
	c.mu.Unlock()

	err := c.reconcile(ctx, key, attempt)
	switch {
	case err == nil:
		if retries := c.queue.NumRequeues(key); retries > 0 {
			c.queue.Forget(key)
			c.printf("reconcile %s: attempt %d succeeded after %d retries; Forget (requeues now %d)", key, attempt, retries, c.queue.NumRequeues(key))
		} else {
			c.queue.Forget(key)
		}
		c.mu.Lock()
		delete(c.attempts, key)
		c.mu.Unlock()
	case ctx.Err() != nil:
		// Stopping: the failure is the shutdown's, not the key's.
	case c.queue.NumRequeues(key) < c.cfg.maxRetries:
		delay := c.nextDelay(key)
		c.printf("reconcile %s: attempt %d failed: %v; retry %d in %v", key, attempt, err, c.queue.NumRequeues(key)+1, delay)
		c.queue.AddRateLimited(key)
	default:
		c.printf("reconcile %s: attempt %d failed: %v; dropping it after %d retries", key, attempt, err, c.queue.NumRequeues(key))
		c.queue.Forget(key)
		c.mu.Lock()
		delete(c.attempts, key)
		c.mu.Unlock()
	}
	return true
}

// nextDelay is the per-key exponential delay AddRateLimited is about to
// apply (the token bucket adds nothing below its burst), for printing.
func (c *controller) nextDelay(key string) time.Duration {
	d := c.cfg.baseDelay << c.queue.NumRequeues(key)
	return min(d, time.Minute)
}

var errBackend = errors.New("simulated backend failure")

// reconcile makes the status of key match the app in the cache.
func (c *controller) reconcile(ctx context.Context, key string, attempt int) error {
	app, ok := c.apps.Lister().Get(key)
	if !ok {
		if _, err := c.cli.Delete(ctx, statusPrefix+key); err != nil {
			return err
		}
		c.printf("reconcile %s: app deleted; removed its status", key)
		return nil
	}
	if key == c.cfg.flaky && attempt <= c.cfg.fail {
		return fmt.Errorf("%w (%d of %d)", errBackend, attempt, c.cfg.fail)
	}
	b, _ := json.Marshal(Status{ObservedImage: app.Image, ObservedReplicas: app.Replicas, Attempts: attempt})
	if _, err := c.cli.Put(ctx, statusPrefix+key, string(b)); err != nil {
		return err
	}
	c.printf("reconcile %s: image=%s replicas=%d -> status written", key, app.Image, app.Replicas)
	return nil
}

func (c *controller) printf(format string, args ...any) {
	fmt.Fprintf(c.out, "%7.3fs  "+format+"\n", append([]any{time.Since(c.start).Seconds()}, args...)...)
}
