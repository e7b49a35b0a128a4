// Command nats keeps a typed, indexed cache of a JetStream key-value bucket
// of stock levels (one JSON value per SKU) and serves it read-only as JSON
// next to Prometheus metrics:
//
//	go run ./examples/nats -nats nats://localhost:4222 -init
//
//	curl localhost:8080/items                    # every item
//	curl localhost:8080/items/sku-00042          # one item
//	curl 'localhost:8080/items?warehouse=ams'    # a warehouse's items, from an index
//	curl localhost:8080/metrics                  # informer metrics, lag included
//
//	nats kv put inventory sku-99999 '{"sku":"sku-99999","warehouse":"ams","qty":3}'
//
// -init creates the bucket when it is missing and fills it with demo items
// when it is empty. Changes made with the nats CLI appear in the cache (and
// are printed) as they happen. Ctrl-C stops it cleanly.
//
// # Server setup
//
// A nats-server with JetStream enabled (nats-server -js). The user needs to
// read stream info and messages of the bucket's stream KV_<bucket> and to
// create ephemeral consumers on it; -init also needs to create the bucket
// and put values. Credentials: -creds names a .creds file; TLS and other
// options go into nats.Connect.
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
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	prommetrics "github.com/dbinformer/dbinformer/metrics/prometheus"
	"github.com/dbinformer/dbinformer/statuspage"
)

// Item is the typed value stored (as JSON) under each key of the bucket.
type Item struct {
	SKU       string `json:"sku"`
	Warehouse string `json:"warehouse"`
	Qty       int    `json:"qty"`
}

type config struct {
	syncTimeout time.Duration // 0: wait for the initial sync until Ctrl-C
	url         string
	creds       string // path of a .creds file; "" for none
	bucket      string
	listen      string
	init        bool
	items       int // demo items written by -init into an empty bucket
}

func main() {
	var cfg config
	flag.StringVar(&cfg.url, "nats", nats.DefaultURL, "NATS server URL(s), comma-separated")
	flag.StringVar(&cfg.creds, "creds", "", "user credentials file")
	flag.StringVar(&cfg.bucket, "bucket", "inventory", "key-value bucket to sync")
	flag.StringVar(&cfg.listen, "listen", "127.0.0.1:8080", "HTTP address for /metrics and the JSON view")
	flag.BoolVar(&cfg.init, "init", false, "create the bucket if missing and fill it with demo items if empty")
	flag.IntVar(&cfg.items, "items", 5000, "demo items written by -init")
	flag.DurationVar(&cfg.syncTimeout, "sync-timeout", time.Minute, "give up when the initial sync has not finished after this long (0: never); the error says why")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nats:", err)
		os.Exit(1)
	}
}

