package main

import (
	"context"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/examples/internal/exampletest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// The README's warm restart: with -checkpoint the second start loads the
// checkpoints, lists nothing, and still serves what changed while the
// program was down.
func TestPostgresExampleWarmRestart(t *testing.T) {
	pg := harness.StartPostgres(t)
	cfg := config{conn: pg.ConnString(), listen: "127.0.0.1:0", init: true, customers: 20, orders: 100, checkpoint: t.TempDir(), slot: "example_warm"}
	t.Cleanup(func() { pgtest.DropSlot(context.Background(), pg.ConnString(), cfg.slot) })

	_, out, stop := started(t, cfg)
	if !strings.Contains(out.String(), "synced 20 customers and 100 orders") || strings.Contains(out.String(), "warm start") {
		t.Errorf("first start: output %q, want a cold sync of 20 customers and 100 orders", out)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		t.Logf("first start's output:\n%s", out)
	}
	if !strings.Contains(out.String(), "kept for the next warm start") {
		t.Errorf("first start's output lacks the kept slot: %q", out)
	}

	pg.Exec(t, `INSERT INTO public.customers VALUES (21, 'Customer 21', 'customer21@example.com'); UPDATE public.orders SET status = 'paid' WHERE id = 42`)
	cfg.init = false
	base, out, stop := started(t, cfg)
	for _, want := range []string{
		"synced 21 customers and 100 orders",
		"customers: warm start from the checkpoint at version",
		"orders: warm start from the checkpoint at version",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("second start's output lacks %q: %q", want, out)
		}
	}
	if strings.Contains(out.String(), "listed") {
		t.Errorf("second start listed: %q", out)
	}
	if c := exampletest.GetJSON[Customer](t, base+"/customers/21"); c.Name != "Customer 21" {
		t.Errorf("/customers/21 = %+v", c)
	}
	if o := exampletest.GetJSON[Order](t, base+"/orders/42"); o.Status != "paid" {
		t.Errorf("/orders/42 = %+v", o)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		t.Logf("second start's output:\n%s", out)
	}
}
