package reliability_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
)

// The schema-variety matrix: tables of the kinds that once lost rows
// silently (partitioned with moves between partitions, a generated column,
// TOASTed text updated beside another column, an enum, arrays with NULL
// elements, a composite key that changes, a nullable timestamptz, numeric,
// jsonb, and a table whose informer starts late) on one Source behind a
// proxy, written at random while the proxy cuts the connections, the
// server crashes and the slot is dropped. At the end every cache must equal
// the server's own text of every column (each field is a string: no
// decoding of ours sits between the two), read at a head every cache has
// reached.

const matrixDDL = `
CREATE TYPE m_mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE m_parts (id int NOT NULL, region text NOT NULL, v text NOT NULL, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE m_parts_eu PARTITION OF m_parts FOR VALUES IN ('eu');
CREATE TABLE m_parts_us PARTITION OF m_parts FOR VALUES IN ('us');
CREATE TABLE m_gen (id int PRIMARY KEY, qty int NOT NULL, total int GENERATED ALWAYS AS (qty * 2) STORED);
CREATE TABLE m_toast (id int PRIMARY KEY, big text NOT NULL, n int NOT NULL);
ALTER TABLE m_toast ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE m_misc (id int PRIMARY KEY, mood m_mood, tags text[], at timestamptz, amount numeric, doc jsonb);
CREATE TABLE m_ck (a int NOT NULL, b text NOT NULL, v text NOT NULL, PRIMARY KEY (a, b));
CREATE TABLE m_late (id int PRIMARY KEY, v text NOT NULL);
`

type (
	mParts struct {
		ID     string `db:"id"`
		Region string `db:"region"`
		V      string `db:"v"`
	}
	mGen struct {
		ID  string `db:"id"`
		Qty string `db:"qty"`
	}
	mToast struct {
		ID  string `db:"id"`
		Big string `db:"big"`
		N   string `db:"n"`
	}
	mMisc struct {
		ID     string  `db:"id"`
		Mood   *string `db:"mood"`
		Tags   *string `db:"tags"`
		At     *string `db:"at"`
		Amount *string `db:"amount"`
		Doc    *string `db:"doc"`
	}
	mCK struct {
		A string `db:"a"`
		B string `db:"b"`
		V string `db:"v"`
	}
	mLate struct {
		ID string `db:"id"`
		V  string `db:"v"`
	}
)

// matrixTable is one table of the matrix: its informer's cache as text
// rows, and the same read from the server.
type matrixTable struct {
	name  string
	cols  []string // compared, in the struct's order; the key columns first
	key   int      // how many leading columns form the primary key
	late  bool
	start func()
	cache func() []map[string]*string
	wait  func(rv core.ResourceVersion)
	errs  *informertest.Errors
}

// rowText turns a struct of string and *string fields into column -> text.
func rowText(v any) map[string]*string {
	rv := reflect.ValueOf(v)
	out := map[string]*string{}
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		switch x := rv.Field(i).Interface().(type) {
		case string:
			out[f.Tag.Get("db")] = &x
		case *string:
			out[f.Tag.Get("db")] = x
		}
	}
	return out
}

// startMatrixTable registers the table; its informer starts with
// mt.start, once every table is registered.
func startMatrixTable[T any](t *testing.T, src *pginformer.Source, name string, key int, late bool) *matrixTable {
	t.Helper()
	tbl, err := pginformer.NewTable[T](context.Background(), src, name, pginformer.TableOptions[T]{})
	if err != nil {
		t.Fatal(err)
	}
	var zero T
	mt := &matrixTable{name: name, key: key}
	for i := range reflect.TypeOf(zero).NumField() {
		mt.cols = append(mt.cols, reflect.TypeOf(zero).Field(i).Tag.Get("db"))
	}
	mt.start = func() {
		inf, errs := informertest.Run[T](t, tbl, core.InformerOptions[T]{Name: name, Backoff: core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second}})
		mt.errs = errs
		mt.cache = func() []map[string]*string {
			var out []map[string]*string
			for _, o := range inf.Lister().List(nil) {
				out = append(out, rowText(o))
			}
			return out
		}
		mt.wait = func(rv core.ResourceVersion) { informertest.WaitFor(t, inf, rv) }
	}
	mt.late = late
	return mt
}

