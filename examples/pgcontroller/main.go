// Command pgcontroller keeps a derived row per customer in Postgres: for
// every customer with orders in public.orders it maintains public.order_totals
// (number of orders, sum of total_cents), with package controller over the
// Postgres adapter. See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
)

// Order is a row of public.orders.
type Order struct {
	ID         int64  `db:"id"`
	CustomerID int64  `db:"customer_id"`
	TotalCents int64  `db:"total_cents"`
	Status     string `db:"status"`
}

// Total is a row of public.order_totals, derived from the orders.
type Total struct {
	CustomerID int64 `db:"customer_id"`
	Orders     int64 `db:"orders"`
	TotalCents int64 `db:"total_cents"`
}

const schema = `
CREATE TABLE IF NOT EXISTS public.orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL,
	total_cents bigint NOT NULL, status text NOT NULL DEFAULT 'open');
CREATE TABLE IF NOT EXISTS public.order_totals (customer_id bigint PRIMARY KEY,
	orders bigint NOT NULL, total_cents bigint NOT NULL)`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pgcontroller:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("pgcontroller", flag.ContinueOnError)
	conn := fs.String("conn", "postgres://localhost/postgres", "connection string of a role with REPLICATION that owns the tables")
	initSchema := fs.Bool("init", false, "create the two tables if they do not exist")
	listen := fs.String("listen", "127.0.0.1:8082", "HTTP address for /metrics, /healthz, /readyz; empty for none")
	workers := fs.Int("workers", 4, "reconcile workers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	db, err := pgxpool.New(ctx, *conn)
	if err != nil {
		return fmt.Errorf("connect (check -conn): %w", err)
	}
	defer db.Close()
	if *initSchema {
		if _, err := db.Exec(ctx, schema); err != nil {
			return fmt.Errorf("-init: %w", err)
		}
	}
	// One Source: one slot and one publication for both tables.
	src, err := pginformer.NewSource(ctx, *conn, pginformer.Options{})
	if err != nil {
		return err
	}
	defer src.Close()
	ordersTable, err := pginformer.NewTable[Order](ctx, src, "orders", pginformer.TableOptions[Order]{})
	if err != nil {
		return err
	}
	totalsTable, err := pginformer.NewTable[Total](ctx, src, "order_totals", pginformer.TableOptions[Total]{})
	if err != nil {
		return err
	}
	mgr := controller.NewManager(controller.ManagerOptions{Name: "pgcontroller", Addr: *listen, Logger: slog.New(slog.NewTextHandler(out, nil))})
	customer := func(o Order) string { return strconv.FormatInt(o.CustomerID, 10) }
	orders := controller.Informer(mgr, "orders", ordersTable, core.InformerOptions[Order]{
		Indexers: core.Indexers[Order]{"customer": func(o Order) ([]string, error) { return []string{customer(o)}, nil }},
	})
	totals := controller.Informer(mgr, "order_totals", totalsTable, core.InformerOptions[Total]{})
	r := &reconciler{db: db, orders: orders, totals: totals, out: out}
	c, err := controller.NewManaged(mgr, "order-totals", r, controller.Options[string]{Workers: *workers})
	if err != nil {
		return err
	}
	// An order's change reconciles its customer (both customers when an
	// order moves); a change of a derived row (an edit by hand, a delete)
	// reconciles it too, so the controller repairs it.
	if err := controller.Watch(c, orders, controller.Owner(customer), controller.WatchOptions[Order]{}); err != nil {
		return err
	}
	if err := controller.Watch(c, totals, controller.ObjectKey[Total](), controller.WatchOptions[Total]{}); err != nil {
		return err
	}
	defer fmt.Fprintln(out, "stopped")
	return mgr.Run(ctx)
}

type reconciler struct {
	db     *pgxpool.Pool
	orders *core.SharedIndexInformer[Order]
	totals *core.SharedIndexInformer[Total]
	out    io.Writer
}

// Reconcile makes the customer's row of order_totals match its orders.
func (r *reconciler) Reconcile(ctx context.Context, key string) (controller.Result, error) {
	id, err := strconv.ParseInt(key, 10, 64)
	if err != nil {
		return controller.Result{}, controller.Terminal(fmt.Errorf("customer key %q is not a number", key))
	}
	// Get waits for this key's own earlier writes to reach the cache:
	// a reconcile never compares against the row from before its write.
	have, exists, err := controller.Get(ctx, r.totals, key)
	if err != nil {
		return controller.Result{}, err
	}
	list, err := r.orders.Lister().ByIndex("customer", key)
	if err != nil {
		return controller.Result{}, err
	}
	want := Total{CustomerID: id, Orders: int64(len(list))}
	for _, o := range list {
		want.TotalCents += o.TotalCents
	}
	switch {
	case want.Orders == 0 && !exists, want.Orders > 0 && exists && have == want:
		return controller.Result{}, nil
	case want.Orders == 0:
		err = r.write(ctx, `DELETE FROM public.order_totals WHERE customer_id = $1`, id)
		fmt.Fprintf(r.out, "customer %d: no orders -> total removed\n", id)
	default:
		err = r.write(ctx, `INSERT INTO public.order_totals (customer_id, orders, total_cents) VALUES ($1, $2, $3)
			ON CONFLICT (customer_id) DO UPDATE SET orders = EXCLUDED.orders, total_cents = EXCLUDED.total_cents`,
			id, want.Orders, want.TotalCents)
		fmt.Fprintf(r.out, "customer %d: %d orders, %d cents -> total written\n", id, want.Orders, want.TotalCents)
	}
	return controller.Result{}, err
}

// write runs one statement and records, for read-your-writes, the version
// pginformer.CommitToken gives after its commit: once the totals cache has
// applied it, it holds the write, under any synchronous_commit setting.
func (r *reconciler) write(ctx context.Context, sql string, args ...any) error {
	if _, err := r.db.Exec(ctx, sql, args...); err != nil {
		return err
	}
	rv, err := pginformer.CommitToken(ctx, r.db)
	if err != nil {
		return err
	}
	controller.Wrote(ctx, r.totals, rv)
	return nil
}
