package pginformer_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// narrowRow and tenantRow map two different subsets of the columns of
// table wide (see wideTable).
type narrowRow struct {
	ID int64 `db:"id"`
	V  int64 `db:"v"`
}

type tenantRow struct {
	ID     int64  `db:"id"`
	Tenant string `db:"tenant"`
	V      int64  `db:"v"`
}

// bigNote is a SQL expression of about 64 kB of hex digits for row i: too
// long, even compressed, to stay in the row, so Postgres TOASTs it out of
// line.
const bigNote = `(SELECT string_agg(md5(random()::text || g), '') FROM generate_series(1, 2000 + 0 * i) g)`

// wideTable creates table wide, which has columns that neither struct
// maps: a TOASTed text, a jsonb and a generated column, with 40 rows.
func wideTable(t *testing.T, pg *harness.Postgres, conn *pgx.Conn) {
	pg.Exec(t, `CREATE TABLE wide (id bigint PRIMARY KEY, tenant text NOT NULL, v bigint NOT NULL,
		note text, extra jsonb, twice bigint GENERATED ALWAYS AS (v * 2) STORED)`)
	write(t, conn, `INSERT INTO wide (id, tenant, v, note, extra)
		SELECT i, CASE WHEN i % 2 = 0 THEN 'acme' ELSE 'other' END, 1, `+bigNote+`, '{"a": 1}' FROM generate_series(1, 40) i`)
}