// truth reads the table's columns as the server prints them.
func (mt *matrixTable) truth(ctx context.Context, conn *pgx.Conn) ([]map[string]*string, error) {
	sel := make([]string, len(mt.cols))
	for i, c := range mt.cols {
		sel[i] = pgx.Identifier{c}.Sanitize() + "::text"
	}
	rows, err := conn.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+pgx.Identifier{mt.name}.Sanitize())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []map[string]*string
	for rows.Next() {
		vals := make([]*string, len(mt.cols))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := map[string]*string{}
		for i, c := range mt.cols {
			row[c] = vals[i]
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// diff compares cache and truth by key.
func (mt *matrixTable) diff(cache, truth []map[string]*string) []string {
	key := func(r map[string]*string) string {
		var parts []string
		for _, c := range mt.cols[:mt.key] {
			parts = append(parts, *r[c])
		}
		return strings.Join(parts, "/")
	}
	show := func(r map[string]*string) string {
		var parts []string
		for _, c := range mt.cols {
			v := "NULL"
			if r[c] != nil {
				v = *r[c]
				if len(v) > 40 {
					v = fmt.Sprintf("%s...(%d bytes)", v[:20], len(v))
				}
			}
			parts = append(parts, c+"="+v)
		}
		return strings.Join(parts, " ")
	}
	c, w := map[string]map[string]*string{}, map[string]map[string]*string{}
	for _, r := range cache {
		c[key(r)] = r
	}
	for _, r := range truth {
		w[key(r)] = r
	}
	var out []string
	for k, r := range w {
		got, ok := c[k]
		if !ok {
			out = append(out, fmt.Sprintf("%s: key %s missing from the cache (server: %s)", mt.name, k, show(r)))
		} else if show(got) != show(r) || !reflect.DeepEqual(got, r) {
			out = append(out, fmt.Sprintf("%s: key %s: cache %s, server %s", mt.name, k, show(got), show(r)))
		}
	}
	for k, r := range c {
		if _, ok := w[k]; !ok {
			out = append(out, fmt.Sprintf("%s: key %s in the cache but not on the server (%s)", mt.name, k, show(r)))
		}
	}
	slices.Sort(out)
	return out
}

// matrixOp is one random write.
func matrixOp(rnd *rand.Rand) string {
	id := rnd.IntN(8) + 1
	word := func() string { return []string{"a", "b c", "d,e", `q"t`, "z"}[rnd.IntN(5)] }
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	switch rnd.IntN(6) {
	case 0: // partitioned: insert, update, move, delete
		region := []string{"eu", "us"}[rnd.IntN(2)]
		switch rnd.IntN(4) {
		case 0:
			return fmt.Sprintf("INSERT INTO m_parts VALUES (%d, '%s', %s) ON CONFLICT (id, region) DO UPDATE SET v = EXCLUDED.v", id, region, lit(word()))
		case 1:
			return fmt.Sprintf("UPDATE m_parts SET v = v || 'x' WHERE id = %d", id)
		case 2:
			return fmt.Sprintf("UPDATE m_parts SET region = CASE region WHEN 'eu' THEN 'us' ELSE 'eu' END WHERE id = %d AND NOT EXISTS (SELECT 1 FROM m_parts p WHERE p.id = %d AND p.region <> m_parts.region)", id, id)
		default:
			return fmt.Sprintf("DELETE FROM m_parts WHERE id = %d AND region = '%s'", id, region)
		}
	case 1: // generated column
		if rnd.IntN(4) == 0 {
			return fmt.Sprintf("DELETE FROM m_gen WHERE id = %d", id)
		}
		return fmt.Sprintf("INSERT INTO m_gen (id, qty) VALUES (%d, %d) ON CONFLICT (id) DO UPDATE SET qty = EXCLUDED.qty", id, rnd.IntN(1000))
	case 2: // TOAST: mostly updates beside the big value
		switch rnd.IntN(5) {
		case 0:
			return fmt.Sprintf("INSERT INTO m_toast SELECT %d, string_agg(md5(random()::text), ''), 0 FROM generate_series(1, 200) ON CONFLICT (id) DO UPDATE SET big = EXCLUDED.big", id)
		case 1:
			return fmt.Sprintf("DELETE FROM m_toast WHERE id = %d", id)
		default:
			return fmt.Sprintf("UPDATE m_toast SET n = n + 1 WHERE id = %d", id)
		}
	case 3: // enum, arrays with NULL, nullable timestamptz, numeric, jsonb
		if rnd.IntN(5) == 0 {
			return fmt.Sprintf("DELETE FROM m_misc WHERE id = %d", id)
		}
		or := func(v string) string {
			if rnd.IntN(3) == 0 {
				return "NULL"
			}
			return v
		}
		mood := or(lit([]string{"sad", "ok", "happy"}[rnd.IntN(3)]))
		tags := or(fmt.Sprintf("ARRAY[%s, NULL, %s]", lit(word()), lit(word())))
		at := or(fmt.Sprintf("'2024-02-29 13:14:15.%06d+02'", rnd.IntN(1000000)))
		amount := or(fmt.Sprintf("%d.%03d", rnd.IntN(1_000_000_000), rnd.IntN(1000)))
		doc := or(fmt.Sprintf(`'{"k": "%s", "n": [1, null, %d.5]}'`, []string{"a", "b c", "d,e"}[rnd.IntN(3)], rnd.IntN(100)))
		return fmt.Sprintf("INSERT INTO m_misc VALUES (%d, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET mood = EXCLUDED.mood, tags = EXCLUDED.tags, at = EXCLUDED.at, amount = EXCLUDED.amount, doc = EXCLUDED.doc", id, mood, tags, at, amount, doc)
	case 4: // composite key that changes
		b := []string{"x", "y/z", `w\v`}[rnd.IntN(3)]
		switch rnd.IntN(4) {
		case 0:
			return fmt.Sprintf("INSERT INTO m_ck VALUES (%d, %s, %s) ON CONFLICT (a, b) DO UPDATE SET v = EXCLUDED.v", id, lit(b), lit(word()))
		case 1:
			return fmt.Sprintf("UPDATE m_ck SET b = b || '+' WHERE a = %d AND length(b) < 6", id)
		case 2:
			return fmt.Sprintf("UPDATE m_ck SET v = v || '!' WHERE a = %d", id)
		default:
			return fmt.Sprintf("DELETE FROM m_ck WHERE a = %d", id)
		}
	default: // the late table
		if rnd.IntN(4) == 0 {
			return fmt.Sprintf("DELETE FROM m_late WHERE id = %d", id)
		}
		return fmt.Sprintf("INSERT INTO m_late VALUES (%d, %s) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v", id, lit(word()))
	}
}

func TestPostgresSchemaMatrix(t *testing.T) {
	for _, seed := range seeds() {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runSchemaMatrix(t, seed) })
	}
}

