// Command postgres syncs two PostgreSQL tables, customers and orders, into
// typed in-memory caches over one logical replication slot, and serves them
// read-only as JSON next to Prometheus metrics:
//
//	go run ./examples/postgres -conn 'postgres://app_sync:secret@localhost:5432/shop' -init
//
//	curl localhost:8080/customers          # every customer
//	curl localhost:8080/customers/7        # one customer
//	curl localhost:8080/orders/42          # one order
//	curl 'localhost:8080/orders?customer=7'  # a customer's orders, from an index
//	curl localhost:8080/metrics            # informer metrics, lag included
//
// -init creates the two tables when they are missing and fills them with
// demo rows when they are empty. Changes made with psql appear in the
// caches (and are printed) as they commit. Ctrl-C stops the informers and
// closes the Source, which drops its temporary slot and publication.
// README.md lists the server settings and privileges it needs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	prommetrics "github.com/dbinformer/dbinformer/metrics/prometheus"
	"github.com/dbinformer/dbinformer/statuspage"
)

// Customer is a row of public.customers; fields map to columns by `db` tag.
type Customer struct {
	ID    int64  `db:"id" json:"id"`
	Name  string `db:"name" json:"name"`
	Email string `db:"email" json:"email"`
}

// Order is a row of public.orders.
type Order struct {
	ID         int64     `db:"id" json:"id"`
	CustomerID int64     `db:"customer_id" json:"customer_id"`
	Status     string    `db:"status" json:"status"`
	TotalCents int64     `db:"total_cents" json:"total_cents"`
	CreatedAt  time.Time `db:"created_at" json:"created_at"`
}

type config struct {
	syncTimeout time.Duration // 0: wait for the initial sync until Ctrl-C
	conn        string        // pgx connection string; never printed
	pub         string        // existing publication to use; "" creates (and drops) one
	listen      string        // HTTP address
	init        bool          // create and fill the tables when missing or empty
	customers   int           // demo rows written by -init
	orders      int
	checkpoint  string // directory of checkpoints; "" lists at every start
	slot        string // permanent slot used with checkpoint
}