func serverVersion(t *testing.T, conn *pgx.Conn) int {
	var v int
	if err := conn.QueryRow(ctxFor(t), "SELECT current_setting('server_version_num')::int").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// publishedColumns is pg_publication_tables.attnames of table (Postgres
// 15+): the columns the walsender sends.
func publishedColumns(t *testing.T, conn *pgx.Conn, pub, table string) []string {
	var names []string
	if err := conn.QueryRow(ctxFor(t), "SELECT attnames::text[] FROM pg_publication_tables WHERE pubname = $1 AND tablename = $2", pub, table).Scan(&names); err != nil {
		t.Fatalf("published columns of %s in %s: %v", table, pub, err)
	}
	slices.Sort(names)
	return names
}

// truthOf runs a query of (id, value) rows.
func truthOf(t *testing.T, conn *pgx.Conn, sql string) map[int64]string {
	rows, _ := conn.Query(ctxFor(t), sql)
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var v string
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		out[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestColumnSubset: two Tables over one table of one Source, each with a
// struct that maps a different subset of its columns and its own filter,
// share one slot. The table has columns neither maps (a TOASTed text, a
// jsonb, a generated column). On Postgres 15+ the publication's column
// list is the union of the mapped columns (and the key), so the walsender
// never sends the others: both pg_publication_tables and the row layouts
// the stream delivered say so. Writes that change only unmapped columns,
// leave TOASTed values unchanged, move rows into a filter, insert and
// delete: each cache equals SELECT <its columns> ... WHERE <its filter>
// at the LSN both reached.
func TestColumnSubset(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := pg.Conn(t)
	ctx := ctxFor(t)
	wideTable(t, pg, conn)
	src := newSource(t, pg, pginformer.Options{PublishColumnList: true, PublishRowFilter: true})
	narrow, err := pginformer.NewTable[narrowRow](ctx, src, "wide", pginformer.TableOptions[narrowRow]{Where: filter.MustNew[narrowRow](filter.Le("id", 20))})
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := pginformer.NewTable[tenantRow](ctx, src, "wide", pginformer.TableOptions[tenantRow]{Where: filter.MustNew[tenantRow](filter.Eq("tenant", "acme"))})
	if err != nil {
		t.Fatal(err)
	}
	narrowInf, _ := informertest.Run[narrowRow](t, narrow, core.InformerOptions[narrowRow]{})
	tenantInf, _ := informertest.Run[tenantRow](t, tenant, core.InformerOptions[tenantRow]{})

	write(t, conn, `UPDATE wide SET v = v + 1 WHERE id % 3 = 0`) // note stays, unchanged and TOASTed
	write(t, conn, `UPDATE wide SET note = `+bigNote+` FROM (SELECT 4 AS i) x WHERE id = x.i`)
	write(t, conn, `UPDATE wide SET tenant = 'acme', v = v + 1 WHERE id = 5`)
	write(t, conn, `INSERT INTO wide (id, tenant, v, note) SELECT i, 'acme', 7, `+bigNote+` FROM generate_series(41, 42) i`)
	write(t, conn, `DELETE FROM wide WHERE id IN (2, 3)`)
	write(t, conn, `UPDATE wide SET extra = '{"b": 2}', v = v + 10 WHERE id IN (6, 7)`)
	lsn := currentLSN(t, conn)
	informertest.WaitFor(t, narrowInf, lsn)
	informertest.WaitFor(t, tenantInf, lsn)

	got := map[int64]string{}
	for _, r := range narrowInf.Lister().List(nil) {
		got[r.ID] = fmt.Sprint(r.V)
	}
	if want := truthOf(t, conn, `SELECT id, v::text FROM wide WHERE id <= 20`); !maps.Equal(got, want) {
		t.Errorf("narrow cache differs from SELECT id, v FROM wide WHERE id <= 20:\n cache %v\n truth %v", got, want)
	}
	got = map[int64]string{}
	for _, r := range tenantInf.Lister().List(nil) {
		got[r.ID] = r.Tenant + " " + fmt.Sprint(r.V)
	}
	if want := truthOf(t, conn, `SELECT id, tenant || ' ' || v FROM wide WHERE tenant = 'acme'`); !maps.Equal(got, want) {
		t.Errorf("tenant cache differs from SELECT id, tenant, v FROM wide WHERE tenant = 'acme':\n cache %v\n truth %v", got, want)
	}

	// What the walsender sent: the union of the mapped columns on 15+;
	// before, every column but the generated one.
	want := []string{"id", "tenant", "v"}
	if serverVersion(t, conn) >= 150000 {
		if cols := publishedColumns(t, conn, src.PublicationName(), "wide"); !slices.Equal(cols, want) {
			t.Errorf("the publication sends columns %q of wide, want the mapped ones %q", cols, want)
		}
	} else {
		want = []string{"extra", "id", "note", "tenant", "v"}
	}
	for name, cols := range map[string][]string{"narrow": pginformer.StreamedColumns(narrow), "tenant": pginformer.StreamedColumns(tenant)} {
		if !slices.Equal(cols, want) {
			t.Errorf("%s: the stream's row layouts carry columns %q, want %q", name, cols, want)
		}
	}
	// One slot, one walsender for both Tables (a helper slot of the
	// second List may linger for a moment).
	informertest.Eventually(t, "one slot and one walsender for both Tables", func() bool {
		var slots, senders int
		if err := conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM pg_replication_slots), (SELECT count(*) FROM pg_stat_replication)").Scan(&slots, &senders); err != nil {
			t.Fatal(err)
		}
		return slots == 1 && senders == 1
	})
}

// TestColumnListMap: a map[string]any Table decodes every column but those
// TableOptions.Omit names, columns added later among them: its table gets
// no column list (it would leave a new column out of the stream while a
// List reads it), and the rows carry exactly the columns not omitted.
func TestColumnListMap(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := pg.Conn(t)
	ctx := ctxFor(t)
	wideTable(t, pg, conn)
	src := newSource(t, pg, pginformer.Options{})
	tbl, err := pginformer.NewTable[map[string]any](ctx, src, "wide", pginformer.TableOptions[map[string]any]{Omit: []string{"note", "extra"}})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run[map[string]any](t, tbl, core.InformerOptions[map[string]any]{})
	lsn := write(t, conn, `UPDATE wide SET v = v + 1, note = 'short' WHERE id = 1`)
	informertest.WaitFor(t, inf, lsn)
	obj, ok := inf.Lister().Get("1")
	if !ok {
		t.Fatal("row 1 missing")
	}
	if keys := slices.Sorted(maps.Keys(obj)); !slices.Equal(keys, []string{"id", "tenant", "v"}) || obj["v"] != int64(2) {
		t.Errorf("row 1 after the update: %v, want id, tenant and v = 2", obj)
	}
	pg.Exec(t, `ALTER TABLE wide ADD COLUMN added int`)
	informertest.WaitFor(t, inf, write(t, conn, `UPDATE wide SET added = 9 WHERE id = 1`))
	if obj, _ := inf.Lister().Get("1"); obj["added"] != int32(9) {
		t.Errorf("row 1 after ADD COLUMN: %v, want added = 9", obj)
	}
	if serverVersion(t, conn) >= 150000 {
		if cols := publishedColumns(t, conn, src.PublicationName(), "wide"); !slices.Contains(cols, "note") {
			t.Errorf("the publication sends columns %q of wide, want every column", cols)
		}
	}
}

// TestColumnListRefused: a permanent slot's publication gets no column
// list (it outlives the process, and a later struct may map more); a
// publication the Source did not create whose column list leaves out a
// mapped column is refused by NewTable, naming the column and the fix; a
// filter.Server condition is refused where the publication gets no row
// filter (a permanent slot, a publication not the Source's own).
func TestColumnListRefused(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := pg.Conn(t)
	ctx := ctxFor(t)
	wideTable(t, pg, conn)
	if serverVersion(t, conn) < 150000 {
		harness.Unavailable(t, "column lists and row filters need Postgres 15; the harness's server is %d", serverVersion(t, conn))
	}
	server := filter.MustNew[narrowRow](filter.Server(filter.Le("id", 20)))

	perm := newSource(t, pg, pginformer.Options{PermanentSlot: true, Slot: "wide_perm"})
	if _, err := pginformer.NewTable[narrowRow](ctx, perm, "wide", pginformer.TableOptions[narrowRow]{Where: server}); err == nil || !strings.Contains(err.Error(), "permanent slot") || !strings.Contains(err.Error(), "drop filter.Server") {
		t.Errorf("a filter.Server condition on a permanent slot: %v", err)
	}
	tbl, err := pginformer.NewTable[narrowRow](ctx, perm, "wide", pginformer.TableOptions[narrowRow]{Where: filter.MustNew[narrowRow](filter.Le("id", 20))})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run[narrowRow](t, tbl, core.InformerOptions[narrowRow]{})
	informertest.WaitFor(t, inf, write(t, conn, `UPDATE wide SET v = 5 WHERE id = 1`))
	if o, _ := inf.Lister().Get("1"); o.V != 5 {
		t.Errorf("row 1: %+v, want v = 5", o)
	}
	if cols := publishedColumns(t, conn, perm.PublicationName(), "wide"); !slices.Equal(cols, []string{"extra", "id", "note", "tenant", "twice", "v"}) {
		t.Errorf("a permanent slot's publication sends columns %q, want every column", cols)
	}
	var rowFilter *string
	if err := conn.QueryRow(ctx, "SELECT rowfilter FROM pg_publication_tables WHERE pubname = $1", perm.PublicationName()).Scan(&rowFilter); err != nil || rowFilter != nil {
		t.Errorf("a permanent slot's publication has row filter %v (%v), want none", rowFilter, err)
	}

	pg.Exec(t, `CREATE PUBLICATION narrow_pub FOR TABLE wide (id, v) WITH (publish_via_partition_root = true)`)
	other := newSource(t, pg, pginformer.Options{Publication: "narrow_pub"})
	if _, err := pginformer.NewTable[narrowRow](ctx, other, "wide", pginformer.TableOptions[narrowRow]{}); err != nil {
		t.Errorf("a struct of the published columns: %v", err)
	}
	_, err = pginformer.NewTable[tenantRow](ctx, other, "wide", pginformer.TableOptions[tenantRow]{})
	if err == nil || !strings.Contains(err.Error(), `column "tenant"`) || !strings.Contains(err.Error(), `ALTER PUBLICATION "narrow_pub" DROP TABLE "public"."wide"`) {
		t.Errorf("a struct mapping a column the publication leaves out: %v", err)
	}
	if _, err := pginformer.NewTable[narrowRow](ctx, other, "wide", pginformer.TableOptions[narrowRow]{Where: server}); err == nil || !strings.Contains(err.Error(), "not the Source's own") {
		t.Errorf("a filter.Server condition on a publication not the Source's own: %v", err)
	}
	// Narrowed after NewTable: the first List refuses it too.
	pg.Exec(t, `ALTER PUBLICATION narrow_pub SET TABLE wide (id, v, tenant)`)
	late, err := pginformer.NewTable[tenantRow](ctx, other, "wide", pginformer.TableOptions[tenantRow]{})
	if err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, `ALTER PUBLICATION narrow_pub SET TABLE wide (id, v)`)
	_, err = late.List(ctx, driver.ListSink[tenantRow]{Emit: func(driver.Event[tenantRow]) error { return nil }})
	if err == nil || !strings.Contains(err.Error(), `column "tenant"`) {
		t.Errorf("List with a publication narrowed after NewTable: %v", err)
	}
}

