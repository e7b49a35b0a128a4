package filter_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/filter"
)

type Meta struct {
	Labels map[string]string `json:"labels"`
}

type Order struct {
	ID      int64     `db:"id"`
	Tenant  string    `db:"tenant_id" json:"tenant"`
	Status  string    `json:"status"`
	Amount  float64   `db:"amount"`
	Paid    bool      `db:"paid"`
	Qty     uint16    `db:"qty"`
	Created time.Time `db:"created_at"`
	Note    *string   `db:"note"`
	Meta    *Meta     `json:"meta"`
	V       int64     `json:"v"`
}

func TestMatch(t *testing.T) {
	note := "rush"
	o := Order{ID: 7, Tenant: "acme", Status: "paid", Amount: 12.5, Paid: true, Qty: 3,
		Created: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), Note: &note,
		Meta: &Meta{Labels: map[string]string{"app": "web"}}}
	cases := []struct {
		e    filter.Expr
		want bool
	}{
		{filter.Eq("tenant_id", "acme"), true},
		{filter.Eq("tenant", "acme"), true}, // json tag
		{filter.Eq("Tenant", "acme"), true}, // Go name
		{filter.Eq("tenant_id", "acm"), false},
		{filter.In("status", "new", "paid"), true},
		{filter.In("status", "new"), false},
		{filter.In("status"), false},
		{filter.Ge("id", 7), true},
		{filter.Gt("id", 7), false},
		{filter.Lt("amount", 13), true},
		{filter.Le("amount", 12.5), true},
		{filter.Eq("paid", true), true},
		{filter.Eq("qty", 3), true},
		{filter.Ge("created_at", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), true},
		{filter.Prefix("tenant_id", "ac"), true},
		{filter.Prefix("tenant_id", "b"), false},
		{filter.Eq("note", "rush"), true},
		{filter.Eq("meta.labels.app", "web"), true},
		{filter.Eq("meta.labels.tier", "db"), false}, // missing key: false, as NULL
		{filter.Prefix(filter.Key, "orders/"), true},
		{filter.And(filter.Eq("tenant_id", "acme"), filter.Gt("amount", 20)), false},
		{filter.Or(filter.Eq("tenant_id", "x"), filter.Gt("amount", 10)), true},
		{filter.And(), true},
		{filter.Or(), false},
		{filter.Where("big", func(o Order) bool { return o.Amount > 10 }), true},
	}
	for _, c := range cases {
		f, err := filter.New[Order](c.e)
		if err != nil {
			t.Fatalf("New(%s): %v", c.e, err)
		}
		if got := f.Match("orders/7", o); got != c.want {
			t.Errorf("Match(%s) = %v, want %v", c.e, got, c.want)
		}
	}
	// A nil pointer on the path makes a leaf false, never a panic.
	f := filter.MustNew[Order](filter.Eq("meta.labels.app", "web"))
	if f.Match("k", Order{}) {
		t.Error("a nil Meta matched")
	}
	if !(*filter.Filter[Order])(nil).Match("k", Order{}) {
		t.Error("a nil Filter does not match everything")
	}
}

func TestNewErrors(t *testing.T) {
	cases := []struct {
		e    filter.Expr
		want string
	}{
		{filter.Eq("tenant", 3), `value 3 is a int, the field is a string`},
		{filter.Eq("nope", 1), `main.Order has no field "nope"`},
		{filter.Eq("id", "7"), `value "7" is a string, the field is a int64`},
		{filter.Eq("qty", -1), `does not fit the field's uint16`},
		{filter.Eq("qty", 70000), `does not fit the field's uint16`},
		{filter.Lt("paid", true), `is a bool, which has no order`},
		{filter.Prefix("id", "1"), `Prefix needs a string field`},
		{filter.Eq("meta", "x"), `filters compare strings, numbers, bools and time.Time`},
		{filter.Eq("status.x", "y"), `status is a string, which has no field "x"`},
		{filter.Eq("id", nil), `filters have no NULL`},
		{filter.Where("wrong type", func(s string) bool { return true }), `not a func(filter_test.Order) bool`},
		{filter.Or(filter.Eq("id", 1), filter.Eq("bogus", 2)), `no field "bogus"`},
	}
	for _, c := range cases {
		_, err := filter.New[Order](c.e)
		if err == nil {
			t.Errorf("New(%s) succeeded", c.e)
			continue
		}
		msg := strings.ReplaceAll(err.Error(), "filter_test.Order has", "main.Order has")
		if !strings.Contains(msg, c.want) || !strings.Contains(err.Error(), "filter on filter_test.Order") {
			t.Errorf("New(%s) = %q, want it to say %q and name the type", c.e, err, c.want)
		}
	}
	// The expression given to New keeps its own values.
	e := filter.Eq("amount", 3)
	filter.MustNew[Order](e)
	if _, ok := e.Values[0].(int); !ok {
		t.Errorf("New changed its argument: %#v", e.Values[0])
	}
}

