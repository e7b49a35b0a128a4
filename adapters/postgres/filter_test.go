package pginformer_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
)

type keyOrder struct {
	ID     int64 `db:"id"`
	Amount int64 `db:"amount"`
	V      int64 `db:"v"`
}

type order struct {
	ID     int64  `db:"id"`
	Tenant string `db:"tenant"`
	Status string `db:"status"`
	Amount int64  `db:"amount"`
	V      int64  `db:"v"`
}

// orderModel follows one row as a filtered informer's handler must see it.
type orderModel struct {
	held bool
	v    int64
	log  []string
}

func (m *orderModel) write(key string, v int64, in bool) {
	switch {
	case in && m.held:
		m.log = append(m.log, fmt.Sprintf("update %s %d->%d", key, m.v, v))
	case in:
		m.log = append(m.log, fmt.Sprintf("add %s v=%d", key, v))
	case m.held:
		m.log = append(m.log, fmt.Sprintf("delete %s v=%d", key, m.v))
	}
	if in {
		m.v = v
	}
	m.held = in
}

// TestWhereEnterLeave: two Tables on one table of one Source (one slot),
// each with its own filter, under concurrent writers that move rows into
// and out of both filters. For REPLICA IDENTITY DEFAULT and FULL (where
// the tenant condition goes into the List's query): each key's handler log
// is exactly its enter/leave history, and each cache equals SELECT ...
// WHERE <the filter in SQL> at the LSN both informers reached.
func TestWhereEnterLeave(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(map[bool]string{false: "identity-default", true: "identity-full"}[full], func(t *testing.T) {
			testWhereEnterLeave(t, full)
		})
	}
}