// TestColumnListPartitioned: a partitioned table synced through its root
// (publish_via_partition_root) by a struct of some of its columns gets the
// column list too, and changes of every partition arrive with them.
func TestColumnListPartitioned(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := pg.Conn(t)
	pg.Exec(t, `CREATE TABLE pwide (id bigint NOT NULL, region text NOT NULL, v bigint NOT NULL, note text, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
		CREATE TABLE pwide_eu PARTITION OF pwide FOR VALUES IN ('eu');
		CREATE TABLE pwide_us PARTITION OF pwide FOR VALUES IN ('us');
		INSERT INTO pwide SELECT i, CASE WHEN i % 2 = 0 THEN 'eu' ELSE 'us' END, 1, 'note' FROM generate_series(1, 10) i`)
	type regionRow struct {
		ID     int64  `db:"id"`
		Region string `db:"region"`
		V      int64  `db:"v"`
	}
	src := newSource(t, pg, pginformer.Options{PublishColumnList: true})
	tbl := newTable[regionRow](t, src, "pwide")
	inf, _ := informertest.Run[regionRow](t, tbl, core.InformerOptions[regionRow]{})
	write(t, conn, `UPDATE pwide SET v = 2, note = 'changed' WHERE id IN (1, 2)`)
	write(t, conn, `UPDATE pwide SET region = 'us' WHERE id = 4`) // moves between partitions
	informertest.WaitFor(t, inf, write(t, conn, `INSERT INTO pwide VALUES (11, 'eu', 3, 'new')`))
	got := map[int64]string{}
	for _, r := range inf.Lister().List(nil) {
		got[r.ID] = r.Region + " " + fmt.Sprint(r.V)
	}
	if want := truthOf(t, conn, `SELECT id, region || ' ' || v FROM pwide`); !maps.Equal(got, want) {
		t.Errorf("cache differs from SELECT id, region, v FROM pwide:\n cache %v\n truth %v", got, want)
	}
	want := []string{"id", "region", "v"}
	if serverVersion(t, conn) >= 150000 {
		if cols := publishedColumns(t, conn, src.PublicationName(), "pwide"); !slices.Equal(cols, want) {
			t.Errorf("the publication sends columns %q of pwide, want %q", cols, want)
		}
	} else {
		want = []string{"id", "note", "region", "v"}
	}
	if cols := pginformer.StreamedColumns(tbl); !slices.Equal(cols, want) {
		t.Errorf("the stream's row layouts carry columns %q, want %q", cols, want)
	}
}

