// Command controller reconciles the apps kept in etcd under /controller/apps/
// into statuses under /controller/status/, with package controller. See README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/workqueue"
)

type App struct {
	Image    string `json:"image"`
	Replicas int    `json:"replicas"`
}

const appsPrefix, statusPrefix = "/controller/apps/", "/controller/status/"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	listen := fs.String("listen", "127.0.0.1:8081", "HTTP address for /metrics, /healthz, /readyz; empty for none")
	workers := fs.Int("workers", 2, "reconcile workers")
	seed := fs.Bool("seed", false, "write three demo apps (web, api, worker) at start")
	flaky := fs.String("flaky", "api", "app whose reconcile fails its first -fail attempts")
	fail := fs.Int("fail", 3, "failing attempts of the -flaky app")
	baseDelay := fs.Duration("base-delay", 100*time.Millisecond, "first retry delay, doubled per failure")
	maxRetries := fs.Int("max-retries", 5, "failures after which a key is given up")
	syncTimeout := fs.Duration("sync-timeout", time.Minute, "give up if the initial sync takes longer (0: never)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	if *seed {
		if _, err := cli.Txn(ctx).Then(clientv3.OpPut(appsPrefix+"web", `{"image":"nginx:1.27","replicas":3}`), clientv3.OpPut(appsPrefix+"api",
			`{"image":"api:2.4.1","replicas":2}`), clientv3.OpPut(appsPrefix+"worker", `{"image":"worker:2.4.1","replicas":5}`)).Commit(); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	mgr := controller.NewManager(controller.ManagerOptions{Name: "controller", Addr: *listen, SyncTimeout: *syncTimeout,
		Logger: slog.New(slog.NewTextHandler(out, nil))})
	lw, err := etcdinformer.NewPrefix(ctx, cli, appsPrefix, etcdinformer.Options[App]{})
	if err != nil {
		return err
	}
	apps := controller.Informer(mgr, "apps", lw, core.InformerOptions[App]{})
	var c *controller.Controller[string]
	c, err = controller.For(mgr, apps, controller.Func[string](func(ctx context.Context, key string) (controller.Result, error) {
		app, ok := apps.Lister().Get(key)
		attempt := c.Queue().NumRequeues(key) + 1
		if !ok {
			_, err := cli.Delete(ctx, statusPrefix+key)
			fmt.Fprintf(out, "reconcile %s: app deleted; removed its status\n", key)
			return controller.Result{}, err
		} else if key == *flaky && attempt <= *fail {
			return controller.Result{}, fmt.Errorf("simulated backend failure (%d of %d)", attempt, *fail)
		}
		b, _ := json.Marshal(map[string]any{"observedImage": app.Image, "observedReplicas": app.Replicas, "attempts": attempt})
		_, err := cli.Put(ctx, statusPrefix+key, string(b))
		fmt.Fprintf(out, "reconcile %s: image=%s replicas=%d -> status written (attempt %d)\n", key, app.Image, app.Replicas, attempt)
		return controller.Result{}, err
	}), controller.Options[string]{Workers: *workers, MaxRetries: *maxRetries, ErrorHandler: func(err error) { fmt.Fprintln(out, err) },
		RateLimiter: workqueue.NewMaxOfRateLimiter(workqueue.NewItemExponentialFailureRateLimiter[string](*baseDelay, time.Minute),
			&workqueue.BucketRateLimiter[string]{Limiter: rate.NewLimiter(10, 100)})}) // client-go's default, with -base-delay
	if err != nil {
		return err
	}
	defer fmt.Fprintln(out, "stopped")
	return mgr.Run(ctx)
}
