package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/dbinformer/dbinformer/examples/internal/exampletest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// TestPgController runs the program against a real Postgres: derived rows
// follow inserts, updates, an order moving between customers, deletes,
// and an edit of a derived row by hand, which the controller repairs.
func TestPgController(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the server and every connection stopped
	pg := harness.StartPostgres(t)
	connString := pg.CreateRole(t, "shop_ctrl", "REPLICATION")
	pg.Exec(t, `GRANT CREATE ON DATABASE postgres TO shop_ctrl; GRANT CREATE, USAGE ON SCHEMA public TO shop_ctrl`)
	ctx, cancel := context.WithTimeout(context.Background(), exampletest.Deadline)
	defer cancel()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Orders before the start: the initial list reconciles them.
	exec(schema)
	exec(`INSERT INTO orders (id, customer_id, total_cents) VALUES (1, 1, 100), (2, 1, 200), (3, 2, 50), (4, 3, 70)`)

	p := exampletest.Start(t, func(ctx context.Context, out io.Writer) error {
		return run(ctx, []string{"-conn", connString, "-init", "-listen", "127.0.0.1:0", "-workers", "2"}, out)
	})
	out := p.Out
	total := func(customer int) string {
		t.Helper()
		var orders, cents int64
		err := conn.QueryRow(ctx, `SELECT orders, total_cents FROM order_totals WHERE customer_id = $1`, customer).Scan(&orders, &cents)
		if err == pgx.ErrNoRows {
			return "none"
		} else if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%d/%d", orders, cents)
	}
	for _, line := range []string{
		"customer 1: 2 orders, 300 cents -> total written",
		"customer 2: 1 orders, 50 cents -> total written",
		"customer 3: 1 orders, 70 cents -> total written",
	} {
		exampletest.WaitOutput(t, out, line, 1)
	}
	if got := total(1) + " " + total(2) + " " + total(3); got != "2/300 1/50 1/70" {
		t.Errorf("order_totals: %s", got)
	}

	exec(`UPDATE orders SET total_cents = 250 WHERE id = 2`)
	exampletest.WaitOutput(t, out, "customer 1: 2 orders, 350 cents -> total written", 1)
	// An order that moves reconciles both customers.
	exec(`UPDATE orders SET customer_id = 2 WHERE id = 1`)
	exampletest.WaitOutput(t, out, "customer 1: 1 orders, 250 cents -> total written", 1)
	exampletest.WaitOutput(t, out, "customer 2: 2 orders, 150 cents -> total written", 1)
	exec(`DELETE FROM orders WHERE id = 4`)
	exampletest.WaitOutput(t, out, "customer 3: no orders -> total removed", 1)
	if got := total(3); got != "none" {
		t.Errorf("total of customer 3 after its last order went: %s", got)
	}
	// A derived row edited by hand is put right.
	exec(`UPDATE order_totals SET total_cents = 0 WHERE customer_id = 2`)
	exampletest.WaitOutput(t, out, "customer 2: 2 orders, 150 cents -> total written", 2)
	for deadline := time.Now().Add(exampletest.Deadline); total(2) != "2/150"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("total of customer 2 not repaired: %s", total(2))
		}
	}
	if strings.Count(out.String(), "customer 2: 2 orders, 150 cents -> total written") != 2 {
		t.Errorf("customer 2 written again after the repair, from its own stale state:\n%s", out.String())
	}
	_, body := exampletest.Get(t, p.BaseURL()+"/metrics")
	for _, want := range []string{
		`dbinformer_controller_reconciles_total{controller="order-totals",result="success"}`,
		`dbinformer_informer_listed_objects{informer="orders"} 4`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("run after Ctrl-C: %v", err)
	}
	if !strings.HasSuffix(out.String(), "\nstopped\n") {
		t.Errorf("no clean stop:\n%s", out.String())
	}
	t.Logf("output:\n%s", out.String())
}