// run syncs and serves until ctx is done, then stops everything it started
// and returns nil after a clean stop.
// It is long on purpose and stays whole: an example is read in order, top
// to bottom, so its steps are not cut into functions.
func run(ctx context.Context, cfg config, out io.Writer) error {
	opts := []nats.Option{nats.Name("dbinformer examples/nats")}
	if cfg.creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.creds))
	}
	nc, err := nats.Connect(cfg.url, opts...)
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if cfg.init {
		if err := initBucket(ctx, js, cfg); err != nil {
			return err
		}
	}

	lw, err := natsinformer.NewKV(ctx, js, cfg.bucket, natsinformer.KVOptions[Item]{})
	if err != nil {
		return err // names the bucket; -init creates it
	}
	reg := prometheus.NewRegistry()
	pm, err := prommetrics.New(reg, prommetrics.Options{})
	if err != nil {
		return err
	}
	page := statuspage.New(statuspage.Options{Title: "nats example"})
	items := core.NewSharedIndexInformer[Item](lw, core.InformerOptions[Item]{
		Name: "items",
		Indexers: core.Indexers[Item]{
			"warehouse": func(i Item) ([]string, error) { return []string{i.Warehouse}, nil },
		},
		Metrics:      core.MultiMetrics(page, pm),
		ErrorHandler: func(err error) { fmt.Fprintln(out, "error:", err) },
	})
	page.Add(items)
	pm.TrackLag(items)
	if _, err := items.AddEventHandlerWithOptions(core.ResourceEventHandlerFuncs[Item]{
		AddFunc: func(key string, i Item, initial bool) {
			if !initial {
				fmt.Fprintf(out, "added %s: %+v\n", key, i)
			}
		},
		UpdateFunc: func(key string, old, i Item) {
			fmt.Fprintf(out, "updated %s: qty %d -> %d\n", key, old.Qty, i.Qty)
		},
		DeleteFunc: func(key string, last Item, _ bool) {
			fmt.Fprintf(out, "deleted %s (was in %s)\n", key, last.Warehouse)
		},
	}, core.HandlerOptions{Name: "printer"}); err != nil {
		return err
	}

	// Serve before the sync, so that the status page shows its progress
	// (the data endpoints answer from a cache that may still be filling).
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: routes(reg, page, items), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer srv.Close() // an early return (a failed sync, Ctrl-C) stops serving too
	fmt.Fprintf(out, "status page: http://%s/debug/informers/\n", ln.Addr())
	runCtx, stopInformer := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = items.Run(runCtx) })
	defer func() { stopInformer(); wg.Wait() }()

	start := time.Now()
	// A source that keeps failing (a missing privilege, say) is retried
	// with backoff by the informer; the timeout turns that into an error
	// that says why (the last list error). Ctrl-C during the wait is a
	// clean stop.
	printCtx, stopPrinting := context.WithCancel(ctx)
	printed := make(chan struct{})
	go func() { defer close(printed); _ = page.PrintProgress(printCtx, out, time.Second) }()
	err = core.WaitForCacheSyncTimeout(ctx, cfg.syncTimeout, items)
	stopPrinting()
	<-printed
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fmt.Fprintf(out, "synced %d items from bucket %q at revision %d in %v\n",
		items.Indexer().Len(), cfg.bucket, items.LastSyncResourceVersion(), time.Since(start).Round(time.Millisecond))

	fmt.Fprintf(out, "serving http://%s (/items, /items/{sku}, /items?warehouse={code}, /metrics, /debug/informers/); Ctrl-C stops\n", ln.Addr())

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

func routes(reg *prometheus.Registry, page *statuspage.Page, items *core.SharedIndexInformer[Item]) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/debug/informers/", page) // status page, ?format=json, readyz, livez
	mux.Handle("GET /readyz", page.ReadyHandler())
	mux.Handle("GET /livez", page.LiveHandler())
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, r *http.Request) {
		var list []Item
		if wh := r.URL.Query().Get("warehouse"); wh != "" {
			var err error
			if list, err = items.Lister().ByIndex("warehouse", wh); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		} else {
			list = items.Lister().List(nil)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].SKU < list[j].SKU })
		writeJSON(w, list)
	})
	mux.HandleFunc("GET /items/{sku}", func(w http.ResponseWriter, r *http.Request) {
		if i, ok := items.Lister().Get(r.PathValue("sku")); ok {
			writeJSON(w, i)
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

// initBucket creates the bucket when missing and fills it when it holds no
// value. Create (not Put) makes a second -init, or one racing it, leave
// existing items alone.
func initBucket(ctx context.Context, js jetstream.JetStream, cfg config) error {
	kv, err := js.KeyValue(ctx, cfg.bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cfg.bucket, History: 1})
	}
	if err != nil {
		return fmt.Errorf("-init bucket %q: %w", cfg.bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return err
	}
	if st.Values() > 0 {
		return nil
	}
	warehouses := []string{"ams", "fra", "lis", "waw", "osl"}
	for i := 0; i < cfg.items; i++ {
		it := Item{SKU: fmt.Sprintf("sku-%05d", i), Warehouse: warehouses[i%len(warehouses)], Qty: (i * 7) % 100}
		b, _ := json.Marshal(it)
		if _, err := kv.Create(ctx, it.SKU, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("-init item %s: %w", it.SKU, err)
		}
	}
	return nil
}
