// Command quickstart is dbinformer in one command: it starts an embedded
// NATS JetStream server in this process (or connects to yours with -nats),
// fills a key-value bucket with typed orders, syncs the bucket into an
// indexed in-memory cache, and shows handlers firing, an index query and
// read-your-writes.
//
//	go run ./examples/quickstart                 # embedded server, runs the tour, exits
//	go run ./examples/quickstart -follow         # ...then keeps printing changes until Ctrl-C
//	go run ./examples/quickstart -nats nats://127.0.0.1:4222   # your own server
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
	"sync/atomic"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/statuspage"
)

// Order is the typed record the cache holds.
type Order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Status   string `json:"status"`
	Cents    int64  `json:"cents"`
}

type config struct {
	natsURL string // empty: embedded server
	bucket  string
	orders  int
	follow  bool
	status  string // address of the status page; empty: none
}

func main() {
	var cfg config
	flag.StringVar(&cfg.natsURL, "nats", "", "URL of a NATS server with JetStream; empty starts an embedded one in this process")
	flag.StringVar(&cfg.bucket, "bucket", "quickstart_orders", "key-value bucket to sync (created if missing)")
	flag.IntVar(&cfg.orders, "orders", 5000, "orders to write before the informer starts")
	flag.BoolVar(&cfg.follow, "follow", false, "after the tour, keep printing changes until Ctrl-C")
	flag.StringVar(&cfg.status, "status", "127.0.0.1:0", "serve the status page (/debug/informers/) on this address; empty: none")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run is the tour: the server, the bucket and its orders, the informer,
// an index query and read-your-writes, then (with -follow) the changes
// until ctx is done.
// It is long on purpose and stays whole: an example is read in order, top
// to bottom, so its steps are not cut into functions.
func run(ctx context.Context, cfg config, out io.Writer) error {
	url := cfg.natsURL
	if url == "" {
		srv, err := startEmbedded()
		if err != nil {
			return err
		}
		defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
		url = srv.ClientURL()
		fmt.Fprintf(out, "started an embedded NATS JetStream server at %s\n", url)
	}
	nc, err := nats.Connect(url, nats.Name("dbinformer quickstart"))
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cfg.bucket})
	if err != nil {
		return fmt.Errorf("open bucket %q: %w", cfg.bucket, err)
	}

	// 1. Data that exists before the informer starts: the initial sync.
	statuses := []string{"open", "paid", "shipped"}
	for i := 0; i < cfg.orders; i++ {
		o := Order{ID: fmt.Sprintf("o%05d", i), Customer: fmt.Sprintf("c%03d", i%250), Status: statuses[i%3], Cents: int64(100 + i)}
		if _, err := kv.Put(ctx, o.ID, mustJSON(o)); err != nil {
			return fmt.Errorf("seed order %s: %w", o.ID, err)
		}
	}
	fmt.Fprintf(out, "wrote %d orders to bucket %q\n", cfg.orders, cfg.bucket)

	// 2. A typed, indexed informer over the bucket.
	lw, err := natsinformer.NewKV(ctx, js, cfg.bucket, natsinformer.KVOptions[Order]{})
	if err != nil {
		return err
	}
	// The status page records the informer's metrics and serves them
	// (HTML, JSON, readyz, livez); it also prints the sync's progress.
	page := statuspage.New(statuspage.Options{Title: "quickstart"})
	informer := core.NewSharedIndexInformer(lw, core.InformerOptions[Order]{
		Name: "bucket " + cfg.bucket,
		Indexers: core.Indexers[Order]{
			"status":   func(o Order) ([]string, error) { return []string{o.Status}, nil },
			"customer": func(o Order) ([]string, error) { return []string{o.Customer}, nil },
		},
		Metrics: page,
	})
	page.Add(informer)
	if cfg.status != "" {
		ln, err := net.Listen("tcp", cfg.status)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/debug/informers/", page) // status page, ?format=json, readyz, livez
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		fmt.Fprintf(out, "status page: http://%s/debug/informers/\n", ln.Addr())
	}
	var initialAdds atomic.Int64
	live := make(chan string, 64)
	reg, err := informer.AddEventHandler(core.ResourceEventHandlerFuncs[Order]{
		Name: "printer", // how the status page and metrics name it
		AddFunc: func(key string, o Order, initial bool) {
			if initial {
				initialAdds.Add(1)
				return
			}
			live <- fmt.Sprintf("handler: added %s (%s, %s)", key, o.Customer, o.Status)
		},
		UpdateFunc: func(key string, old, o Order) {
			live <- fmt.Sprintf("handler: updated %s: %s -> %s", key, old.Status, o.Status)
		},
		DeleteFunc: func(key string, last Order, _ bool) {
			live <- fmt.Sprintf("handler: deleted %s (was %s)", key, last.Status)
		},
	})
	if err != nil {
		return err
	}
	runCtx, cancelRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); informer.Run(runCtx) }()
	defer func() { cancelRun(); wg.Wait() }()

	start := time.Now()
	printCtx, stopPrinting := context.WithCancel(ctx)
	printed := make(chan struct{})
	go func() { defer close(printed); _ = page.PrintProgress(printCtx, out, 200*time.Millisecond) }()
	err = informer.WaitForCacheSync(ctx)
	stopPrinting()
	<-printed
	if err != nil {
		return fmt.Errorf("initial sync: %w", err) // says why: the last list error
	}
	if err := reg.WaitForCacheSync(ctx); err != nil { // the handler has received every initial add
		return err
	}
	fmt.Fprintf(out, "cache synced: %d orders at revision %d in %v (handlers saw %d initial adds)\n",
		len(informer.Lister().List(nil)), informer.LastSyncResourceVersion(), time.Since(start).Round(time.Millisecond), initialAdds.Load())

	// 3. Index queries: no scan, no round trip.
	open, _ := informer.Lister().ByIndex("status", "open")
	c7, _ := informer.Lister().ByIndex("customer", "c007")
	ids := make([]string, 0, len(c7))
	for _, o := range c7 {
		ids = append(ids, o.ID)
	}
	sort.Strings(ids)
	fmt.Fprintf(out, "index status=open: %d orders; index customer=c007: %d orders, first %v\n", len(open), len(ids), ids[:min(3, len(ids))])

	// 4. Read-your-writes: the write returns a revision; WaitFor it and the
	// cache is guaranteed to hold the write.
	o := Order{ID: "o00007", Customer: "c007", Status: "refunded", Cents: 107}
	rev, err := kv.Put(ctx, o.ID, mustJSON(o))
	if err != nil {
		return err
	}
	if err := informer.WaitFor(ctx, core.ResourceVersion(rev)); err != nil {
		return err
	}
	got, _ := informer.Lister().Get(o.ID)
	fmt.Fprintf(out, "wrote %s status=refunded at revision %d; after WaitFor the cache says status=%s\n", o.ID, rev, got.Status)
	fmt.Fprintln(out, <-live)

	if err := kv.Delete(ctx, "o00008"); err != nil {
		return err
	}
	// kv.Delete returns no revision; the bucket's head does.
	head, err := lw.Head(ctx)
	if err != nil {
		return err
	}
	if err := informer.WaitFor(ctx, head); err != nil {
		return err
	}
	_, still := informer.Lister().Get("o00008")
	fmt.Fprintf(out, "deleted o00008; after WaitFor(%d) the cache has it: %v\n", head, still)
	fmt.Fprintln(out, <-live)

	if !cfg.follow {
		fmt.Fprintln(out, "done (run with -follow to keep watching, e.g. while you `nats kv put` into the bucket)")
		return nil
	}
	fmt.Fprintf(out, "following bucket %q; press Ctrl-C to stop\n", cfg.bucket)
	for {
		select {
		case line := <-live:
			fmt.Fprintln(out, line)
		case <-ctx.Done():
			fmt.Fprintln(out, "stopping")
			return nil
		}
	}
}

func startEmbedded() (*natsserver.Server, error) {
	dir, err := os.MkdirTemp("", "dbinformer-quickstart-")
	if err != nil {
		return nil, err
	}
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		os.RemoveAll(dir)
		return nil, errors.New("embedded NATS server did not become ready")
	}
	go func() { srv.WaitForShutdown(); os.RemoveAll(dir) }()
	return srv, nil
}

func mustJSON(o Order) []byte {
	b, err := json.Marshal(o)
	if err != nil {
		panic(err) // an Order always marshals
	}
	return b
}