func TestSplit(t *testing.T) {
	f := filter.MustNew[Order](filter.And(
		filter.Prefix(filter.Key, "a/"),
		filter.Eq("status", "paid"),
		filter.Or(filter.Eq(filter.Key, "a/1"), filter.Gt("amount", 10)),
	))
	keyOnly := func(e filter.Expr) bool { return e.Field == filter.Key && e.Op == filter.OpPrefix }
	pushed, residue, err := f.Split("src", "key prefixes", keyOnly)
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed) != 1 || pushed[0].String() != `$key PREFIX "a/"` {
		t.Errorf("pushed %v", pushed)
	}
	if got := residue.String(); got != `status = "paid" AND ($key = "a/1" OR amount > 10)` {
		t.Errorf("residue %s", got)
	}
	if residue.Match("a/2", Order{Status: "paid", Amount: 1}) || !residue.Match("a/1", Order{Status: "paid"}) {
		t.Error("residue evaluates wrongly")
	}
	// Everything pushed: the residue matches everything.
	_, residue, _ = f.Split("src", "anything", func(filter.Expr) bool { return true })
	if !residue.All() || !residue.Match("x", Order{}) {
		t.Errorf("residue of a fully pushed filter: %s", residue)
	}
	// A Server condition the source cannot evaluate is refused.
	f = filter.MustNew[Order](filter.And(filter.Prefix(filter.Key, "a/"), filter.Server(filter.Eq("status", "paid"))))
	_, _, err = f.Split(`etcd prefix "/o/"`, "key prefixes and ranges", keyOnly)
	if err == nil || !strings.Contains(err.Error(), `etcd prefix "/o/" cannot evaluate status = "paid"`) || !strings.Contains(err.Error(), "drop filter.Server") {
		t.Errorf("Split with an unpushable Server condition: %v", err)
	}
}

// TestEnterLeave runs an informer over a filtered in-memory source (Wrap)
// with both queues: objects moving into the filter reach handlers as adds,
// out of it as deletes carrying their last matching state, also across a
// relist; versions that touched only filtered-out keys still advance
// WaitFor.
func TestEnterLeave(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		for _, noObj := range []bool{false, true} {
			t.Run(fmt.Sprintf("deltafifo=%v/deletesWithoutObject=%v", fifo, noObj), func(t *testing.T) {
				testEnterLeave(t, fifo, noObj)
			})
		}
	}
}

func testEnterLeave(t *testing.T, deltaFIFO, noObj bool) {
	src := memory.New[Order](memory.Options{DeletesWithoutObject: noObj})
	var v int64
	put := func(key, status string) core.ResourceVersion {
		v++
		return src.Put(key, Order{Status: status, V: v})
	}
	put("a", "paid")
	put("b", "new")
	f := filter.MustNew[Order](filter.Eq("status", "paid"))
	spy := informertest.Wrap(filter.Wrap[Order](src, f))
	rec := informertest.NewRecorder(t, func(o Order) int64 { return o.V })
	inf, _ := informertest.Run[Order](t, spy, core.InformerOptions[Order]{DeltaFIFO: deltaFIFO}, rec)
	rec.Expect("add a v=1 initial")

	put("b", "paid")  // v3: b enters
	put("a", "new")   // v4: a leaves, carrying v1
	put("a", "draft") // v5: still out
	src.Delete("b")   // b deleted, carrying v3
	src.Delete("a")   // not held
	if deltaFIFO {
		// DeltaFIFO keeps each key's order, not the order across keys.
		rec.Wait("b's add and delete, a's delete", func(log []string, _ map[string]int64) bool { return len(log) >= 4 })
		rec.ExpectSet("add b v=3", "delete a v=1", "delete b v=3")
		if l := rec.Log(); slices.Index(l, "add b v=3") > slices.Index(l, "delete b v=3") {
			t.Errorf("b's delete came before its add: %v", l)
		}
	} else {
		rec.Expect("add b v=3", "delete a v=1", "delete b v=3")
	}

	// Versions that touched only filtered-out keys advance WaitFor.
	put("c", "new")
	rv := put("d", "new")
	informertest.WaitFor(t, inf, rv)
	rec.ExpectNone()

	// Across a relist: e is cached; while the watch is down it leaves the
	// filter and f enters.
	put("e", "paid") // v8
	rec.Expect("add e v=8")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gate := spy.HoldLists()
	spy.Break(fmt.Errorf("test: %w", driver.ErrExpired))
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	put("e", "new")  // v9
	put("f", "paid") // v10
	gate.Release()
	rec.ExpectSet("add f v=10", "delete e v=8 unknown")
	if got, want := inf.Lister().Len(), 1; got != want {
		t.Errorf("cache holds %d objects, want %d", got, want)
	}
}
