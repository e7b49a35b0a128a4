// Command etcd keeps a typed, indexed cache of a service registry stored in
// etcd (one JSON value per key under a prefix) and serves it read-only as
// JSON next to Prometheus metrics:
//
//	go run ./examples/etcd -endpoints localhost:2379 -seed 500
//
//	curl localhost:8080/services             # every service
//	curl localhost:8080/services/svc-0042    # one service
//	curl 'localhost:8080/services?team=payments'  # a team's services, from an index
//	curl localhost:8080/metrics              # informer metrics, lag included
//
//	etcdctl put /dbinformer-example/services/billing '{"name":"billing","team":"payments","endpoint":"10.0.0.9:443","healthy":true}'
//
// -seed writes demo services when the prefix is empty. Changes made with
// etcdctl appear in the cache (and are printed) as they happen. Ctrl-C
// stops it cleanly.
//
// # Server setup
//
// Any etcd v3 server. With authentication on, the user needs read access
// to the prefix (and write access for -seed); pass -user and the password
// in $ETCD_PASSWORD:
//
//	etcdctl role add services-reader
//	etcdctl role grant-permission services-reader --prefix=true read /dbinformer-example/services/
//	etcdctl user add services-sync
//	etcdctl user grant-role services-sync services-reader
//
// Keep enough history (--auto-compaction-retention) for a watch to resume
// after the outages you expect; a compacted revision costs a relist, and
// dbinformer_informer_lists_total{kind="relist"} counts them.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	prommetrics "github.com/dbinformer/dbinformer/metrics/prometheus"
	"github.com/dbinformer/dbinformer/statuspage"
)

// Service is the typed value stored (as JSON) under each key.
type Service struct {
	Name     string `json:"name"`
	Team     string `json:"team"`
	Endpoint string `json:"endpoint"`
	Healthy  bool   `json:"healthy"`
}

type config struct {
	syncTimeout time.Duration // 0: wait for the initial sync until Ctrl-C
	endpoints   []string
	user        string
	password    string // never printed
	prefix      string
	listen      string
	seed        int // demo services written when the prefix is empty
}

func main() {
	var cfg config
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	flag.StringVar(&cfg.user, "user", "", "etcd user (password in $ETCD_PASSWORD)")
	flag.StringVar(&cfg.prefix, "prefix", "/dbinformer-example/services/", "key prefix to sync")
	flag.StringVar(&cfg.listen, "listen", "127.0.0.1:8080", "HTTP address for /metrics and the JSON view")
	flag.IntVar(&cfg.seed, "seed", 0, "write this many demo services if the prefix is empty")
	flag.DurationVar(&cfg.syncTimeout, "sync-timeout", time.Minute, "give up when the initial sync has not finished after this long (0: never); the error says why")
	flag.Parse()
	cfg.endpoints = strings.Split(*endpoints, ",")
	cfg.password = os.Getenv("ETCD_PASSWORD")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
}

