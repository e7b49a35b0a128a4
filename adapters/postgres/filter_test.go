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
	src := newSource(t, pg, pginformer.Options{})
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