// TestDefaultPublishesAllColumns: by default the publication has no
// column list, the stream carries every column (those no Table decodes
// are stepped over) and the table's DDL stays free: under REPLICA
// IDENTITY FULL, set while the Source runs, its UPDATEs go on.
func TestDefaultPublishesAllColumns(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := pg.Conn(t)
	wideTable(t, pg, conn)
	src := newSource(t, pg, pginformer.Options{})
	tbl := newTable[narrowRow](t, src, "wide")
	inf, _ := informertest.Run[narrowRow](t, tbl, core.InformerOptions[narrowRow]{})
	write(t, conn, `UPDATE wide SET v = 2, note = 'short' WHERE id = 1`)
	pg.Exec(t, `ALTER TABLE wide REPLICA IDENTITY FULL`)
	informertest.WaitFor(t, inf, write(t, conn, `UPDATE wide SET v = 3 WHERE id = 2`))
	one, _ := inf.Lister().Get("1")
	two, _ := inf.Lister().Get("2")
	if one.V != 2 || two.V != 3 {
		t.Errorf("rows 1 and 2: %+v %+v, want v = 2 and 3", one, two)
	}
	if serverVersion(t, conn) >= 150000 {
		if cols := publishedColumns(t, conn, src.PublicationName(), "wide"); !slices.Contains(cols, "note") {
			t.Errorf("the publication sends columns %q of wide, want every column", cols)
		}
	}
	if cols := pginformer.StreamedColumns(tbl); !slices.Equal(cols, []string{"extra", "id", "note", "tenant", "v"}) {
		t.Errorf("the stream's row layouts carry columns %q, want every column but the generated one", cols)
	}
}
