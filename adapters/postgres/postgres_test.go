package pginformer_test

import (
	"context"
	"fmt"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"
	"go.uber.org/goleak"
)

const typesDDL = `
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE types (
	id int PRIMARY KEY,
	i2 int2, i4 int4, i8 int8,
	num numeric, f4 float4, f8 float8,
	t text, vc varchar(20), b bool,
	tstz timestamptz, ts timestamp, d date,
	u uuid, j json, jb jsonb, by bytea,
	ai int4[], at text[], m mood, am mood[], nul int4, nult text
)`

const typesValues = `(%d, -12, 123456, 9007199254740993,
	'12345678901234567890.000123', 1.5, 0.1,
	'héllo ''quoted'' \ back', 'vc', true,
	'2024-02-29 13:14:15.123456+02', '2024-02-29 13:14:15.5', '2024-02-29',
	'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.5, "x"]}', '{"b": {"c": null}}', '\x00ff10',
	'{1,NULL,3}', '{"a b","c,d",NULL}', 'happy', '{sad,happy}')`

// Every column but id is nullable: each field holds NULL (NewTable
// refuses a field that cannot).
type typesRow struct {
	ID   int32          `db:"id"`
	I2   *int16         `db:"i2"`
	I4   *int32         `db:"i4"`
	I8   *int64         `db:"i8"`
	Num  pgtype.Numeric `db:"num"`
	F4   *float32       `db:"f4"`
	F8   *float64       `db:"f8"`
	T    *string        `db:"t"`
	VC   *string        `db:"vc"`
	B    *bool          `db:"b"`
	TSTZ *time.Time     `db:"tstz"`
	TS   *time.Time     `db:"ts"`
	D    *time.Time     `db:"d"`
	U    pgtype.UUID    `db:"u"`
	J    map[string]any `db:"j"`
	JB   map[string]any `db:"jb"`
	By   []byte         `db:"by"`
	AI   []pgtype.Int4  `db:"ai"`
	AT   []pgtype.Text  `db:"at"`
	M    *string        `db:"m"`
	AM   []*string      `db:"am"`
	Nul  *int32         `db:"nul"`
	NulT *string        `db:"nult"`
}

