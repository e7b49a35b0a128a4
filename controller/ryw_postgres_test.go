package controller_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// Row is a row of the Postgres test table.
type Row struct {
	ID       int64 `db:"id"`
	Spec     int64 `db:"spec"`
	Observed int64 `db:"observed"`
}

// TestReadYourWritesPostgres is TestReadYourWrites on a real Postgres,
// where versions are WAL positions: the reconcile records the WAL insert
// position after its commit, and its reads — and the next reconcile of
// the key, asked for at once — see the write.
func TestReadYourWritesPostgres(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE rows (id bigint PRIMARY KEY, spec bigint NOT NULL, observed bigint NOT NULL DEFAULT 0)`)
	ctx := testCtx(t)
	src, err := pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	table, err := pginformer.NewTable[Row](ctx, src, "rows", pginformer.TableOptions[Row]{})
	if err != nil {
		t.Fatal(err)
	}
	inf := core.NewSharedIndexInformer[Row](table, core.InformerOptions[Row]{Name: "rows"})
	conn := pg.Conn(t)
	var connMu sync.Mutex // one connection, shared by the workers
	const keys, specs = 10, 5
	var mu sync.Mutex
	writes := map[string]int{}
	stale := 0
	var c *controller.Controller[string]
	r := controller.Func[string](func(ctx context.Context, key string) (controller.Result, error) {
		row, ok, err := controller.Get(ctx, inf, key)
		if err != nil || !ok || row.Observed == row.Spec {
			return controller.Result{}, err
		}
		var lsn int64
		connMu.Lock()
		_, err = conn.Exec(ctx, `UPDATE rows SET observed = $2 WHERE id = $1`, row.ID, row.Spec)
		if err == nil {
			err = conn.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&lsn)
		}
		connMu.Unlock()
		if err != nil {
			return controller.Result{}, err
		}
		controller.Wrote(ctx, inf, core.ResourceVersion(lsn))
		again, _, err := controller.Get(ctx, inf, key)
		if err != nil {
			return controller.Result{}, err
		}
		mu.Lock()
		writes[key]++
		if again.Observed != row.Spec {
			stale++
		}
		mu.Unlock()
		c.Enqueue(key)
		return controller.Result{}, nil
	})
	c = controller.New("ryw-pg", r, controller.Options[string]{Workers: 4})
	if err := controller.Watch(c, inf, controller.ObjectKey[Row](), controller.WatchOptions[Row]{
		Predicates: []controller.Predicate[Row]{controller.FieldChanged(func(r Row) int64 { return r.Spec })},
	}); err != nil {
		t.Fatal(err)
	}
	stopInf := run(t, inf.Run)
	stopC := run(t, c.Run)
	defer func() { _ = stopC(); c.ShutDown(); _ = stopInf() }()
	for s := 1; s <= specs; s++ {
		connMu.Lock()
		for k := range keys {
			if _, err := conn.Exec(ctx, `INSERT INTO rows (id, spec) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET spec = EXCLUDED.spec`, k, s); err != nil {
				t.Fatal(err)
			}
		}
		connMu.Unlock()
		eventually(t, "every row observed", func() bool {
			for k := range keys {
				if row, _ := inf.Lister().Get(strconv.Itoa(k)); row.Observed != int64(s) {
					return false
				}
			}
			return c.Queue().Len() == 0
		})
	}
	_ = stopC()
	mu.Lock()
	defer mu.Unlock()
	if stale != 0 {
		t.Errorf("%d reads right after a write missed it", stale)
	}
	for k := range keys {
		if n := writes[strconv.Itoa(k)]; n > specs || n == 0 {
			t.Errorf("row %d written %d times for %d spec changes", k, n, specs)
		}
	}
}