func testWhereEnterLeave(t *testing.T, full bool) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, tenant text NOT NULL, status text NOT NULL, amount bigint NOT NULL, v bigint NOT NULL)`)
	if full {
		pg.Exec(t, `ALTER TABLE orders REPLICA IDENTITY FULL`)
	}
	conn := pg.Conn(t)
	ctx := ctxFor(t)
	tenants, statuses := []string{"acme", "other"}, []string{"open", "paid", "closed"}
	var version atomic.Int64
	const rows = 24
	type want struct {
		f     *filter.Filter[order]
		sql   string
		match func(tenant, status string, amount int64) bool
	}
	wants := []want{
		{
			f:     filter.MustNew[order](filter.And(filter.Eq("tenant", "acme"), filter.In("status", "open", "paid"))),
			sql:   `tenant = 'acme' AND status IN ('open', 'paid')`,
			match: func(tn, st string, _ int64) bool { return tn == "acme" && (st == "open" || st == "paid") },
		},
		{
			f:     filter.MustNew[order](filter.Or(filter.Ge("amount", 100), filter.Eq("status", "closed"))),
			sql:   `amount >= 100 OR status = 'closed'`,
			match: func(_, st string, a int64) bool { return a >= 100 || st == "closed" },
		},
	}
	models := make([]map[string]*orderModel, len(wants))
	for i := range wants {
		models[i] = map[string]*orderModel{}
	}
	apply := func(id int64, tenant, status string, amount, v int64, deleted bool, initial bool) {
		key := fmt.Sprint(id)
		for i, w := range wants {
			m := models[i][key]
			if m == nil {
				m = &orderModel{}
				models[i][key] = m
			}
			n := len(m.log)
			m.write(key, v, !deleted && w.match(tenant, status, amount))
			if initial {
				for j := n; j < len(m.log); j++ {
					m.log[j] += " initial"
				}
			}
		}
	}
	r0 := rand.New(rand.NewPCG(9, 9))
	for id := range int64(rows) {
		v := version.Add(1)
		tn, st, a := tenants[r0.IntN(2)], statuses[r0.IntN(3)], r0.Int64N(200)
		write(t, conn, `INSERT INTO orders VALUES ($1, $2, $3, $4, $5)`, id, tn, st, a, v)
		apply(id, tn, st, a, v, false, true)
	}

	src := newSource(t, pg, pginformer.Options{})
	var infs []*core.SharedIndexInformer[order]
	var recs []*informertest.Recorder[order]
	var tables []*pginformer.Table[order]
	for _, w := range wants {
		tbl, err := pginformer.NewTable[order](ctx, src, "orders", pginformer.TableOptions[order]{Where: w.f})
		if err != nil {
			t.Fatal(err)
		}
		tables = append(tables, tbl)
	}
	for _, tbl := range tables {
		rec := informertest.NewRecorder(t, func(o order) int64 { return o.V })
		inf, _ := informertest.Run[order](t, tbl, core.InformerOptions[order]{}, rec)
		infs, recs = append(infs, inf), append(recs, rec)
	}

	const writers, ops = 3, 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	for w := range writers {
		wg.Go(func() {
			wconn := pg.Conn(t)
			r := rand.New(rand.NewPCG(uint64(w), 4))
			for range ops {
				id := int64(w + writers*r.IntN(rows/writers)) // each writer owns its rows
				if r.IntN(8) == 0 {
					if _, err := wconn.Exec(ctx, `DELETE FROM orders WHERE id = $1`, id); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					apply(id, "", "", 0, 0, true, false)
					mu.Unlock()
					continue
				}
				v := version.Add(1)
				tn, st, a := tenants[r.IntN(2)], statuses[r.IntN(3)], r.Int64N(200)
				if _, err := wconn.Exec(ctx, `INSERT INTO orders VALUES ($1, $2, $3, $4, $5)
					ON CONFLICT (id) DO UPDATE SET tenant = $2, status = $3, amount = $4, v = $5`, id, tn, st, a, v); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				apply(id, tn, st, a, v, false, false)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	lsn := currentLSN(t, conn)
	for i, w := range wants {
		informertest.WaitFor(t, infs[i], lsn)
		for key, m := range models[i] {
			recs[i].Wait(key, func(log []string, _ map[string]int64) bool {
				var got []string
				for _, l := range log {
					if fs := strings.Fields(l); len(fs) > 1 && fs[1] == key {
						got = append(got, l)
					}
				}
				return slices.Equal(got, m.log)
			})
		}
		truth := map[string]int64{}
		rows, _ := conn.Query(ctx, `SELECT id::text, v FROM orders WHERE `+w.sql)
		for rows.Next() {
			var k string
			var v int64
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			truth[k] = v
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, o := range infs[i].Lister().List(nil) {
			got[fmt.Sprint(o.ID)] = o.V
		}
		if !maps.Equal(got, truth) {
			t.Errorf("filter %s: cache differs from SELECT ... WHERE %s:\n cache %v\n truth %v", w.f, w.sql, got, truth)
		}
		if len(truth) == 0 {
			t.Errorf("filter %s matched nothing at the end", w.f)
		}
	}
}

// TestWhereRefused: a condition that must be pushed down (filter.Server)
// on a table whose replica identity forbids it names the fix; on a FULL
// table it is pushed down.
func TestWhereRefused(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, tenant text NOT NULL, status text NOT NULL, amount bigint NOT NULL, v bigint NOT NULL)`)
	src := newSource(t, pg, pginformer.Options{PublishRowFilter: true})
	ctx := ctxFor(t)
	f := filter.MustNew[order](filter.Server(filter.Eq("tenant", "acme")))
	_, err := pginformer.NewTable[order](ctx, src, "orders", pginformer.TableOptions[order]{Where: f})
	if err == nil || !strings.Contains(err.Error(), "REPLICA IDENTITY FULL") || !strings.Contains(err.Error(), `tenant = "acme"`) {
		t.Errorf("a Server condition on a DEFAULT-identity table: %v", err)
	}
	g := filter.MustNew[order](filter.Server(filter.Where("big", func(o order) bool { return o.Amount > 10 })))
	if _, err := pginformer.NewTable[order](ctx, src, "orders", pginformer.TableOptions[order]{Where: g}); err == nil || !strings.Contains(err.Error(), "cannot evaluate WHERE(big)") {
		t.Errorf("a Server predicate: %v", err)
	}
	pg.Exec(t, `ALTER TABLE orders REPLICA IDENTITY FULL`)
	if _, err := pginformer.NewTable[order](ctx, src, "orders", pginformer.TableOptions[order]{Where: f}); err != nil {
		t.Errorf("a Server condition on a FULL table: %v", err)
	}
}