// TestTypesRoundTrip: a row read by the snapshot and the same values from
// the stream decode to equal Go values, for structs and maps, with NULLs.
func TestTypesRoundTrip(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, typesDDL)
	conn := pg.Conn(t)
	write(t, conn, "INSERT INTO types VALUES "+fmt.Sprintf(typesValues, 1))
	write(t, conn, "INSERT INTO types (id) VALUES (3)") // NULLs everywhere
	src := newSource(t, pg, pginformer.Options{})
	structs := newTable[typesRow](t, src, "types")
	maps := newTable[map[string]any](t, src, "types")
	ctx := ctxFor(t)

	listS := map[string]typesRow{}
	rvS, err := structs.List(ctx, driver.ListSink[typesRow]{Emit: func(ev driver.Event[typesRow]) error {
		if ev.Err != nil && ev.Key == "1" {
			t.Errorf("List struct: %v", ev.Err)
		}
		listS[ev.Key] = ev.Object
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	listM := map[string]map[string]any{}
	rvM, err := maps.List(ctx, driver.ListSink[map[string]any]{Emit: func(ev driver.Event[map[string]any]) error {
		if ev.Err != nil {
			t.Errorf("List map: %v", ev.Err)
		}
		listM[ev.Key] = ev.Object
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rvS != rvM {
		t.Errorf("the two tables listed at %d and %d: not one snapshot", rvS, rvM)
	}
	ws := watch[typesRow](t, structs, rvS, nil)
	wm := watch[map[string]any](t, maps, rvM, nil)
	write(t, conn, "INSERT INTO types VALUES "+fmt.Sprintf(typesValues, 2))
	write(t, conn, "INSERT INTO types (id) VALUES (4)")

	streamS := map[string]typesRow{}
	for len(streamS) < 2 {
		evs, err := ws.next(t)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Err != nil && ev.Key == "2" {
				t.Errorf("stream struct: %v", ev.Err)
			}
			if ev.Type == driver.Added {
				streamS[ev.Key] = ev.Object
			}
		}
	}
	streamM := map[string]map[string]any{}
	for len(streamM) < 2 {
		evs, err := wm.next(t)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Err != nil {
				t.Errorf("stream map: %v", ev.Err)
			}
			if ev.Type == driver.Added {
				streamM[ev.Key] = ev.Object
			}
		}
	}
	for i, pair := range [][2]string{{"1", "2"}, {"3", "4"}} {
		a, b := listS[pair[0]], streamS[pair[1]]
		b.ID = a.ID
		if i == 0 && !reflect.DeepEqual(a, b) {
			t.Errorf("struct from snapshot and stream differ:\nsnapshot %#v\nstream   %#v", a, b)
		}
		am, bm := listM[pair[0]], streamM[pair[1]]
		if am == nil || bm == nil {
			t.Fatalf("map rows missing: %v %v", am, bm)
		}
		bm["id"] = am["id"]
		if !reflect.DeepEqual(am, bm) {
			t.Errorf("map from snapshot and stream differ:\nsnapshot %#v\nstream   %#v", am, bm)
		}
	}
	// Spot checks that the values are the right ones, not just equal.
	r := listS["1"]
	sad, happy := "sad", "happy"
	if *r.I8 != 9007199254740993 || *r.T != `héllo 'quoted' \ back` || *r.M != "happy" || !reflect.DeepEqual(r.AM, []*string{&sad, &happy}) ||
		!reflect.DeepEqual(r.By, []byte{0, 0xff, 0x10}) || r.TSTZ.UTC() != time.Date(2024, 2, 29, 11, 14, 15, 123456000, time.UTC) || r.AI[1].Valid {
		t.Errorf("decoded values wrong: %#v", r)
	}
	if v, _ := r.Num.Value(); v != "12345678901234567890.000123" {
		t.Errorf("numeric = %v", v)
	}
	m := listM["1"]
	if m["m"] != "happy" || !reflect.DeepEqual(m["am"], []any{"sad", "happy"}) {
		t.Errorf("map enum values: %#v %#v", m["m"], m["am"])
	}
	if r.Nul != nil || r.NulT != nil {
		t.Errorf("NULLs decoded into pointers as %v %v", r.Nul, r.NulT)
	}
	n := listM["3"]
	for k, v := range n {
		if k != "id" && v != nil {
			t.Errorf("NULL column %q decoded to %#v", k, v)
		}
	}
}

// TestSeveralTablesOneSlot: two tables of different types on one Source
// share one slot and one walsender; both caches follow their tables.
func TestSeveralTablesOneSlot(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE a (id bigint PRIMARY KEY, v text NOT NULL); CREATE TABLE b (id bigint PRIMARY KEY, v text NOT NULL, extra int);
		INSERT INTO a VALUES (1, 'a1'); INSERT INTO b VALUES (1, 'b1', 7)`)
	conn := pg.Conn(t)
	src := newSource(t, pg, pginformer.Options{})
	ta := newTable[kv](t, src, "a")
	tb := newTable[map[string]any](t, src, "b")
	infA, _ := informer[kv](t, ta, nil)
	infB, _ := informer[map[string]any](t, tb, nil)
	write(t, conn, "INSERT INTO a VALUES (2, 'a2')")
	rv := write(t, conn, "BEGIN; UPDATE b SET v = 'b1x'; INSERT INTO a VALUES (3, 'a3'); COMMIT")
	waitFor(t, infA, rv)
	waitFor(t, infB, rv)
	if err := cacheMatches(t, conn, "a", infA); err != nil {
		t.Error(err)
	}
	if got, _ := infB.Lister().Get("1"); got["v"] != "b1x" || got["extra"] != int32(7) {
		t.Errorf("b/1 = %#v", got)
	}
	// When b's List starts only after a's Watch has started the stream, b
	// reads in a temporary helper slot's snapshot; that slot is dropped
	// when its List ends, but its walsender may outlive the connection's
	// close for a moment. What must hold once it is gone: one slot, one
	// walsender.
	var slots, senders int
	informertest.Eventually(t, "one slot and one walsender for one source with two tables", func() bool {
		if err := conn.QueryRow(ctxFor(t), "SELECT (SELECT count(*) FROM pg_replication_slots), (SELECT count(*) FROM pg_stat_replication)").Scan(&slots, &senders); err != nil {
			t.Fatal(err)
		}
		return slots == 1 && senders == 1
	})
	// An operator can tell who holds the slot.
	var app string
	if err := conn.QueryRow(ctxFor(t), "SELECT application_name FROM pg_stat_replication").Scan(&app); err != nil || !strings.Contains(app, src.SlotName()) {
		t.Errorf("the walsender's application_name is %q (%v), want one naming the slot %q", app, err, src.SlotName())
	}
	// WaitFor a version that touched neither table returns too.
	pg.Exec(t, "CREATE TABLE other (id int PRIMARY KEY)")
	rv = write(t, conn, "INSERT INTO other VALUES (1)")
	waitFor(t, infA, rv)
	waitFor(t, infB, rv)
}

// TestWritersDuringInitialList: writers insert, update and delete while the
// informer lists; afterwards the cache equals the table and every handler
// saw each key's versions once, in commit order.
func TestWritersDuringInitialList(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL);
		INSERT INTO kv SELECT g, '0' FROM generate_series(1, 20000) g`)
	src := newSource(t, pg, pginformer.Options{})
	tbl := newTable[kv](t, src, "kv")
	ctx, cancel := context.WithCancel(ctxFor(t))
	var wg sync.WaitGroup
	var lastMu sync.Mutex
	var last core.ResourceVersion
	type version struct {
		key    string
		n      int
		before core.ResourceVersion // WAL insert position before the statement: below its commit
	}
	var written []version
	for w := range 3 {
		conn := pg.Conn(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; ctx.Err() == nil; n++ {
				id := int64(w*1000 + n%50 + 1)
				sql := "UPDATE kv SET v = $2 WHERE id = $1"
				if n%7 == 0 {
					sql = "DELETE FROM kv WHERE id = $1 AND $2::text IS NOT NULL"
				} else if n%7 == 1 {
					sql = "INSERT INTO kv VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v"
				}
				var before, after pglogrepl.LSN
				if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()").Scan(&before); err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				tag, err := conn.Exec(context.Background(), sql, id, fmt.Sprint(n))
				if err == nil {
					err = conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()").Scan(&after)
				}
				if err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				lastMu.Lock()
				last = max(last, core.ResourceVersion(after))
				if tag.RowsAffected() == 1 && n%7 != 0 {
					written = append(written, version{fmt.Sprint(id), n, core.ResourceVersion(before)})
				}
				lastMu.Unlock()
			}
		}()
	}
	var seenMu sync.Mutex
	seen := map[string][]string{}
	note := func(key, v string) {
		seenMu.Lock()
		seen[key] = append(seen[key], v)
		seenMu.Unlock()
	}
	// Let the writers get going before the list.
	eventually(t, "the writers have written", func() error {
		lastMu.Lock()
		defer lastMu.Unlock()
		if len(written) < 30 {
			return fmt.Errorf("%d writes", len(written))
		}
		return nil
	})
	lw := &listRVRecorder[kv]{ListerWatcher: tbl}
	inf, _ := informer[kv](t, lw, core.ResourceEventHandlerFuncs[kv]{
		AddFunc:    func(key string, o kv, _ bool) { note(key, o.V) },
		UpdateFunc: func(key string, _, o kv) { note(key, o.V) },
		DeleteFunc: func(key string, _ kv, _ bool) { note(key, "deleted") },
	})
	// Wait for writes after the list's snapshot, not for time: on a loaded
	// machine the writers may get little done in any fixed interval.
	eventually(t, "writes land after the list's snapshot", func() error {
		listRV := core.ResourceVersion(lw.rv.Load())
		lastMu.Lock()
		defer lastMu.Unlock()
		n := 0
		for _, v := range written {
			if v.before > listRV {
				n++
			}
		}
		if n < 30 {
			return fmt.Errorf("%d writes after the list at %d", n, listRV)
		}
		return nil
	})
	cancel()
	wg.Wait()
	waitFor(t, inf, last)
	if err := cacheMatches(t, pg.Conn(t), "kv", inf); err != nil {
		t.Fatal(err)
	}
	seenMu.Lock()
	defer seenMu.Unlock()
	// Every version committed after the list's snapshot reached the
	// handlers exactly once.
	listRV := core.ResourceVersion(lw.rv.Load())
	checked := 0
	for _, v := range written {
		if v.before <= listRV {
			continue // maybe in the snapshot, maybe not: the writer cannot tell
		}
		checked++
		count := 0
		for _, s := range seen[v.key] {
			if s == fmt.Sprint(v.n) {
				count++
			}
		}
		if count != 1 {
			t.Errorf("key %s version %d (committed after the list at %d) reached the handlers %d times, want once", v.key, v.n, listRV, count)
		}
	}
	t.Logf("%d writes, %d of them after the list's snapshot checked for exactly-once delivery", len(written), checked)
	if checked == 0 {
		t.Error("no write landed after the list's snapshot; the test proved nothing")
	}
	for key, vs := range seen {
		prev := -1
		for _, v := range vs {
			if v == "deleted" {
				continue
			}
			var n int
			fmt.Sscan(v, &n)
			if n != 0 && n <= prev {
				t.Errorf("key %s: versions %v not strictly increasing (repeated or out of order)", key, vs)
				break
			}
			prev = n
		}
	}
}

// listRVRecorder keeps the RV of the last List.
type listRVRecorder[T any] struct {
	driver.ListerWatcher[T]
	rv atomic.Uint64
}

func (l *listRVRecorder[T]) List(ctx context.Context, opts driver.ListSink[T]) (core.ResourceVersion, error) {
	rv, err := l.ListerWatcher.List(ctx, opts)
	l.rv.Store(uint64(rv))
	return rv, err
}

// examplePG serves the runnable examples, which get no testing.TB.
var examplePG *harness.Postgres

func TestMain(m *testing.M) {
	pg, err := harness.StartPostgresMain()
	if err != nil {
		fmt.Fprintf(os.Stderr, "postgres unavailable: %v\n", err)
		if harness.InCI() {
			os.Exit(1)
		}
		os.Exit(0) // every test here needs the server
	}
	examplePG = pg
	code := m.Run()
	pg.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestEstimate: List reports the planner's row estimate before the rows.
func TestEstimate(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL);
		INSERT INTO kv SELECT g, 'x' FROM generate_series(1, 5000) g; ANALYZE kv`)
	src := newSource(t, pg, pginformer.Options{})
	tbl := newTable[kv](t, src, "kv")
	estimate, rows := int64(-1), 0
	_, err := tbl.List(ctxFor(t), driver.ListSink[kv]{
		Estimate: func(n int64) {
			if rows != 0 {
				t.Error("Estimate called after the first row")
			}
			estimate = n
		},
		Emit: func(driver.Event[kv]) error { rows++; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if estimate != 5000 || rows != 5000 {
		t.Errorf("estimate %d, rows %d; want 5000 and 5000", estimate, rows)
	}
}

// TestLateTable: a table whose informer starts after the stream is running
// lists inside a helper slot's snapshot and then follows the shared stream
// with nothing missing or repeated; the helper slot is gone afterwards.
func TestLateTable(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE a (id bigint PRIMARY KEY, v text NOT NULL); CREATE TABLE b (id bigint PRIMARY KEY, v text NOT NULL)`)
	conn := pg.Conn(t)
	var logBuf syncBuffer
	src := newSource(t, pg, pginformer.Options{Logger: slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ta, tb := newTable[kv](t, src, "a"), newTable[kv](t, src, "b")
	infA, _ := informer[kv](t, ta, nil)
	for i := range 50 {
		write(t, conn, fmt.Sprintf("INSERT INTO a VALUES (%d, 'a'); INSERT INTO b VALUES (%d, 'b')", i, i))
	}
	// Writers keep going while b lists.
	stop := make(chan struct{})
	done := make(chan struct{})
	wconn := pg.Conn(t)
	go func() {
		defer close(done)
		for i := 50; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := wconn.Exec(context.Background(), fmt.Sprintf("INSERT INTO b VALUES (%d, 'b'); UPDATE b SET v = 'b%d' WHERE id = %d", i, i, i%50)); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
		}
	}()
	infB, _ := informer[kv](t, tb, nil)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-done
	rv := write(t, conn, "DELETE FROM b WHERE id = 3")
	waitFor(t, infA, rv)
	waitFor(t, infB, rv)
	for _, c := range []struct {
		name string
		inf  *core.SharedIndexInformer[kv]
	}{{"a", infA}, {"b", infB}} {
		if err := cacheMatches(t, conn, c.name, c.inf); err != nil {
			t.Errorf("table %s: %v", c.name, err)
		}
	}
	if !strings.Contains(logBuf.String(), `listed in a helper slot's snapshot" table="\"public\".\"b\""`) {
		t.Errorf("b was not listed through a helper snapshot; log:\n%s", logBuf.String())
	}
	var slots int
	if err := conn.QueryRow(ctxFor(t), "SELECT count(*) FROM pg_replication_slots").Scan(&slots); err != nil || slots != 1 {
		t.Errorf("%d replication slots after the late List, want 1 (%v)", slots, err)
	}
}