func runSchemaMatrix(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 0x5c4e3a))
	srv := harness.StartPostgres(t)
	srv.Exec(t, matrixDDL)
	px, err := proxy.New(fmt.Sprintf("127.0.0.1:%d", srv.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	opts := pginformer.Options{StatusInterval: time.Second}
	if rnd.IntN(2) == 0 {
		opts.PermanentSlot, opts.Slot = true, "matrix"
	}
	t.Logf("seed %d, permanent slot: %t", seed, opts.PermanentSlot)
	viaProxy := strings.Replace(srv.ConnString(), fmt.Sprintf("port=%d ", srv.Port), fmt.Sprintf("port=%d ", px.Port()), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	src, err := pginformer.NewSource(ctx, viaProxy, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	conn, err := pgx.Connect(ctx, srv.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { conn.Close(context.Background()) }()
	exec := func(sql string) {
		t.Helper()
		for attempt := 0; ; attempt++ {
			if conn.IsClosed() {
				if c, err := pgx.Connect(ctx, srv.ConnString()); err == nil {
					conn = c
				}
			}
			_, err := conn.Exec(ctx, sql)
			if err == nil {
				return
			}
			if attempt > 100 {
				t.Fatalf("%s: %v", sql, err)
			}
			conn.Close(context.Background())
			time.Sleep(100 * time.Millisecond)
		}
	}
	late := startMatrixTable[mLate](t, src, "m_late", 1, true)
	tables := []*matrixTable{
		startMatrixTable[mParts](t, src, "m_parts", 2, false),
		startMatrixTable[mGen](t, src, "m_gen", 1, false),
		startMatrixTable[mToast](t, src, "m_toast", 1, false),
		startMatrixTable[mMisc](t, src, "m_misc", 1, false),
		startMatrixTable[mCK](t, src, "m_ck", 2, false),
		late,
	}
	for _, mt := range tables {
		if !mt.late {
			mt.start()
		}
	}
	ops := 120
	for i := range ops {
		if i == ops/3 {
			late.start()
		}
		exec(matrixOp(rnd))
		if i%20 == 10 {
			switch rnd.IntN(4) {
			case 0:
				px.Cut()
			case 1:
				px.Pause()
				px.Cut()
				for range 5 {
					exec(matrixOp(rnd))
				}
				px.Resume()
			case 2:
				srv.Stop(t, "immediate")
				srv.Start(t)
			case 3:
				px.Pause()
				px.Cut()
				if err := pgtest.DropSlot(ctx, srv.ConnString(), src.SlotName()); err != nil {
					t.Fatal(err)
				}
				for range 5 {
					exec(matrixOp(rnd))
				}
				px.Resume()
			}
		}
	}
	px.Resume()
	var head pglogrepl.LSN
	for {
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&head); err == nil {
			break
		}
		conn, _ = pgx.Connect(ctx, srv.ConnString())
	}
	var divergences []string
	for _, mt := range tables {
		mt.wait(core.ResourceVersion(head))
		truth, err := mt.truth(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d rows on the server", mt.name, len(truth))
		divergences = append(divergences, mt.diff(mt.cache(), truth)...)
		for _, err := range mt.errs.All() {
			if strings.Contains(err.Error(), "decode") {
				divergences = append(divergences, fmt.Sprintf("%s: reported %v", mt.name, err))
			}
		}
	}
	if len(divergences) > 0 {
		t.Errorf("seed %d: %d divergences at head %s (replay: go test -run 'TestPostgresSchemaMatrix' -seed %d ./integration/reliability/):\n%s",
			seed, len(divergences), head, seed, strings.Join(divergences, "\n"))
	}
}