// TestWherePublicationRowFilter: on Postgres 15+, a Table whose filter has
// conditions on replica identity columns gets them as the publication's
// row filter, and writes that touch only rows outside it reach no Table
// (StreamedChanges does not move) while WaitFor still reaches their LSN.
// A condition on another column of a DEFAULT-identity table stays
// client-side (every change is streamed and decoded); marked
// filter.Server it is refused, naming the fix.
func TestWherePublicationRowFilter(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE full_orders (id bigint PRIMARY KEY, tenant text NOT NULL, status text NOT NULL, amount bigint NOT NULL, v bigint NOT NULL);
		ALTER TABLE full_orders REPLICA IDENTITY FULL;
		CREATE TABLE key_orders (id bigint PRIMARY KEY, amount bigint NOT NULL, v bigint NOT NULL);
		CREATE TABLE plain_orders (id bigint PRIMARY KEY, tenant text NOT NULL, status text NOT NULL, amount bigint NOT NULL, v bigint NOT NULL)`)
	conn := pg.Conn(t)
	ctx := ctxFor(t)
	for _, tbl := range []string{"full_orders", "plain_orders"} {
		write(t, conn, `INSERT INTO `+tbl+` SELECT i, CASE WHEN i % 10 = 0 THEN 'acme' ELSE 'other' END, 'open', i, 1 FROM generate_series(1, 100) i`)
	}
	write(t, conn, `INSERT INTO key_orders SELECT i, i, 1 FROM generate_series(1, 100) i`)
	src := newSource(t, pg, pginformer.Options{PublishRowFilter: true})
	tenant := filter.MustNew[order](filter.Eq("tenant", "acme"))
	full, err := pginformer.NewTable[order](ctx, src, "full_orders", pginformer.TableOptions[order]{Where: tenant})
	if err != nil {
		t.Fatal(err)
	}
	// Only fixed-length columns: conditions may go into the List's query
	// under REPLICA IDENTITY DEFAULT; of them only the one on the key into
	// the row filter.
	byKey, err := pginformer.NewTable[keyOrder](ctx, src, "key_orders", pginformer.TableOptions[keyOrder]{Where: filter.MustNew[keyOrder](filter.And(filter.Le("id", 10), filter.Ge("amount", 0)))})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := pginformer.NewTable[order](ctx, src, "plain_orders", pginformer.TableOptions[order]{Where: tenant})
	if err != nil {
		t.Fatal(err)
	}
	_, err = pginformer.NewTable[order](ctx, src, "plain_orders", pginformer.TableOptions[order]{Where: filter.MustNew[order](filter.Server(filter.Eq("tenant", "acme")))})
	if err == nil || !strings.Contains(err.Error(), "REPLICA IDENTITY FULL") {
		t.Errorf("a Server condition on a non-key column of a DEFAULT table: %v", err)
	}
	_, err = pginformer.NewTable[keyOrder](ctx, src, "key_orders", pginformer.TableOptions[keyOrder]{Where: filter.MustNew[keyOrder](filter.Server(filter.Ge("amount", 0)))})
	if err == nil || !strings.Contains(err.Error(), "REPLICA IDENTITY FULL, or filter on key columns") {
		t.Errorf("a Server condition on a non-key column of a DEFAULT table: %v", err)
	}
	type tc struct {
		name   string
		other  string
		synced func() (cached int, streamed func() int64, waitFor func(core.ResourceVersion))
	}
	run := func(tbl *pginformer.Table[order]) func() (int, func() int64, func(core.ResourceVersion)) {
		return func() (int, func() int64, func(core.ResourceVersion)) {
			inf, _ := informertest.Run[order](t, tbl, core.InformerOptions[order]{})
			return inf.Lister().Len(), tbl.StreamedChanges, func(rv core.ResourceVersion) { informertest.WaitFor(t, inf, rv) }
		}
	}
	var fullInf *core.SharedIndexInformer[order]
	cases := []tc{
		{"full_orders", "tenant = 'other'", func() (int, func() int64, func(core.ResourceVersion)) {
			inf, _ := informertest.Run[order](t, full, core.InformerOptions[order]{})
			fullInf = inf
			return inf.Lister().Len(), full.StreamedChanges, func(rv core.ResourceVersion) { informertest.WaitFor(t, inf, rv) }
		}},
		{"key_orders", "id > 10", func() (int, func() int64, func(core.ResourceVersion)) {
			inf, _ := informertest.Run[keyOrder](t, byKey, core.InformerOptions[keyOrder]{})
			return inf.Lister().Len(), byKey.StreamedChanges, func(rv core.ResourceVersion) { informertest.WaitFor(t, inf, rv) }
		}},
		{"plain_orders", "tenant = 'other'", run(plain)},
	}
	streamed := make([]func() int64, len(cases))
	waits := make([]func(core.ResourceVersion), len(cases))
	for i, c := range cases {
		var n int
		n, streamed[i], waits[i] = c.synced()
		if n != 10 {
			t.Errorf("%s: %d rows cached, want 10", c.name, n)
		}
	}
	var filters map[string]string = map[string]string{}
	rows, _ := conn.Query(ctx, `SELECT tablename, coalesce(rowfilter, '') FROM pg_publication_tables WHERE pubname = $1`, src.PublicationName())
	for rows.Next() {
		var n, f string
		if err := rows.Scan(&n, &f); err != nil {
			t.Fatal(err)
		}
		filters[n] = f
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if filters["full_orders"] == "" || filters["key_orders"] == "" || filters["plain_orders"] != "" {
		t.Errorf("publication row filters %q: want full_orders and key_orders filtered, plain_orders not", filters)
	}
	for i, c := range cases {
		before := streamed[i]()
		lsn := write(t, conn, `UPDATE `+c.name+` SET v = v + 1, amount = amount + 1 WHERE `+c.other)
		waits[i](lsn)
		got := streamed[i]() - before
		if c.name == "plain_orders" {
			if got != 90 {
				t.Errorf("%s (no row filter): %d changes streamed, want all 90", c.name, got)
			}
		} else if got != 0 {
			t.Errorf("%s: %d changes of rows outside the row filter were streamed, want 0", c.name, got)
		}
		t.Logf("%s: row filter %q, changes streamed for 90 non-matching updates: %d", c.name, filters[c.name], got)
	}
	// A row that enters and one that leaves the row filter arrive as an
	// add and a delete.
	rec := informertest.NewRecorder(t, func(o order) int64 { return o.V })
	if _, err := fullInf.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	rec.Wait("the replay", func(log []string, _ map[string]int64) bool { return len(log) == 10 })
	write(t, conn, `UPDATE full_orders SET tenant = 'acme', v = 7 WHERE id = 11`)
	lsn := write(t, conn, `UPDATE full_orders SET tenant = 'other', v = 8 WHERE id = 10`)
	informertest.WaitFor(t, fullInf, lsn)
	rec.Wait("enter and leave", func(log []string, _ map[string]int64) bool {
		return slices.Contains(log, "add 11 v=7") && slices.Contains(log, "delete 10 v=1")
	})
}