func main() {
	var cfg config
	flag.StringVar(&cfg.conn, "conn", os.Getenv("DATABASE_URL"), "connection string of a role with REPLICATION and SELECT (default $DATABASE_URL)")
	flag.StringVar(&cfg.pub, "publication", "", "existing publication covering both tables (default: create a temporary one, which needs table ownership)")
	flag.StringVar(&cfg.listen, "listen", "127.0.0.1:8080", "HTTP address for /metrics and the JSON view")
	flag.DurationVar(&cfg.syncTimeout, "sync-timeout", time.Minute, "give up when the initial sync has not finished after this long (0: never); the error says why")
	flag.BoolVar(&cfg.init, "init", false, "create public.customers and public.orders if missing and fill them with demo rows if empty")
	flag.IntVar(&cfg.customers, "customers", 1000, "demo customers written by -init")
	flag.IntVar(&cfg.orders, "orders", 20000, "demo orders written by -init")
	flag.StringVar(&cfg.checkpoint, "checkpoint", "", "directory for checkpoints: restart warm from the last one over a permanent slot instead of listing")
	flag.StringVar(&cfg.slot, "slot", "dbinformer_example", "the permanent replication slot used with -checkpoint (drop it with pg_drop_replication_slot when done)")
	flag.Parse()
	if cfg.conn == "" {
		fmt.Fprintln(os.Stderr, "postgres: -conn (or $DATABASE_URL) is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "postgres:", err)
		os.Exit(1)
	}
}

// run syncs and serves until ctx is done, then stops everything it started
// and returns nil after a clean stop.
// It is long on purpose and stays whole: an example is read in order, top
// to bottom, so its steps are not cut into functions.
func run(ctx context.Context, cfg config, out io.Writer) (err error) {
	if cfg.init {
		if err := initTables(ctx, cfg); err != nil {
			return err
		}
	}

	// One Source: one slot, one walsender and one publication for both
	// tables. Register every table before the informers start.
	srcOpts := pginformer.Options{
		Publication: cfg.pub,
		Logger:      slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	ckpt, err := checkpoints(cfg, &srcOpts)
	if err != nil {
		return err
	}
	src, err := pginformer.NewSource(ctx, cfg.conn, srcOpts)
	if err != nil {
		return err // names host, port and user only, never the password
	}
	defer func() {
		// Close drops the temporary slot (it goes with the replication
		// connection) and the publication the Source created.
		if cerr := src.Close(); cerr != nil && err == nil {
			err = cerr
		}
		if ckpt != nil {
			fmt.Fprintf(out, "closed the source: permanent replication slot %q and publication %q kept for the next warm start\n", src.SlotName(), src.PublicationName())
		} else if cfg.pub == "" {
			fmt.Fprintf(out, "closed the source: temporary replication slot %q and publication %q gone\n", src.SlotName(), src.PublicationName())
		} else {
			fmt.Fprintf(out, "closed the source: replication slot %q dropped, publication %q kept\n", src.SlotName(), src.PublicationName())
		}
	}()
	customersTable, err := pginformer.NewTable[Customer](ctx, src, "customers", pginformer.TableOptions[Customer]{})
	if err != nil {
		return err
	}
	ordersTable, err := pginformer.NewTable[Order](ctx, src, "orders", pginformer.TableOptions[Order]{})
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	pm, err := prommetrics.New(reg, prommetrics.Options{})
	if err != nil {
		return err
	}
	errorHandler := func(err error) { fmt.Fprintln(out, "error:", err) }
	page := statuspage.New(statuspage.Options{Title: "postgres example"})

	customers := core.NewSharedIndexInformer[Customer](customersTable, core.InformerOptions[Customer]{
		Name:         "customers",
		Metrics:      core.MultiMetrics(page, progressMetrics{pm, out}),
		ErrorHandler: errorHandler,
		Checkpoint:   checkpointFor[Customer](ckpt),
	})
	orders := core.NewSharedIndexInformer[Order](ordersTable, core.InformerOptions[Order]{
		Name: "orders",
		Indexers: core.Indexers[Order]{
			"customer": func(o Order) ([]string, error) { return []string{strconv.FormatInt(o.CustomerID, 10)}, nil },
		},
		Metrics:      core.MultiMetrics(page, progressMetrics{pm, out}),
		ErrorHandler: errorHandler,
		Checkpoint:   checkpointFor[Order](ckpt),
	})
	page.Add(customers)
	page.Add(orders)
	pm.TrackLag(customers)
	pm.TrackLag(orders)
	if _, err := customers.AddEventHandlerWithOptions(printChanges[Customer](out, "customers"), core.HandlerOptions{Name: "printer"}); err != nil {
		return err
	}
	if _, err := orders.AddEventHandlerWithOptions(printChanges[Order](out, "orders"), core.HandlerOptions{Name: "printer"}); err != nil {
		return err
	}

	// Serve before the sync, so that the status page shows its progress
	// (the data endpoints answer from caches that may still be filling).
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: routes(reg, page, customers, orders), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer srv.Close() // an early return (a failed sync, Ctrl-C) stops serving too
	fmt.Fprintf(out, "status page: http://%s/debug/informers/\n", ln.Addr())
	runCtx, stopInformers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = customers.Run(runCtx) })
	wg.Go(func() { _ = orders.Run(runCtx) })
	// Informers stop before the Source closes (defers run last-in first-out).
	defer func() { stopInformers(); wg.Wait() }()

	start := time.Now()
	// A source that keeps failing (a missing privilege, say) is retried
	// with backoff forever by the informer; the timeout turns that into an
	// error that says why: the last list error.
	if err := core.WaitForCacheSyncTimeout(ctx, cfg.syncTimeout, customers, orders); err != nil {
		if ctx.Err() != nil {
			return nil // Ctrl-C during the wait: a clean stop
		}
		return err
	}
	fmt.Fprintf(out, "synced %d customers and %d orders in %v over replication slot %q\n",
		customers.Indexer().Len(), orders.Indexer().Len(), time.Since(start).Round(time.Millisecond), src.SlotName())
	printWarm(out, "customers", customers.SyncStatus(), "orders", orders.SyncStatus())

	fmt.Fprintf(out, "serving http://%s (/customers, /customers/{id}, /orders/{id}, /orders?customer={id}, /metrics, /debug/informers/); Ctrl-C stops\n", ln.Addr())

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

func routes(reg *prometheus.Registry, page *statuspage.Page, customers *core.SharedIndexInformer[Customer], orders *core.SharedIndexInformer[Order]) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/debug/informers/", page) // status page, ?format=json, readyz, livez
	mux.Handle("GET /readyz", page.ReadyHandler())
	mux.Handle("GET /livez", page.LiveHandler())
	mux.HandleFunc("GET /customers", func(w http.ResponseWriter, r *http.Request) {
		list := customers.Lister().List(nil)
		sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
		writeJSON(w, list)
	})
	mux.HandleFunc("GET /customers/{id}", func(w http.ResponseWriter, r *http.Request) {
		// The key of a single-column primary key is the column's text.
		if c, ok := customers.Lister().Get(r.PathValue("id")); ok {
			writeJSON(w, c)
			return
		}
		http.NotFound(w, r)
	})
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		if o, ok := orders.Lister().Get(r.PathValue("id")); ok {
			writeJSON(w, o)
			return
		}
		http.NotFound(w, r)
	})
	mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) {
		c := r.URL.Query().Get("customer")
		if c == "" {
			http.Error(w, "give ?customer={id}: listing every order is what the index is there to avoid", http.StatusBadRequest)
			return
		}
		list, err := orders.Lister().ByIndex("customer", c)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
		writeJSON(w, list)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// printChanges prints live changes; the initial list is summarised by the
// progress lines instead of one line per row.
func printChanges[T any](out io.Writer, table string) core.ResourceEventHandlerFuncs[T] {
	return core.ResourceEventHandlerFuncs[T]{
		AddFunc: func(key string, obj T, initial bool) {
			if !initial {
				fmt.Fprintf(out, "%s: inserted %s: %+v\n", table, key, obj)
			}
		},
		UpdateFunc: func(key string, old, obj T) {
			fmt.Fprintf(out, "%s: updated %s: %+v\n", table, key, obj)
		},
		DeleteFunc: func(key string, last T, _ bool) {
			fmt.Fprintf(out, "%s: deleted %s\n", table, key)
		},
	}
}

// progressMetrics sends every measurement to Prometheus and also prints the
// initial sync's progress: a metrics provider is an interface, so adding to
// one is a wrapper.
type progressMetrics struct {
	pm  *prommetrics.Provider
	out io.Writer
}

func (p progressMetrics) InformerMetrics(name string) core.InformerMetrics {
	return &progressPrinter{InformerMetrics: p.pm.InformerMetrics(name), name: name, out: p.out}
}

type progressPrinter struct {
	core.InformerMetrics
	name string
	out  io.Writer

	mu    sync.Mutex
	start time.Time // the list in progress started; zero between lists
	last  time.Time
}

func (p *progressPrinter) ListProgress(received, estimated int64) {
	p.InformerMetrics.ListProgress(received, estimated)
	p.mu.Lock()
	defer p.mu.Unlock()
	// A line a second, none for a list that finishes within the first
	// second, and none for the final count (Listed prints it).
	now := time.Now()
	if p.start.IsZero() {
		p.start, p.last = now, now
	}
	if now.Sub(p.last) < time.Second {
		return
	}
	p.last = now
	fmt.Fprintln(p.out, progressLine(p.name, received, estimated, now.Sub(p.start)))
}

// progressLine reads e.g. "orders: initial sync 120000 of ~1000000 rows
// (12%), 40000 rows/s, about 22s left".
func progressLine(name string, received, estimated int64, elapsed time.Duration) string {
	line := fmt.Sprintf("%s: initial sync %d rows", name, received)
	if estimated > 0 {
		line = fmt.Sprintf("%s: initial sync %d of ~%d rows (%d%%)", name, received, estimated, min(100, received*100/estimated))
	}
	if elapsed <= 0 || received == 0 {
		return line
	}
	rate := float64(received) / elapsed.Seconds()
	line += fmt.Sprintf(", %.0f rows/s", rate)
	if estimated > received {
		line += fmt.Sprintf(", about %v left", time.Duration(float64(estimated-received)/rate*float64(time.Second)).Round(time.Second))
	}
	return line
}

func (p *progressPrinter) Listed(relist bool, items int, err error) {
	p.InformerMetrics.Listed(relist, items, err)
	p.mu.Lock()
	p.start, p.last = time.Time{}, time.Time{}
	p.mu.Unlock()
	what := "listed"
	if relist {
		what = "relisted"
	}
	if err != nil {
		return // the informer's error handler prints it
	}
	fmt.Fprintf(p.out, "%s: %s %d rows\n", p.name, what, items)
}

// initTables creates the demo tables when missing and fills them when
// empty, in one transaction so that a concurrent run sees all or nothing.
func initTables(ctx context.Context, cfg config) error {
	conn, err := pgx.Connect(ctx, cfg.conn)
	if err != nil {
		return errors.New("connect for -init failed (check -conn; not shown here: it may hold a password)")
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	for _, stmt := range []string{
		`CREATE TABLE IF NOT EXISTS public.customers (
			id    bigint PRIMARY KEY,
			name  text NOT NULL,
			email text NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS public.orders (
			id          bigint PRIMARY KEY,
			customer_id bigint NOT NULL REFERENCES public.customers (id),
			status      text NOT NULL,
			total_cents bigint NOT NULL,
			created_at  timestamptz NOT NULL DEFAULT now())`,
	} {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("-init: %w", err)
		}
	}
	var n int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM public.customers`).Scan(&n); err != nil {
		return err
	}
	if n == 0 && cfg.customers > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO public.customers (id, name, email)
			SELECT i, 'Customer ' || i, 'customer' || i || '@example.com' FROM generate_series(1, $1::int) AS i`, cfg.customers); err != nil {
			return fmt.Errorf("-init customers: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO public.orders (id, customer_id, status, total_cents, created_at)
			SELECT i, 1 + (i - 1) % $2::int, (ARRAY['open','paid','shipped'])[1 + i % 3], 100 * i,
			       timestamptz '2026-01-01 00:00:00+00' + i * interval '1 minute'
			FROM generate_series(1, $1::int) AS i`, cfg.orders, cfg.customers); err != nil {
			return fmt.Errorf("-init orders: %w", err)
		}
	}
	return tx.Commit(ctx)
}
