package pginformer_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pgx/v5"
)

// The tests of the silent losses of issue 16: each kind of table that lost
// rows without a word is either synced whole or refused up front.

type partRow struct {
	ID     int    `db:"id"`
	Region string `db:"region"`
	V      string `db:"v"`
}

// partsMatch compares a cache of parts (or one of its partitions) with the
// table.
func partsMatch(t *testing.T, conn *pgx.Conn, table string, inf *core.SharedIndexInformer[partRow]) error {
	rows, _ := conn.Query(ctxFor(t), "SELECT id, region, v FROM "+table)
	want, err := pgx.CollectRows(rows, pgx.RowToStructByName[partRow])
	if err != nil {
		return err
	}
	if n := inf.Indexer().Len(); n != len(want) {
		return fmt.Errorf("cache has %d rows, table %s %d", n, table, len(want))
	}
	for _, w := range want {
		got, ok := inf.Lister().Get(fmt.Sprintf("%d/%s", w.ID, w.Region))
		if !ok || got != w {
			return fmt.Errorf("key %d/%s: cache %+v (%v), table %+v", w.ID, w.Region, got, ok, w)
		}
	}
	return nil
}

// TestPartitionedTable: a partitioned table syncs through the Source's own
// publication (publish_via_partition_root); a row moving between partitions
// is a delete of the old key and an add of the new one; a leaf synced on
// its own works; a user publication without publish_via_partition_root is
// refused with the exact fix.
func TestPartitionedTable(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE parts (id int NOT NULL, region text NOT NULL, v text NOT NULL, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
		CREATE TABLE parts_eu PARTITION OF parts FOR VALUES IN ('eu');
		CREATE TABLE parts_us PARTITION OF parts FOR VALUES IN ('us');
		INSERT INTO parts VALUES (1, 'eu', 'a'), (2, 'us', 'b'), (3, 'eu', 'c')`)
	conn := pg.Conn(t)

	var mu sync.Mutex
	var seen []string
	note := func(s string) { mu.Lock(); seen = append(seen, s); mu.Unlock() }
	root := newTable[partRow](t, newSource(t, pg, pginformer.Options{}), "parts")
	inf, _ := informer[partRow](t, root, core.ResourceEventHandlerFuncs[partRow]{
		AddFunc:    func(key string, _ partRow, initial bool) { note("add " + key) },
		UpdateFunc: func(key string, _, _ partRow) { note("update " + key) },
		DeleteFunc: func(key string, _ partRow, _ bool) { note("delete " + key) },
	})
	leaf := newTable[partRow](t, newSource(t, pg, pginformer.Options{}), "parts_eu")
	infLeaf, _ := informer[partRow](t, leaf, nil)

	write(t, conn, "INSERT INTO parts VALUES (4, 'us', 'd'), (5, 'eu', 'e')")
	write(t, conn, "UPDATE parts SET v = 'a2' WHERE id = 1")
	write(t, conn, "DELETE FROM parts WHERE id = 3")
	rv := write(t, conn, "UPDATE parts SET region = 'us' WHERE id = 1") // moves to parts_us
	waitFor(t, inf, rv)
	waitFor(t, infLeaf, rv)
	if err := partsMatch(t, conn, "parts", inf); err != nil {
		t.Error(err)
	}
	if err := partsMatch(t, conn, "parts_eu", infLeaf); err != nil {
		t.Errorf("leaf partition synced alone: %v", err)
	}
	eventually(t, "handlers see the move as delete 1/eu and add 1/us", func() error {
		mu.Lock()
		defer mu.Unlock()
		all := strings.Join(seen, ", ")
		for _, want := range []string{"add 4/us", "add 5/eu", "update 1/eu", "delete 3/eu", "delete 1/eu", "add 1/us"} {
			if !strings.Contains(all, want) {
				return fmt.Errorf("no %q in %s", want, all)
			}
		}
		return nil
	})

	// A root and its partition on one Source: the partition would see
	// nothing (its changes arrive under the root's name).
	both := newSource(t, pg, pginformer.Options{})
	newTable[partRow](t, both, "parts")
	if _, err := pginformer.NewTable[partRow](ctxFor(t), both, "parts_eu", pginformer.TableOptions[partRow]{}); err == nil || !strings.Contains(err.Error(), "one partition tree") {
		t.Errorf("NewTable of a partition beside its root on one Source: %v", err)
	}

	// A publication of the user's own, without publish_via_partition_root.
	pg.Exec(t, "CREATE PUBLICATION leafwise FOR TABLE parts")
	src := newSource(t, pg, pginformer.Options{Publication: "leafwise"})
	_, err := pginformer.NewTable[partRow](ctxFor(t), src, "parts", pginformer.TableOptions[partRow]{})
	if err == nil || !strings.Contains(err.Error(), `ALTER PUBLICATION "leafwise" SET (publish_via_partition_root = true)`) {
		t.Fatalf("NewTable of a partitioned table in a publication without publish_via_partition_root: %v", err)
	}
	t.Logf("refused: %v", err)
	pg.Exec(t, `ALTER PUBLICATION leafwise SET (publish_via_partition_root = true)`)
	infUser, _ := informer[partRow](t, newTable[partRow](t, src, "parts"), nil)
	rv = write(t, conn, "UPDATE parts SET region = 'eu', v = 'back' WHERE id = 1")
	waitFor(t, infUser, rv)
	if err := partsMatch(t, conn, "parts", infUser); err != nil {
		t.Errorf("after the publication was fixed: %v", err)
	}
	// Its partition is now published through the root: syncing it alone
	// on that publication would see nothing, and is refused.
	src2 := newSource(t, pg, pginformer.Options{Publication: "leafwise"})
	_, err = pginformer.NewTable[partRow](ctxFor(t), src2, "parts_eu", pginformer.TableOptions[partRow]{})
	if err == nil || !strings.Contains(err.Error(), "published through its partitioned table") {
		t.Errorf("NewTable of a partition published through its root: %v", err)
	}
}

type genRow struct {
	ID    int `db:"id"`
	Qty   int `db:"qty"`
	Total int `db:"total"`
}

type genRowOmitted struct {
	ID    int `db:"id"`
	Qty   int `db:"qty"`
	Total int `db:"-"`
}

// TestGeneratedColumn: pgoutput (Postgres < 18) does not stream generated
// columns, so a field mapped to one is refused, and a map leaves the column
// out of the list as the stream does: the two paths never disagree.
func TestGeneratedColumn(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE gen (id int PRIMARY KEY, qty int NOT NULL, total int GENERATED ALWAYS AS (qty * 2) STORED);
		INSERT INTO gen (id, qty) VALUES (1, 5)`)
	conn := pg.Conn(t)
	src := newSource(t, pg, pginformer.Options{})
	_, err := pginformer.NewTable[genRow](ctxFor(t), src, "gen", pginformer.TableOptions[genRow]{})
	if err == nil || !strings.Contains(err.Error(), `field Total maps to generated column "total"`) || !strings.Contains(err.Error(), "db:\"-\"") {
		t.Fatalf("NewTable with a field on a generated column: %v", err)
	}
	t.Logf("refused: %v", err)
	structs := newTable[genRowOmitted](t, src, "gen")
	maps := newTable[map[string]any](t, src, "gen")
	omitted, err := pginformer.NewTable[map[string]any](ctxFor(t), src, "gen", pginformer.TableOptions[map[string]any]{Omit: []string{"qty"}})
	if err != nil {
		t.Fatal(err)
	}
	infS, _ := informer[genRowOmitted](t, structs, nil)
	infM, _ := informer[map[string]any](t, maps, nil)
	infO, _ := informer[map[string]any](t, omitted, nil)
	rv := write(t, conn, "INSERT INTO gen (id, qty) VALUES (2, 7); UPDATE gen SET qty = 6 WHERE id = 1")
	for _, w := range []func(){func() { waitFor(t, infS, rv) }, func() { waitFor(t, infM, rv) }, func() { waitFor(t, infO, rv) }} {
		w()
	}
	for _, id := range []string{"1", "2"} {
		if r, _ := infS.Lister().Get(id); r.Total != 0 || r.Qty == 0 {
			t.Errorf("struct %s: %+v", id, r)
		}
		m, _ := infM.Lister().Get(id)
		if _, ok := m["total"]; ok || len(m) != 2 {
			t.Errorf("map %s has the generated column or lacks another: %v", id, m)
		}
		o, _ := infO.Lister().Get(id)
		if _, ok := o["qty"]; ok || len(o) != 1 {
			t.Errorf("map %s with qty omitted: %v", id, o)
		}
	}
}

