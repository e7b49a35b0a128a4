package main

import (
	"errors"

	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/examples/internal/exampletest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// started runs the example until stop (what Ctrl-C does) and returns the
// HTTP base URL it announced.
func started(t *testing.T, cfg config) (base string, out *exampletest.Output, stop func() error) {
	t.Helper()
	p := exampletest.Start(t, func(ctx context.Context, out io.Writer) error { return run(ctx, cfg, out) })
	return p.BaseURL(), p.Out, p.Stop
}

func slots(t *testing.T, pg *harness.Postgres) int {
	t.Helper()
	var n int
	if err := pg.Conn(t).QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func publications(t *testing.T, pg *harness.Postgres) []string {
	t.Helper()
	rows, err := pg.Conn(t).Query(context.Background(), `SELECT pubname FROM pg_publication ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

// The README's first setup: a role with REPLICATION that may create tables
// and a publication (CREATE on the database and the schema); -init creates
// and fills the tables, so the role owns them and the Source creates its
// own publication.
func TestPostgresExample(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the server and every connection stopped
	pg := harness.StartPostgres(t)
	conn := pg.CreateRole(t, "shop_sync", "REPLICATION")
	pg.Exec(t, `GRANT CREATE ON DATABASE postgres TO shop_sync; GRANT CREATE, USAGE ON SCHEMA public TO shop_sync`)

	base, out, stop := started(t, config{conn: conn, listen: "127.0.0.1:0", init: true, customers: 20, orders: 100})
	for _, want := range []string{
		"customers: listed 20 rows",
		"orders: listed 100 rows",
		"synced 20 customers and 100 orders",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// A table that listed late reads in a short-lived helper slot; once
	// that is gone, both tables stream over one slot.
	for deadline := time.Now().Add(time.Minute); slots(t, pg) != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d replication slots while running, want exactly 1 for both tables", slots(t, pg))
		}
	}

	customers := exampletest.GetJSON[[]Customer](t, base+"/customers")
	if len(customers) != 20 || customers[6].ID != 7 || customers[6].Email != "customer7@example.com" {
		t.Errorf("/customers: %d rows, [6] = %+v", len(customers), customers[min(6, len(customers)-1)])
	}
	if c := exampletest.GetJSON[Customer](t, base+"/customers/3"); c.Name != "Customer 3" {
		t.Errorf("/customers/3 = %+v", c)
	}
	// Orders i go to customer 1+(i-1)%20: customer 3 has orders 3, 23, 43, 63, 83.
	byCustomer := exampletest.GetJSON[[]Order](t, base+"/orders?customer=3")
	var ids []int64
	for _, o := range byCustomer {
		ids = append(ids, o.ID)
	}
	if len(ids) != 5 || ids[0] != 3 || ids[4] != 83 {
		t.Errorf("/orders?customer=3 ids = %v", ids)
	}
	if o := exampletest.GetJSON[Order](t, base+"/orders/42"); o.CustomerID != 2 || o.TotalCents != 4200 || o.Status != "open" ||
		!o.CreatedAt.Equal(time.Date(2026, 1, 1, 0, 42, 0, 0, time.UTC)) {
		t.Errorf("/orders/42 = %+v", o)
	}
	if code, _ := exampletest.Get(t, base+"/orders/100000"); code != http.StatusNotFound {
		t.Errorf("/orders/100000: %d, want 404", code)
	}

	// A write through the database reaches the JSON view.
	pg.Exec(t, `INSERT INTO orders (id, customer_id, status, total_cents) VALUES (1001, 3, 'open', 999);
		UPDATE customers SET name = 'Renamed' WHERE id = 4`)
	exampletest.EventuallyGet(t, base+"/orders/1001", `"total_cents": 999`)
	exampletest.EventuallyGet(t, base+"/customers/4", `"name": "Renamed"`)
	if got := exampletest.GetJSON[[]Order](t, base+"/orders?customer=3"); len(got) != 6 {
		t.Errorf("/orders?customer=3 after insert: %d orders, want 6", len(got))
	}

	_, metrics := exampletest.Get(t, base+"/metrics")
	for _, want := range []string{
		`dbinformer_informer_listed_objects{informer="customers"} 20`,
		`dbinformer_informer_listed_objects{informer="orders"} 100`,
		`dbinformer_informer_lists_total{informer="orders",kind="list",result="success"} 1`,
		`dbinformer_informer_lag{informer="orders"}`,
		`dbinformer_informer_pending_notifications{handler="printer",informer="orders"}`,
		`dbinformer_informer_applied_resource_version{informer="customers"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Handlers print on their own goroutines.
	for _, want := range []string{"customers: updated 4:", "orders: inserted 1001:"} {
		for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), want); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the handler never printed %q:\n%s", want, out.String())
			}
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("run after Ctrl-C: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "stopping\n") || !strings.Contains(out.String(), "closed the source") {
		t.Errorf("no clean stop:\n%s", out.String())
	}
	if n := slots(t, pg); n != 0 {
		t.Errorf("%d replication slots left after Ctrl-C", n)
	}
	if p := publications(t, pg); len(p) != 0 {
		t.Errorf("publications left after Ctrl-C: %v", p)
	}
	pw := regexp.MustCompile(`password='([^']+)'`).FindStringSubmatch(conn)
	if pw == nil || strings.Contains(out.String(), pw[1]) {
		t.Errorf("the password appears in the output (or the test did not find it in %d bytes of connection string)", len(conn))
	}
	t.Logf("output:\n%s", out.String())
}

// The README's second setup: tables owned by someone else, a publication
// created once by their owner, and a role with only REPLICATION and SELECT.
func TestPostgresExampleWithExistingPublication(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	pg := harness.StartPostgres(t)
	if err := initTables(context.Background(), config{conn: pg.ConnString(), customers: 3, orders: 7}); err != nil {
		t.Fatal(err)
	}
	conn := pg.CreateRole(t, "shop_reader", "REPLICATION")
	pg.Exec(t, `GRANT SELECT ON public.customers, public.orders TO shop_reader;
		CREATE PUBLICATION shop_pub FOR TABLE public.customers, public.orders`)

	base, out, stop := started(t, config{conn: conn, pub: "shop_pub", listen: "127.0.0.1:0"})
	if got := exampletest.GetJSON[[]Order](t, base+"/orders?customer=1"); len(got) != 3 {
		t.Errorf("/orders?customer=1: %d orders, want 3 (1, 4, 7)", len(got))
	}
	pg.Exec(t, `DELETE FROM orders WHERE id = 4`)
	deadline := time.Now().Add(time.Minute)
	for {
		if code, _ := exampletest.Get(t, base+"/orders/4"); code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("deleted order 4 still served")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("run after Ctrl-C: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), `publication "shop_pub" kept`) {
		t.Errorf("output:\n%s", out.String())
	}
	if n := slots(t, pg); n != 0 {
		t.Errorf("%d replication slots left after Ctrl-C", n)
	}
	if p := publications(t, pg); len(p) != 1 || p[0] != "shop_pub" {
		t.Errorf("publications after Ctrl-C: %v, want the user's shop_pub only", p)
	}
}

// A role that may neither create a publication nor use an existing one
// gets an error saying so once -sync-timeout passes, instead of retrying
// in silence; nothing is left on the server.
func TestPostgresExampleMissingPrivilegeFails(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	pg := harness.StartPostgres(t)
	if err := initTables(context.Background(), config{conn: pg.ConnString(), customers: 1, orders: 1}); err != nil {
		t.Fatal(err)
	}
	conn := pg.CreateRole(t, "shop_reader", "REPLICATION")
	pg.Exec(t, `GRANT SELECT ON public.customers, public.orders TO shop_reader`)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out exampletest.Output
	err := run(ctx, config{conn: conn, listen: "127.0.0.1:0", syncTimeout: 3 * time.Second}, &out)
	if err == nil || !errors.Is(err, core.ErrSyncTimeout) ||
		!strings.Contains(err.Error(), "create publication") || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("run = %v; want the initial sync to fail naming the publication and the permission\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "serving http://") {
		t.Error("served a cache that never synced")
	}
	if n := slots(t, pg); n != 0 {
		t.Errorf("%d replication slots left", n)
	}
	if p := publications(t, pg); len(p) != 0 {
		t.Errorf("publications left: %v", p)
	}
}
