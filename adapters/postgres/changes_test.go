package pginformer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

type toastRow struct {
	ID  int    `db:"id"`
	Big string `db:"big"`
	N   int    `db:"n"`
}

// TestToastUnchanged: a >8 kB text stored out of line, then an update of
// another column: the cached big value stays, for a row from the snapshot
// and a row from the stream, under DEFAULT and FULL identity.
func TestToastUnchanged(t *testing.T) {
	pg := harness.StartPostgres(t)
	// STORAGE EXTERNAL: stored out of line, uncompressed, once the row
	// exceeds the TOAST threshold (about 2 kB).
	pg.Exec(t, `CREATE TABLE toast_d (id int PRIMARY KEY, big text NOT NULL, n int NOT NULL);
		CREATE TABLE toast_f (id int PRIMARY KEY, big text NOT NULL, n int NOT NULL);
		ALTER TABLE toast_d ALTER COLUMN big SET STORAGE EXTERNAL;
		ALTER TABLE toast_f ALTER COLUMN big SET STORAGE EXTERNAL;
		ALTER TABLE toast_f REPLICA IDENTITY FULL;
		INSERT INTO toast_d SELECT 1, string_agg(md5(random()::text), ''), 0 FROM generate_series(1, 400);
		INSERT INTO toast_f SELECT * FROM toast_d`)
	conn := pg.Conn(t)
	src := newSource(t, pg, pginformer.Options{})
	tD, tF := newTable[toastRow](t, src, "toast_d"), newTable[toastRow](t, src, "toast_f")
	infD, recD := informer[toastRow](t, tD, nil)
	infF, recF := informer[toastRow](t, tF, nil)
	write(t, conn, `INSERT INTO toast_d SELECT 2, string_agg(md5(random()::text), ''), 0 FROM generate_series(1, 400);
		INSERT INTO toast_f SELECT * FROM toast_d WHERE id = 2`)
	rv := write(t, conn, "UPDATE toast_d SET n = n + 1; UPDATE toast_f SET n = n + 1")
	rv2 := write(t, conn, "UPDATE toast_d SET n = n + 1; UPDATE toast_f SET n = n + 1")
	var toastSize int64
	if err := conn.QueryRow(ctxFor(t), "SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE oid = 'toast_d'::regclass").Scan(&toastSize); err != nil {
		t.Fatal(err)
	}
	if toastSize < 16000 {
		t.Fatalf("TOAST table of toast_d holds %d bytes: the big values are not stored out of line as the test needs", toastSize)
	}
	for _, c := range []struct {
		inf *core.SharedIndexInformer[toastRow]
		rec *recorder[toastRow]
		tbl string
	}{{infD, recD, "toast_d"}, {infF, recF, "toast_f"}} {
		waitFor(t, c.inf, max(rv, rv2))
		for _, id := range []int{1, 2} {
			var big string
			if err := conn.QueryRow(ctxFor(t), "SELECT big FROM "+c.tbl+" WHERE id = $1", id).Scan(&big); err != nil {
				t.Fatal(err)
			}
			got, ok := c.inf.Lister().Get(fmt.Sprint(id))
			if !ok || got.N != 2 || got.Big != big || len(big) < 8000 {
				t.Errorf("%s/%d: cached n=%d len(big)=%d, want n=2 and the %d-byte value", c.tbl, id, got.N, len(got.Big), len(big))
			}
		}
		c.rec.mu.Lock()
		for _, err := range c.rec.errs {
			t.Errorf("%s: informer error: %v", c.tbl, err)
		}
		c.rec.mu.Unlock()
	}
}