// TestMappingsProved: NewTable refuses a field that cannot hold every value
// of its column, naming table, column, field and the fix.
func TestMappingsProved(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE odd (id int PRIMARY KEY, m money NOT NULL, l pg_lsn NOT NULL, ts timestamptz,
		s int2 NOT NULL, a text[] NOT NULL, ip inet NOT NULL, n numeric(30, 0) NOT NULL, e int NOT NULL)`)
	src := newSource(t, pg, pginformer.Options{})
	type (
		money struct {
			ID int     `db:"id"`
			M  float64 `db:"m"`
		}
		lsn struct {
			ID int    `db:"id"`
			L  uint64 `db:"l"`
		}
		nullableTime struct {
			ID int       `db:"id"`
			TS time.Time `db:"ts"`
		}
		narrow struct {
			ID int  `db:"id"`
			S  int8 `db:"s"`
		}
		nullElems struct {
			ID int      `db:"id"`
			A  []string `db:"a"`
		}
		netmask struct {
			ID int        `db:"id"`
			IP netip.Addr `db:"ip"`
		}
		bigNumeric struct {
			ID int   `db:"id"`
			N  int64 `db:"n"`
		}
		textIntoInt struct {
			ID int `db:"id"`
			A  int `db:"a"`
		}
	)
	check := func(name string, err error, wants ...string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: accepted", name)
			return
		}
		for _, w := range append([]string{`"public"."odd"`}, wants...) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error does not say %q: %v", name, w, err)
			}
		}
		t.Logf("%s: %v", name, err)
	}
	ctx := ctxFor(t)
	_, err := pginformer.NewTable[money](ctx, src, "odd", pginformer.TableOptions[money]{})
	check("money into float64", err, `column "m" (money)`, "field M (float64)", "string holds any")
	_, err = pginformer.NewTable[lsn](ctx, src, "odd", pginformer.TableOptions[lsn]{})
	check("pg_lsn into uint64", err, `column "l" (pg_lsn)`, "field L (uint64)")
	_, err = pginformer.NewTable[nullableTime](ctx, src, "odd", pginformer.TableOptions[nullableTime]{})
	check("nullable timestamptz into time.Time", err, `column "ts" (timestamp with time zone) is nullable`, "field TS (time.Time)", "*time.Time")
	_, err = pginformer.NewTable[narrow](ctx, src, "odd", pginformer.TableOptions[narrow]{})
	check("int2 into int8", err, `column "s" (smallint)`, "field S (int8)", `"-32768"`)
	_, err = pginformer.NewTable[nullElems](ctx, src, "odd", pginformer.TableOptions[nullElems]{})
	check("text[] into []string", err, `column "a" (text[])`, "field A ([]string)", `"{NULL}"`)
	_, err = pginformer.NewTable[netmask](ctx, src, "odd", pginformer.TableOptions[netmask]{})
	check("inet into netip.Addr", err, `column "ip" (inet)`, "field IP (netip.Addr)", "/8")
	_, err = pginformer.NewTable[bigNumeric](ctx, src, "odd", pginformer.TableOptions[bigNumeric]{})
	check("numeric(30,0) into int64", err, `column "n" (numeric(30,0))`, "field N (int64)")
	_, err = pginformer.NewTable[textIntoInt](ctx, src, "odd", pginformer.TableOptions[textIntoInt]{})
	check("text[] into int", err, `column "a" (text[])`, "field A (int)")

	// What holds every value is accepted.
	type fine struct {
		ID int          `db:"id"`
		M  string       `db:"m"`
		L  string       `db:"l"`
		TS *time.Time   `db:"ts"`
		S  int16        `db:"s"`
		A  []*string    `db:"a"`
		IP netip.Prefix `db:"ip"`
		N  string       `db:"n"`
		E  int64        `db:"e"`
	}
	if _, err := pginformer.NewTable[fine](ctx, src, "odd", pginformer.TableOptions[fine]{}); err != nil {
		t.Errorf("types that hold every value refused: %v", err)
	}
}

type keyRow struct {
	K string `db:"k"`
	V string `db:"v"`
}

// TestUndecodableRows: a row that fails at run time (here an empty primary
// key, which the informer cannot key) fails the List by default, with the
// count and the reason, as a permanent error; with SkipUndecodable it is
// reported as an event with an error and counted. A change that fails in
// a watch ends the watch the same way.
func TestUndecodableRows(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE ek (k text PRIMARY KEY, v text NOT NULL); INSERT INTO ek VALUES ('', 'empty'), ('a', 'x'), ('b', 'y')`)
	conn := pg.Conn(t)
	ctx := ctxFor(t)
	src := newSource(t, pg, pginformer.Options{})
	strict := newTable[keyRow](t, src, "ek")
	skip, err := pginformer.NewTable[keyRow](ctx, src, "ek", pginformer.TableOptions[keyRow]{SkipUndecodable: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = strict.List(ctx, driver.ListSink[keyRow]{Emit: func(driver.Event[keyRow]) error { return nil }})
	if !errors.Is(err, driver.ErrPermanent) || !strings.Contains(err.Error(), "1 could not be decoded") || !strings.Contains(err.Error(), "primary key is empty") {
		t.Errorf("List over an undecodable row: %v; want a permanent error with the count and the reason", err)
	}
	var bad []driver.Event[keyRow]
	good := 0
	rv, err := skip.List(ctx, driver.ListSink[keyRow]{Emit: func(ev driver.Event[keyRow]) error {
		if ev.Err != nil {
			bad = append(bad, ev)
		} else {
			good++
		}
		return nil
	}})
	if err != nil || good != 2 || len(bad) != 1 || skip.Skipped() != 1 {
		t.Errorf("List with SkipUndecodable: %v, %d good, %v bad, Skipped %d; want 2 good, 1 bad, 1 skipped", err, good, bad, skip.Skipped())
	}
	var de *driver.DecodeError
	if len(bad) == 1 && !errors.As(bad[0].Err, &de) {
		t.Errorf("the skipped row's error is %T, want *core.DecodeError", bad[0].Err)
	}
	w := watch[keyRow](t, skip, rv, nil)
	write(t, conn, "UPDATE ek SET v = 'again' WHERE k = ''")
	write(t, conn, "UPDATE ek SET v = 'z' WHERE k = 'a'")
	for done := false; !done; {
		evs, err := w.next(t)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			done = done || ev.Key == "a"
		}
	}
	if skip.Skipped() != 2 {
		t.Errorf("Skipped = %d after an undecodable change, want 2", skip.Skipped())
	}
	w.stop()

	// The strict table, listed with the bad row gone, meets one in a watch.
	pg.Exec(t, "DELETE FROM ek WHERE k = ''")
	rv, err = strict.List(ctx, driver.ListSink[keyRow]{Emit: func(driver.Event[keyRow]) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ws := watch[keyRow](t, strict, rv, nil)
	write(t, conn, "INSERT INTO ek VALUES ('', 'back')")
	for {
		_, err := ws.next(t)
		if err != nil {
			if !errors.Is(err, driver.ErrPermanent) || !strings.Contains(err.Error(), "primary key is empty") {
				t.Errorf("watch over an undecodable change ended with %v, want a permanent error naming it", err)
			}
			break
		}
	}
}

// TestPublicationChecks: a Publication that does not exist is refused (and
// not created) unless CreatePublication asks for it; a table missing from
// a publication is refused by NewTable with the fix.
func TestPublicationChecks(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL); CREATE TABLE other (id bigint PRIMARY KEY, v text NOT NULL);
		CREATE PUBLICATION mine FOR TABLE kv`)
	conn := pg.Conn(t)
	ctx := ctxFor(t)
	_, err := pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{Publication: "mien"})
	if err == nil || !strings.Contains(err.Error(), `publication "mien" does not exist`) {
		t.Errorf("NewSource with a misspelt publication: %v", err)
	}
	src := newSource(t, pg, pginformer.Options{Publication: "mine"})
	_, err = pginformer.NewTable[kv](ctx, src, "other", pginformer.TableOptions[kv]{})
	if err == nil || !strings.Contains(err.Error(), `ALTER PUBLICATION "mine" ADD TABLE "public"."other"`) {
		t.Errorf("NewTable of a table missing from the publication: %v", err)
	}
	created := newSource(t, pg, pginformer.Options{Publication: "asked", CreatePublication: true})
	inf, _ := informer[kv](t, newTable[kv](t, created, "other"), nil)
	rv := write(t, conn, "INSERT INTO other VALUES (1, 'one')")
	waitFor(t, inf, rv)
	var pubs []string
	rows, _ := conn.Query(ctx, "SELECT pubname FROM pg_publication ORDER BY pubname")
	if pubs, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if strings.Join(pubs, ",") != "asked,mine" {
		t.Errorf("publications %v, want asked (created on request) and mine", pubs)
	}
}

// TestDroppedTable: a dropped table is a permanent error, for a List and
// for a watch (noticed at its next progress request).
func TestDroppedTable(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL); CREATE TABLE gone (id bigint PRIMARY KEY, v text NOT NULL)`)
	src := newSource(t, pg, pginformer.Options{})
	tbl := newTable[kv](t, src, "gone")
	newTable[kv](t, src, "kv")
	ctx := ctxFor(t)
	rv, err := tbl.List(ctx, driver.ListSink[kv]{Emit: func(driver.Event[kv]) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	progress := make(chan struct{})
	w := watch[kv](t, tbl, rv, progress)
	pg.Exec(t, "DROP TABLE gone")
	progress <- struct{}{}
	for {
		_, err := w.next(t)
		if err != nil {
			if !errors.Is(err, driver.ErrPermanent) || !strings.Contains(err.Error(), "dropped") {
				t.Errorf("watch of a dropped table: %v, want a permanent error", err)
			}
			break
		}
	}
	if _, err := tbl.List(ctx, driver.ListSink[kv]{Emit: func(driver.Event[kv]) error { return nil }}); !errors.Is(err, driver.ErrPermanent) {
		t.Errorf("List of a dropped table: %v, want a permanent error", err)
	}
}

// TestCloseEndsWithErrClosed: closing the Source ends a running watch with
// ErrClosed (and logs nothing at warning level or above).
func TestCloseEndsWithErrClosed(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL)`)
	var logBuf syncBuffer
	src := newSource(t, pg, pginformer.Options{Logger: newTestLogger(&logBuf)})
	tbl := newTable[kv](t, src, "kv")
	ctx := ctxFor(t)
	rv, err := tbl.List(ctx, driver.ListSink[kv]{Emit: func(driver.Event[kv]) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	w := watch[kv](t, tbl, rv, nil)
	write(t, pg.Conn(t), "INSERT INTO kv VALUES (1, 'x')")
	if _, err := w.next(t); err != nil {
		t.Fatal(err)
	}
	src.Close()
	for {
		if _, err := w.next(t); err != nil {
			if !errors.Is(err, pginformer.ErrClosed) {
				t.Errorf("watch after Close: %v, want ErrClosed", err)
			}
			break
		}
	}
	if _, err := tbl.List(context.Background(), driver.ListSink[kv]{Emit: func(driver.Event[kv]) error { return nil }}); !errors.Is(err, pginformer.ErrClosed) {
		t.Errorf("List after Close: %v, want ErrClosed", err)
	}
	if log := logBuf.String(); strings.Contains(log, "level=WARN") || strings.Contains(log, "level=ERROR") {
		t.Errorf("a normal Close logged a warning:\n%s", log)
	}
}

// TestPgHbaDocumentedLine: the package doc's pg_hba.conf advice holds: an
// ordinary database line, without a "replication" line, lets the role list
// and stream.
func TestPgHbaDocumentedLine(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL); INSERT INTO kv VALUES (1, 'one')`)
	conn := pg.Conn(t)
	var hba string
	if err := conn.QueryRow(ctxFor(t), "SHOW hba_file").Scan(&hba); err != nil {
		t.Fatal(err)
	}
	// Only the documented line (and local trust for the harness's tools).
	pg.Exec(t, fmt.Sprintf(`COPY (SELECT 'local all all trust' UNION ALL SELECT 'host all all 127.0.0.1/32 scram-sha-256') TO %s;
		SELECT pg_reload_conf()`, "'"+strings.ReplaceAll(hba, "'", "''")+"'"))
	var rules []string
	rows, _ := conn.Query(ctxFor(t), "SELECT type || ' ' || array_to_string(database, ',') FROM pg_hba_file_rules")
	if rules, _ = pgx.CollectRows(rows, pgx.RowTo[string]); len(rules) != 2 || slicesContain(rules, "replication") {
		t.Fatalf("pg_hba.conf rules %v, want the two written", rules)
	}
	inf, _ := informer[kv](t, newTable[kv](t, newSource(t, pg, pginformer.Options{}), "kv"), nil)
	rv := write(t, conn, "INSERT INTO kv VALUES (2, 'two')")
	waitFor(t, inf, rv)
	if err := cacheMatches(t, conn, "kv", inf); err != nil {
		t.Error(err)
	}
}

func slicesContain(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
