package pginformer_test

import (
	"context"
	"fmt"
	"testing"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pgx/v5"
)

// runWarmToast is runWarm for toastRow: one "process" with a
// checkpointing informer on a permanent slot.
func runWarmToast(t *testing.T, pg *harness.Postgres, table, dir string) (*core.SharedIndexInformer[toastRow], *informertest.Spy[toastRow], *informertest.Errors, func()) {
	t.Helper()
	src := newSource(t, pg, pginformer.Options{PermanentSlot: true, Slot: "warm_" + table})
	spy := informertest.Wrap[toastRow](newTable[toastRow](t, src, table))
	store, err := checkpoint.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	errs := &informertest.Errors{}
	inf := core.NewSharedIndexInformer[toastRow](spy, core.InformerOptions[toastRow]{
		Name:         table,
		ErrorHandler: errs.Add,
		Backoff:      core.Backoff{Initial: 50e6, Max: 1e9},
		Checkpoint:   &core.CheckpointOptions[toastRow]{Store: store, Interval: -1},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		src.Close()
	}
	t.Cleanup(stop)
	sctx, scancel := context.WithTimeout(ctx, waitLong)
	defer scancel()
	if err := inf.WaitForCacheSync(sctx); err != nil {
		t.Fatalf("WaitForCacheSync: %v (errors: %v)", err, errs.All())
	}
	return inf, spy, errs, stop
}

// toastCacheMatches compares every field of every cached row with the
// table.
func toastCacheMatches(t *testing.T, conn *pgx.Conn, table string, inf *core.SharedIndexInformer[toastRow]) {
	t.Helper()
	rows, _ := conn.Query(ctxFor(t), "SELECT id, big, n FROM "+pgx.Identifier{table}.Sanitize())
	want, err := pgx.CollectRows(rows, pgx.RowToStructByName[toastRow])
	if err != nil {
		t.Fatal(err)
	}
	if n := inf.Indexer().Len(); n != len(want) {
		t.Fatalf("cache has %d rows, table %d", n, len(want))
	}
	for _, w := range want {
		got, ok := inf.Lister().Get(fmt.Sprint(w.ID))
		if !ok || got != w {
			t.Fatalf("key %d: cache id=%d n=%d big of %d bytes (present %v), table n=%d big of %d bytes", w.ID, got.ID, got.N, len(got.Big), ok, w.N, len(w.Big))
		}
	}
}

// A table with a TOASTed text column restarts warm under REPLICA IDENTITY
// DEFAULT as under FULL: an update beside the TOASTed value right after
// the restart (pgoutput sends the value as unchanged, which the restored
// table does not know) is filled in from the cached object, and the cache
// equals the table, field by field, with no list.
func TestWarmRestartToast(t *testing.T) {
	pg := harness.StartPostgres(t)
	for _, full := range []bool{false, true} {
		name := "default identity"
		if full {
			name = "full identity"
		}
		t.Run(name, func(t *testing.T) {
			table := fmt.Sprintf("warm_toast_%d", seqNo())
			ident := pgx.Identifier{table}.Sanitize()
			pg.Exec(t, "CREATE TABLE "+ident+" (id int PRIMARY KEY, big text NOT NULL, n int NOT NULL); ALTER TABLE "+ident+" ALTER COLUMN big SET STORAGE EXTERNAL")
			if full {
				pg.Exec(t, "ALTER TABLE "+ident+" REPLICA IDENTITY FULL")
			}
			conn := pg.Conn(t)
			write(t, conn, "INSERT INTO "+ident+" SELECT g, repeat(md5(g::text), 200), 0 FROM generate_series(1, 20) g")
			var toastSize int64
			if err := conn.QueryRow(ctxFor(t), "SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = $1::regclass", ident).Scan(&toastSize); err != nil {
				t.Fatal(err)
			}
			if toastSize < 20*6400 {
				t.Fatalf("TOAST table of %s holds %d bytes: the big values are not stored out of line as the test needs", table, toastSize)
			}
			dir := t.TempDir()

			inf1, spy1, _, stop1 := runWarmToast(t, pg, table, dir)
			rv := write(t, conn, "UPDATE "+ident+" SET n = 1 WHERE id <= 5")
			waitFor(t, inf1, rv)
			if spy1.Lists() != 1 {
				t.Errorf("first start: %d lists, want 1", spy1.Lists())
			}
			stop1()

			// While no informer runs: beside the TOASTed value, of it, a
			// delete and a new row.
			write(t, conn, "UPDATE "+ident+" SET n = 2 WHERE id IN (1, 6)")
			write(t, conn, "UPDATE "+ident+" SET big = repeat(md5('x' || id), 200) WHERE id = 7")
			write(t, conn, "DELETE FROM "+ident+" WHERE id = 8")
			write(t, conn, "INSERT INTO "+ident+" VALUES (21, repeat(md5('21'), 200), 0)")

			inf2, spy2, errs2, _ := runWarmToast(t, pg, table, dir)
			// Right after the restart: beside the TOASTed value, of a row
			// restored (2), changed while down (1, 7), new (21).
			rv = write(t, conn, "UPDATE "+ident+" SET n = n + 10 WHERE id IN (1, 2, 7, 21)")
			waitFor(t, inf2, rv)
			rv = write(t, conn, "UPDATE "+ident+" SET n = n + 10 WHERE id IN (2, 3)")
			waitFor(t, inf2, rv)
			toastCacheMatches(t, conn, table, inf2)
			if n := spy2.Lists(); n != 0 {
				t.Errorf("warm start listed %d times, want 0 (errors: %v)", n, errs2.All())
			}
			if e := errs2.All(); len(e) != 0 {
				t.Errorf("errors after the warm start: %v", e)
			}
		})
	}
}

// plainLW hides from its table that its consumer fills from a cache, as a
// consumer other than the core's informer (a relay) would.
type plainLW[T any] struct{ driver.ListerWatcher[T] }

func (p plainLW[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	opts.Fills = false
	return p.ListerWatcher.Watch(ctx, from, opts)
}

// A table whose consumer fills unchanged TOASTed values from its cache
// keeps none of them itself; one whose consumer does not keeps each
// out-of-line value. Both caches equal the table after updates beside the
// TOASTed column, and after an update that moves a row to a new primary
// key beside it (which the filling table, not knowing the value, relists
// for). The figures are logged (go test -run TestToastKeptPerKey -v).
func TestToastKeptPerKey(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE toast_kept (id int PRIMARY KEY, big text NOT NULL, n int NOT NULL);
		ALTER TABLE toast_kept ALTER COLUMN big SET STORAGE EXTERNAL;
		INSERT INTO toast_kept SELECT g, repeat(md5(g::text), 200), 0 FROM generate_series(1, 50) g`)
	conn := pg.Conn(t)
	tFill := newTable[toastRow](t, newSource(t, pg, pginformer.Options{}), "toast_kept")
	tPlain := newTable[toastRow](t, newSource(t, pg, pginformer.Options{}), "toast_kept")
	spy := informertest.Wrap[toastRow](tFill)
	infFill, _ := informer[toastRow](t, spy, nil)
	infPlain, _ := informer[toastRow](t, plainLW[toastRow]{tPlain}, nil)
	rv := write(t, conn, "UPDATE toast_kept SET n = n + 1 WHERE id <= 10")
	waitFor(t, infFill, rv)
	waitFor(t, infPlain, rv)
	toastCacheMatches(t, conn, "toast_kept", infFill)
	toastCacheMatches(t, conn, "toast_kept", infPlain)
	fk, fb := pginformer.KeptToast(tFill)
	pk, pb := pginformer.KeptToast(tPlain)
	t.Logf("TOAST values kept for 50 rows of 6,400-byte out-of-line text: filling consumer %d keys, %d bytes; plain consumer %d keys, %d bytes", fk, fb, pk, pb)
	if fk != 0 || fb != 0 {
		t.Errorf("the table whose consumer fills from its cache keeps %d keys, %d bytes; want none", fk, fb)
	}
	if pk != 50 || pb != 50*6400 {
		t.Errorf("the table whose consumer does not fill keeps %d keys, %d bytes; want 50, %d", pk, pb, 50*6400)
	}

	rv = write(t, conn, "UPDATE toast_kept SET id = 1000, n = 7 WHERE id = 3")
	waitFor(t, infFill, rv)
	waitFor(t, infPlain, rv)
	toastCacheMatches(t, conn, "toast_kept", infFill)
	toastCacheMatches(t, conn, "toast_kept", infPlain)
	if n := spy.Lists(); n != 2 {
		t.Errorf("the filling table listed %d times, want 2 (once more for the key that moved beside its TOASTed value)", n)
	}
}