// TestTruncateAlterCompositeKey: TRUNCATE empties the cache; ALTER TABLE
// ADD COLUMN shows up in the map form; composite keys with '/' in them;
// a primary-key update moves the object.
func TestTruncateAlterCompositeKey(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE ck (a int, b text, v text, PRIMARY KEY (a, b));
		INSERT INTO ck VALUES (1, 'x/y', 'one'), (1, 'x', 'two'), (2, 'a\b', 'three')`)
	conn := pg.Conn(t)
	src := newSource(t, pg, pginformer.Options{})
	var mu sync.Mutex
	var deleted []string
	inf, _ := informer[map[string]any](t, newTable[map[string]any](t, src, "ck"), core.ResourceEventHandlerFuncs[map[string]any]{
		DeleteFunc: func(key string, _ map[string]any, _ bool) {
			mu.Lock()
			deleted = append(deleted, key)
			mu.Unlock()
		},
	})
	keys := inf.Indexer().ListKeys()
	want := map[string]bool{`1/x\/y`: true, `1/x`: true, `2/a\\b`: true}
	if len(keys) != 3 {
		t.Fatalf("keys %q", keys)
	}
	for _, k := range keys {
		if !want[k] {
			t.Errorf("unexpected key %q (want one of %v)", k, want)
		}
	}
	rv := write(t, conn, "UPDATE ck SET b = 'moved' WHERE a = 1 AND b = 'x'")
	waitFor(t, inf, rv)
	if _, ok := inf.Lister().Get("1/x"); ok {
		t.Error("old key 1/x still cached after a primary-key update")
	}
	if got, ok := inf.Lister().Get("1/moved"); !ok || got["v"] != "two" {
		t.Errorf("new key 1/moved = %v, %v", got, ok)
	}
	write(t, conn, "ALTER TABLE ck ADD COLUMN extra int DEFAULT 5")
	rv = write(t, conn, "UPDATE ck SET v = 'three!' WHERE a = 2")
	waitFor(t, inf, rv)
	if got, _ := inf.Lister().Get(`2/a\\b`); got["extra"] != int32(5) || got["v"] != "three!" {
		t.Errorf("after ADD COLUMN: %v", got)
	}
	rv = write(t, conn, "TRUNCATE ck")
	waitFor(t, inf, rv)
	if n := inf.Indexer().Len(); n != 0 {
		t.Errorf("cache holds %d objects after TRUNCATE", n)
	}
	// WaitFor covers the cache; handlers run on their own goroutines, so
	// their deletes are awaited. Every key of the truncated table must come:
	// the three left after the primary-key move, besides 1/x from the move.
	eventually(t, "handlers see a delete for every truncated key", func() error {
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]bool{}
		for _, k := range deleted {
			seen[k] = true
		}
		for _, k := range []string{`1/x\/y`, `1/moved`, `2/a\\b`} {
			if !seen[k] {
				return fmt.Errorf("no delete for %q; handlers saw %q", k, deleted)
			}
		}
		return nil
	})
	rv = write(t, conn, "INSERT INTO ck VALUES (9, 'z', 'after')")
	waitFor(t, inf, rv)
	if inf.Indexer().Len() != 1 {
		t.Errorf("after TRUNCATE and INSERT the cache has %d objects", inf.Indexer().Len())
	}
}

// TestLargeTransaction: one transaction of 100k rows arrives whole.
func TestLargeTransaction(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL)`)
	conn := pg.Conn(t)
	src := newSource(t, pg, pginformer.Options{})
	var mu sync.Mutex
	batches := 0
	inf, _ := informer[kv](t, newTable[kv](t, src, "kv"), core.ResourceEventHandlerFuncs[kv]{
		AddFunc: func(string, kv, bool) { mu.Lock(); batches++; mu.Unlock() },
	})
	rv := write(t, conn, "INSERT INTO kv SELECT g, 'v' || g FROM generate_series(1, 100000) g")
	waitFor(t, inf, rv)
	if n := inf.Indexer().Len(); n != 100000 {
		t.Fatalf("cache has %d rows, want 100000", n)
	}
	if got, _ := inf.Lister().Get("77777"); got.V != "v77777" {
		t.Errorf("row 77777 = %+v", got)
	}
	rv = write(t, conn, "UPDATE kv SET v = 'u' WHERE id <= 100000")
	waitFor(t, inf, rv)
	if got, _ := inf.Lister().Get("100000"); got.V != "u" {
		t.Errorf("row 100000 after the big update = %+v", got)
	}
}