// run syncs and serves until ctx is done, then stops everything it started
// and returns nil after a clean stop.
// It is long on purpose and stays whole: an example is read in order, top
// to bottom, so its steps are not cut into functions.
func run(ctx context.Context, cfg config, out io.Writer) error {
	// TLS goes into this config too; the Prefix uses the client as it is
	// and never closes it. The keepalives make the client notice a member
	// that stops answering (frozen, or a half-open connection) within
	// seconds and move to another endpoint; etcd refuses pings more
	// frequent than its --grpc-keepalive-min-time (5s by default).
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: cfg.endpoints, DialTimeout: 10 * time.Second,
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 3 * time.Second,
		Username: cfg.user, Password: cfg.password,
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	if cfg.seed > 0 {
		if err := seed(ctx, cli, cfg); err != nil {
			return err
		}
	}

	lw, err := etcdinformer.NewPrefix(ctx, cli, cfg.prefix, etcdinformer.Options[Service]{})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	pm, err := prommetrics.New(reg, prommetrics.Options{})
	if err != nil {
		return err
	}
	page := statuspage.New(statuspage.Options{Title: "etcd example"})
	services := core.NewSharedIndexInformer[Service](lw, core.InformerOptions[Service]{
		Name: "services",
		Indexers: core.Indexers[Service]{
			"team": func(s Service) ([]string, error) { return []string{s.Team}, nil },
		},
		Metrics:      core.MultiMetrics(page, pm),
		ErrorHandler: func(err error) { fmt.Fprintln(out, "error:", err) },
	})
	page.Add(services) // name, kind, head, checkpoints: from the informer
	pm.TrackLag(services)
	if _, err := services.AddEventHandlerWithOptions(core.ResourceEventHandlerFuncs[Service]{
		AddFunc: func(key string, s Service, initial bool) {
			if !initial {
				fmt.Fprintf(out, "added %s: %+v\n", key, s)
			}
		},
		UpdateFunc: func(key string, old, s Service) { fmt.Fprintf(out, "updated %s: %+v\n", key, s) },
		DeleteFunc: func(key string, last Service, _ bool) { fmt.Fprintf(out, "deleted %s (team %s)\n", key, last.Team) },
	}, core.HandlerOptions{Name: "printer"}); err != nil {
		return err
	}

	// Serve before the sync, so that the status page shows its progress
	// (the data endpoints answer from a cache that may still be filling).
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: routes(reg, page, services), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer srv.Close() // an early return (a failed sync, Ctrl-C) stops serving too
	fmt.Fprintf(out, "status page: http://%s/debug/informers/\n", ln.Addr())
	runCtx, stopInformer := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = services.Run(runCtx) })
	defer func() { stopInformer(); wg.Wait() }()

	start := time.Now()
	fmt.Fprintf(out, "listing %q on %s\n", lw.Prefix(), strings.Join(cfg.endpoints, ","))
	// A source that keeps failing (a missing privilege, say) is retried
	// with backoff forever by the informer; the timeout turns that into an
	// error that says why: the last list error.
	printCtx, stopPrinting := context.WithCancel(ctx)
	printed := make(chan struct{})
	go func() { defer close(printed); _ = page.PrintProgress(printCtx, out, time.Second) }()
	err = core.WaitForCacheSyncTimeout(ctx, cfg.syncTimeout, services)
	stopPrinting()
	<-printed
	if err != nil {
		if ctx.Err() != nil {
			return nil // Ctrl-C during the wait: a clean stop
		}
		return err
	}
	fmt.Fprintf(out, "synced %d services at revision %d in %v\n",
		services.Indexer().Len(), services.LastSyncResourceVersion(), time.Since(start).Round(time.Millisecond))

	fmt.Fprintf(out, "serving http://%s (/services, /services/{name}, /services?team={team}, /metrics, /debug/informers/); Ctrl-C stops\n", ln.Addr())

	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	fmt.Fprintln(out, "stopping")
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return err
	}
	<-served
	return nil
}

func routes(reg *prometheus.Registry, page *statuspage.Page, services *core.SharedIndexInformer[Service]) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/debug/informers/", page) // status page, ?format=json, readyz, livez
	mux.Handle("GET /readyz", page.ReadyHandler())
	mux.Handle("GET /livez", page.LiveHandler())
	mux.HandleFunc("GET /services", func(w http.ResponseWriter, r *http.Request) {
		var list []Service
		if team := r.URL.Query().Get("team"); team != "" {
			var err error
			if list, err = services.Lister().ByIndex("team", team); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		} else {
			list = services.Lister().List(nil)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
		writeJSON(w, list)
	})
	// The object key is the etcd key below the prefix; {name...} keeps
	// slashes of deeper keys.
	mux.HandleFunc("GET /services/{name...}", func(w http.ResponseWriter, r *http.Request) {
		if s, ok := services.Lister().Get(r.PathValue("name")); ok {
			writeJSON(w, s)
			return
		}
		http.NotFound(w, r)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// seed writes demo services in one transaction that only succeeds while the
// prefix is empty, so running with -seed twice does not duplicate anything.
func seed(ctx context.Context, cli *clientv3.Client, cfg config) error {
	prefix := cfg.prefix
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	teams := []string{"payments", "search", "identity", "storage"}
	var ops []clientv3.Op
	for i := 0; i < cfg.seed; i++ {
		s := Service{
			Name:     fmt.Sprintf("svc-%04d", i),
			Team:     teams[i%len(teams)],
			Endpoint: fmt.Sprintf("10.0.%d.%d:8443", i/250, i%250+1),
			Healthy:  i%10 != 0,
		}
		b, _ := json.Marshal(s)
		ops = append(ops, clientv3.OpPut(prefix+s.Name, string(b)))
	}
	// etcd limits operations per transaction (--max-txn-ops, 128 by
	// default): the first batch is conditional, the rest follow it.
	first := ops[:min(len(ops), 100)]
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(prefix).WithPrefix(), "=", 0)).
		Then(first...).Commit()
	if err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if !resp.Succeeded {
		return nil // not empty: leave the user's data alone
	}
	for rest := ops[len(first):]; len(rest) > 0; rest = rest[min(len(rest), 100):] {
		if _, err := cli.Txn(ctx).Then(rest[:min(len(rest), 100)]...).Commit(); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	return nil
}