// TestConfirmedFlushAdvancesOnUnwatchedWrites: the slot's confirmed
// position follows writes to a table the source does not watch, so WAL
// does not pile up.
func TestConfirmedFlushAdvancesOnUnwatchedWrites(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL); CREATE TABLE noise (id serial PRIMARY KEY, v text NOT NULL)`)
	conn := pg.Conn(t)
	src := newSource(t, pg, pginformer.Options{})
	informer[kv](t, newTable[kv](t, src, "kv"), nil)
	var target core.ResourceVersion
	for range 20 {
		target = write(t, conn, "INSERT INTO noise (v) SELECT 'x' FROM generate_series(1, 100)")
	}
	eventually(t, "confirmed_flush_lsn reaches the last unwatched write", func() error {
		var lsn pglogrepl.LSN
		if err := conn.QueryRow(ctxFor(t), "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1", src.SlotName()).Scan(&lsn); err != nil {
			return err
		}
		if core.ResourceVersion(lsn) < target {
			return fmt.Errorf("confirmed_flush_lsn %s < %s", lsn, pglogrepl.LSN(target))
		}
		return nil
	})
}

// TestFailFast: each misconfiguration is refused at start with a message
// that says what to change, and never shows the password.
func TestFailFast(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE nopk (id int, v text NOT NULL);
		CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL);
		CREATE TABLE secret (id int PRIMARY KEY)`)
	ctx := ctxFor(t)
	check := func(name string, err error, want string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error, want one containing %q", name, want)
			return
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q does not say %q", name, err, want)
		}
		if strings.Contains(err.Error(), pg.Password) {
			t.Errorf("%s: error shows the password: %q", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	src := newSource(t, pg, pginformer.Options{})
	_, err := pginformer.NewTable[kv](ctx, src, "missing", pginformer.TableOptions[kv]{})
	check("unknown table", err, "does not exist")
	_, err = pginformer.NewTable[kv](ctx, src, "nopk", pginformer.TableOptions[kv]{})
	check("no primary key", err, "no primary key")
	type wrong struct {
		ID int64 `db:"id"`
		V  int   `db:"v"`
	}
	_, err = pginformer.NewTable[wrong](ctx, src, "kv", pginformer.TableOptions[wrong]{})
	check("column type without mapping", err, `column "v" (text) holds values that field V (int) cannot`)
	type extra struct {
		ID    int64 `db:"id"`
		Other string
	}
	_, err = pginformer.NewTable[extra](ctx, src, "kv", pginformer.TableOptions[extra]{})
	check("field without column", err, "no column for field Other")

	noRepl := pg.CreateRole(t, "norepl", "NOREPLICATION")
	_, err = pginformer.NewSource(ctx, noRepl, pginformer.Options{})
	check("role without REPLICATION", err, "REPLICATION")

	repl := pg.CreateRole(t, "repl_noselect", "REPLICATION")
	rsrc, err := pginformer.NewSource(ctx, repl, pginformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rsrc.Close()
	_, err = pginformer.NewTable[kv](ctx, rsrc, "secret", pginformer.TableOptions[kv]{})
	check("no SELECT", err, "GRANT SELECT")

	bad := strings.Replace(pg.ConnString(), pg.Password, pg.Password+"x", 1)
	_, err = pginformer.NewSource(ctx, bad, pginformer.Options{})
	check("wrong password", err, "password authentication failed")
	_, err = pginformer.NewSource(ctx, "host=127.0.0.1 port=notaport password="+pg.Password, pginformer.Options{})
	check("unparsable connection string", err, "cannot be parsed")

	_, err = pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{PermanentSlot: true})
	check("permanent slot without a name", err, "needs Options.Slot")
	_, err = pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{Slot: `bad"slot`})
	check("slot name with a quote", err, "is not a replication slot name")
	_, err = pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{Publication: strings.Repeat("p", 64)})
	check("publication name too long", err, "longer than Postgres's 63-byte names")

	pg.Exec(t, "ALTER SYSTEM SET wal_level = replica")
	pg.Restart(t, "fast")
	_, err = pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{})
	check("wal_level", err, "wal_level = logical")
}

// TestQuotedTableName: a table whose name holds a quote, a semicolon and a
// space is quoted everywhere (publication, List, stream).
func TestQuotedTableName(t *testing.T) {
	pg := harness.StartPostgres(t)
	name := `we"ird; DROP TABLE kv; --'`
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL); CREATE TABLE `+pgx.Identifier{name}.Sanitize()+` (id bigint PRIMARY KEY, v text NOT NULL);
		INSERT INTO `+pgx.Identifier{name}.Sanitize()+` VALUES (1, 'one')`)
	conn := pg.Conn(t)
	src := newSource(t, pg, pginformer.Options{Publication: `pub"; x`, CreatePublication: true, Slot: "slot_ok"})
	inf, _ := informer[kv](t, newTable[kv](t, src, name), nil)
	rv := write(t, conn, `INSERT INTO `+pgx.Identifier{name}.Sanitize()+` VALUES (2, 'two')`)
	waitFor(t, inf, rv)
	if err := cacheMatches(t, conn, name, inf); err != nil {
		t.Error(err)
	}
	var n int
	if err := conn.QueryRow(ctxFor(t), "SELECT count(*) FROM kv").Scan(&n); err != nil {
		t.Fatalf("table kv damaged: %v", err)
	}
}

// TestHistoryWindow: a Watch may start from an acknowledged version while
// it is within Config.History; older starts are ErrExpired.
func TestHistoryWindow(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL)`)
	conn := pg.Conn(t)
	src := newSource(t, pg, pginformer.Options{History: 3})
	tbl := newTable[kv](t, src, "kv")
	ctx := ctxFor(t)
	rv0, err := tbl.List(ctx, driver.ListSink[kv]{Emit: func(driver.Event[kv]) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	var rvs []core.ResourceVersion
	for i := range 6 {
		rvs = append(rvs, write(t, conn, fmt.Sprintf("INSERT INTO kv VALUES (%d, 'x')", i)))
	}
	w := watch[kv](t, tbl, rv0, nil)
	var last core.ResourceVersion
	for seen := 0; seen < 6; {
		evs, err := w.next(t)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == driver.Added {
				seen++
				last = ev.RV
			}
		}
	}
	if err := w.stop(); !errors.Is(err, driver.ErrWatchStopped) || !errors.Is(err, context.Canceled) {
		t.Errorf("a watch whose context was cancelled returned %v, want core.ErrWatchStopped and context.Canceled", err)
	}
	// Watching from the last version acknowledges all six changes; three
	// stay in memory.
	w = watch[kv](t, tbl, last, nil)
	w.stop()
	w = watch[kv](t, tbl, rvs[2], nil)
	if evs, err := w.next(t); err != nil {
		t.Fatalf("Watch from within the history: %v", err)
	} else if evs[0].RV != rvs[3] && evs[0].RV > rvs[3] {
		t.Errorf("Watch from within the history started at %d, want the write at %d", evs[0].RV, rvs[3])
	}
	w.stop()
	w = watch[kv](t, tbl, rv0, nil)
	if _, err := w.next(t); !errors.Is(err, driver.ErrExpired) {
		t.Errorf("Watch from before the history returned %v, want ErrExpired", err)
	}
}

type numRow struct {
	ID  int64 `db:"id"`
	Doc struct {
		N int `json:"n"`
	} `db:"doc"`
}

// TestDecodeErrorMidStream: a value that does not decode into its field
// (a jsonb document of another shape than the field's struct) stops the
// informer with a permanent error naming table, key and version; with
// SkipUndecodable it is reported and counted, and the rest keeps flowing.
// (A column whose type changes under the informer is a schema change:
// see TestMigrationMatrix.)
func TestDecodeErrorMidStream(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE nums (id bigint PRIMARY KEY, doc jsonb NOT NULL); INSERT INTO nums VALUES (1, '{"n": 1}')`)
	conn := pg.Conn(t)
	src := newSource(t, pg, pginformer.Options{})
	strict := newTable[numRow](t, src, "nums")
	skip, err := pginformer.NewTable[numRow](ctxFor(t), src, "nums", pginformer.TableOptions[numRow]{SkipUndecodable: true})
	if err != nil {
		t.Fatal(err)
	}
	_, recStrict := informer[numRow](t, strict, nil)
	inf, rec := informer[numRow](t, skip, nil)
	bad := write(t, conn, `UPDATE nums SET doc = '{"n": "not a number"}' WHERE id = 1`)
	rv := write(t, conn, `INSERT INTO nums VALUES (2, '{"n": 2}')`)
	waitFor(t, inf, rv)
	if got, ok := inf.Lister().Get("2"); !ok || got.Doc.N != 2 {
		t.Errorf("row 2 after the bad row: %+v, %v", got, ok)
	}
	if n := skip.Skipped(); n != 1 {
		t.Errorf("Skipped = %d, want 1", n)
	}
	reported := func(rec *recorder[numRow], permanent bool) error {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, err := range rec.errs {
			var de *driver.DecodeError
			if errors.As(err, &de) && de.Key == "1" && de.RV <= bad && strings.Contains(de.Source, `"nums"`) && errors.Is(err, driver.ErrPermanent) == permanent {
				t.Logf("reported: %v", err)
				return nil
			}
		}
		return fmt.Errorf("no DecodeError (permanent: %t) for key 1 reached the error handler; got %v", permanent, rec.errs)
	}
	if err := reported(rec, false); err != nil {
		t.Error(err)
	}
	eventually(t, "the strict informer stops with a permanent error", func() error { return reported(recStrict, true) })
}

type Audit struct {
	V string `db:"v"`
}

type embedded struct {
	ID int64 `db:"id"`
	Audit
}

// TestEmbeddedStruct: fields of an embedded struct map to columns, as with
// pgx.RowToStructByName.
func TestEmbeddedStruct(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL); INSERT INTO kv VALUES (1, 'one')`)
	src := newSource(t, pg, pginformer.Options{})
	inf, _ := informer[embedded](t, newTable[embedded](t, src, "kv"), nil)
	if got, _ := inf.Lister().Get("1"); got.V != "one" {
		t.Errorf("embedded field: %+v", got)
	}
}

// TestExistingPublication: a publication that exists is used as is (and
// kept by Close); one that lacks a table is refused with the fix.
func TestExistingPublication(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL); CREATE TABLE other (id bigint PRIMARY KEY, v text NOT NULL);
		CREATE PUBLICATION mine FOR TABLE kv`)
	conn := pg.Conn(t)
	ctx := ctxFor(t)

	bad := newSource(t, pg, pginformer.Options{Publication: "mine"})
	_, err := pginformer.NewTable[kv](ctx, bad, "other", pginformer.TableOptions[kv]{})
	if err == nil || !strings.Contains(err.Error(), `ALTER PUBLICATION "mine" ADD TABLE "public"."other"`) {
		t.Errorf("NewTable with a publication lacking the table: %v", err)
	}

	src := newSource(t, pg, pginformer.Options{Publication: "mine"})
	inf, _ := informer[kv](t, newTable[kv](t, src, "kv"), nil)
	rv := write(t, conn, "INSERT INTO kv VALUES (1, 'one')")
	waitFor(t, inf, rv)
	if err := cacheMatches(t, conn, "kv", inf); err != nil {
		t.Error(err)
	}
	src.Close()
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_publication WHERE pubname = 'mine'").Scan(&n); err != nil || n != 1 {
		t.Errorf("the user's publication was dropped by Close: %d, %v", n, err)
	}
}

// TestTruncateRelists: a TRUNCATE ends the watch for one List (the Source
// keeps no set of every key to delete from the stream); the rows the
// truncating transaction writes arrive with that List, and an update of
// such a row beside its TOASTed value is filled in afterwards.
func TestTruncateRelists(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE tr (id int PRIMARY KEY, big text NOT NULL, n int NOT NULL);
		ALTER TABLE tr ALTER COLUMN big SET STORAGE EXTERNAL;
		INSERT INTO tr SELECT g, 'small ' || g, 0 FROM generate_series(1, 20) g`)
	conn := pg.Conn(t)
	src := newSource(t, pg, pginformer.Options{})
	spy := informertest.Wrap[toastRow](newTable[toastRow](t, src, "tr"))
	var mu sync.Mutex
	deleted := map[string]bool{}
	inf, _ := informer[toastRow](t, spy, core.ResourceEventHandlerFuncs[toastRow]{
		DeleteFunc: func(key string, _ toastRow, _ bool) {
			mu.Lock()
			deleted[key] = true
			mu.Unlock()
		},
	})
	if n := spy.Lists(); n != 1 {
		t.Fatalf("%d Lists before the TRUNCATE, want 1", n)
	}
	big := strings.Repeat("0123456789abcdef", 1000)
	write(t, conn, "UPDATE tr SET n = 1 WHERE id = 1") // a change before it, delivered first
	tx, err := conn.Begin(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctxFor(t), "TRUNCATE tr"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctxFor(t), "INSERT INTO tr VALUES (7, $1, 0)", big); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, inf, currentLSN(t, conn))
	if keys := inf.Indexer().ListKeys(); len(keys) != 1 || keys[0] != "7" {
		t.Fatalf("after TRUNCATE and INSERT in one transaction the cache holds %q, want [7]", keys)
	}
	if n := spy.Lists(); n != 2 {
		t.Errorf("%d Lists after the TRUNCATE, want 2 (one to learn what it removed)", n)
	}
	eventually(t, "handlers see a delete for every truncated key but 7", func() error {
		mu.Lock()
		defer mu.Unlock()
		for id := 1; id <= 20; id++ {
			if k := fmt.Sprint(id); k != "7" && !deleted[k] {
				return fmt.Errorf("no delete for %s", k)
			}
		}
		return nil
	})
	rv := write(t, conn, "UPDATE tr SET n = 2 WHERE id = 7") // big arrives as unchanged TOAST
	waitFor(t, inf, rv)
	if got, _ := inf.Lister().Get("7"); got.N != 2 || got.Big != big {
		t.Errorf("after an update beside the TOASTed value: n=%d, big of %d bytes (want 2, %d)", got.N, len(got.Big), len(big))
	}
}
