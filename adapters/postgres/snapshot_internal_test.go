package pginformer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pgx/v5"
)

// TestCopyParserChunks: a binary COPY stream cut anywhere (CopyData
// boundaries are the server's choice) yields the same rows, NULL and empty
// values apart, and a stream without its trailer is told apart.
func TestCopyParserChunks(t *testing.T) {
	var s bytes.Buffer
	s.Write(copySignature)
	s.Write([]byte{0, 0, 0, 0, 0, 0, 0, 2, 'x', 'y'}) // flags, 2 bytes of header extension
	rows := [][][]byte{{[]byte("1"), nil, []byte("abc")}, {[]byte("22"), []byte{}, nil}, {[]byte("333"), []byte("é"), []byte(strings.Repeat("z", 300))}}
	for _, r := range rows {
		s.Write(binary.BigEndian.AppendUint16(nil, uint16(len(r))))
		for _, f := range r {
			if f == nil {
				s.Write([]byte{0xff, 0xff, 0xff, 0xff})
				continue
			}
			s.Write(binary.BigEndian.AppendUint32(nil, uint32(len(f))))
			s.Write(f)
		}
	}
	s.Write([]byte{0xff, 0xff})
	stream := s.Bytes()
	show := func(fields [][]byte) string {
		var b strings.Builder
		for _, f := range fields {
			if f == nil {
				b.WriteString("<NULL>|")
			} else {
				fmt.Fprintf(&b, "%q|", f)
			}
		}
		return b.String()
	}
	var want []string
	for _, r := range rows {
		want = append(want, show(r))
	}
	for chunk := 1; chunk <= len(stream); chunk++ {
		var got []string
		cp := &copyParser{ncols: 3, row: func(f [][]byte) error { got = append(got, show(f)); return nil }}
		for i := 0; i < len(stream); i += chunk {
			if _, err := cp.Write(stream[i:min(i+chunk, len(stream))]); err != nil {
				t.Fatalf("chunk %d: %v", chunk, err)
			}
		}
		if !cp.done || strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("chunk %d: done=%v rows\n%s\nwant\n%s", chunk, cp.done, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	cp := &copyParser{ncols: 3, row: func([][]byte) error { return nil }}
	if _, err := cp.Write(stream[:len(stream)-2]); err != nil || cp.done {
		t.Fatalf("stream without trailer: err %v, done %v", err, cp.done)
	}
	cp = &copyParser{ncols: 2, row: func([][]byte) error { return nil }}
	if _, err := cp.Write(stream); err == nil {
		t.Fatal("a row of 3 fields where 2 are expected was accepted")
	}
}

type wideRow struct {
	ID   int64  `db:"id"`
	Pad  string `db:"pad"`
	Note string `db:"note"`
}

func listAll[T any](t *testing.T, tbl *Table[T]) (core.ResourceVersion, map[string]T) {
	t.Helper()
	got := map[string]T{}
	rv, err := tbl.List(t.Context(), driver.ListSink[T]{Emit: func(ev driver.Event[T]) error {
		if ev.Err != nil {
			return ev.Err
		}
		if _, dup := got[ev.Key]; dup {
			return fmt.Errorf("key %q listed twice", ev.Key)
		}
		got[ev.Key] = ev.Object
		return nil
	}})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return rv, got
}

// TestListRanges: a table split into block ranges read by several
// connections inside one snapshot lists every row once, at the snapshot's
// version, with rows changed after the snapshot as they were in it.
func TestListRanges(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE wide (id bigint PRIMARY KEY, pad text NOT NULL, note text NOT NULL);
		INSERT INTO wide SELECT g, repeat('p', 200), 'row ' || g FROM generate_series(1, 20000) g`)
	pg.Exec(t, "VACUUM ANALYZE wide")
	defer func(old int64) { rangeBlocks = old }(rangeBlocks)
	rangeBlocks = 16
	var mu sync.Mutex
	var readers, ranges int
	testHookReaders = func(_ string, r, n int) { mu.Lock(); readers, ranges = r, n; mu.Unlock() }
	defer func() { testHookReaders = nil }()

	var reports []SyncProgress
	progress := func(p SyncProgress) { mu.Lock(); reports = append(reports, p); mu.Unlock() }
	src, err := NewSource(t.Context(), pg.ConnString(), Options{SnapshotReaders: 3, SyncProgress: progress})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	tbl, err := NewTable[wideRow](t.Context(), src, "wide", TableOptions[wideRow]{})
	if err != nil {
		t.Fatal(err)
	}
	rv, got := listAll(t, tbl)
	if len(got) != 20000 {
		t.Fatalf("listed %d rows, want 20000", len(got))
	}
	for i := int64(1); i <= 20000; i++ {
		if r, ok := got[fmt.Sprint(i)]; !ok || r.ID != i || r.Note != fmt.Sprintf("row %d", i) || len(r.Pad) != 200 {
			t.Fatalf("row %d: %+v (listed %v)", i, r, ok)
		}
	}
	mu.Lock()
	if readers < 2 || ranges < 2 {
		t.Errorf("the table of %d rows was read by %d readers in %d ranges; want several of each", len(got), readers, ranges)
	}
	// Progress: rows only grow, the last report is the end with every row.
	for i, p := range reports {
		if p.Table != `"public"."wide"` || p.Estimate != 20000 || (i > 0 && p.Rows < reports[i-1].Rows) || p.Done != (i == len(reports)-1) {
			t.Errorf("progress report %d of %d: %+v", i, len(reports), p)
		}
	}
	if n := len(reports); n == 0 || reports[n-1].Rows != 20000 || reports[n-1].ETA != 0 {
		t.Errorf("last progress report %+v, want Done with 20000 rows", reports)
	}
	reports = nil
	mu.Unlock()
	if rv == 0 {
		t.Error("List returned version 0")
	}

	// A later List (a helper slot's snapshot, with the stream running)
	// sees a change made before it and none after.
	conn := pg.Conn(t)
	if _, err := conn.Exec(t.Context(), "UPDATE wide SET note = 'changed' WHERE id % 1000 = 0; DELETE FROM wide WHERE id = 7"); err != nil {
		t.Fatal(err)
	}
	_, got = listAll(t, tbl)
	if len(got) != 19999 || got["1000"].Note != "changed" || got["999"].Note != "row 999" {
		t.Fatalf("relist: %d rows, 1000=%+v 999=%+v", len(got), got["1000"], got["999"])
	}
}

// TestListTakesUpFreedReaders: a List that starts while another List holds
// the other reader slot reads alone at first, and takes the slot up once
// that List ends, at its next range.
func TestListTakesUpFreedReaders(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE held (id bigint PRIMARY KEY, pad text NOT NULL, note text NOT NULL);
		INSERT INTO held SELECT g, 'x', 'y' FROM generate_series(1, 10) g;
		CREATE TABLE big (id bigint PRIMARY KEY, pad text NOT NULL, note text NOT NULL);
		INSERT INTO big SELECT g, repeat('p', 200), 'row ' || g FROM generate_series(1, 20000) g`)
	pg.Exec(t, "VACUUM ANALYZE big")
	defer func(old int64) { rangeBlocks = old }(rangeBlocks)
	rangeBlocks = 16
	var mu sync.Mutex
	readers := map[string]int{}
	testHookReaders = func(table string, r, _ int) { mu.Lock(); readers[table] = r; mu.Unlock() }
	defer func() { testHookReaders = nil }()
	src, err := NewSource(t.Context(), pg.ConnString(), Options{SnapshotReaders: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	heldTbl, err := NewTable[wideRow](t.Context(), src, "held", TableOptions[wideRow]{})
	if err != nil {
		t.Fatal(err)
	}
	bigTbl, err := NewTable[wideRow](t.Context(), src, "big", TableOptions[wideRow]{})
	if err != nil {
		t.Fatal(err)
	}
	holding, release, heldDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		var once sync.Once
		_, err := heldTbl.List(t.Context(), driver.ListSink[wideRow]{Emit: func(driver.Event[wideRow]) error {
			once.Do(func() { close(holding); <-release })
			return nil
		}})
		heldDone <- err
	}()
	<-holding // held's List keeps its reader slot until released
	var once sync.Once
	n := 0
	_, err = bigTbl.List(t.Context(), driver.ListSink[wideRow]{Emit: func(ev driver.Event[wideRow]) error {
		var err error
		once.Do(func() { close(release); err = <-heldDone })
		n++
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 20000 || readers["big"] < 2 || readers["held"] != 1 {
		t.Fatalf("big listed %d rows with %d readers (held: %d); want 20000 rows, the freed slot taken up", n, readers["big"], readers["held"])
	}
}

// TestListTablesSideBySide: the first Lists of three tables read inside the
// slot's one exported snapshot at the same time: a List whose sink waits for
// another table's first row finishes (it would deadlock if Lists ran one
// after another), and every List returns the slot's consistent point.
func TestListTablesSideBySide(t *testing.T) {
	pg := harness.StartPostgres(t)
	for _, n := range []string{"ta", "tb", "tc"} {
		pg.Exec(t, "CREATE TABLE "+n+" (id bigint PRIMARY KEY, pad text NOT NULL, note text NOT NULL); INSERT INTO "+n+" SELECT g, 'x', 'y' FROM generate_series(1, 1000) g")
	}
	src, err := NewSource(t.Context(), pg.ConnString(), Options{SnapshotReaders: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var tbls []*Table[wideRow]
	for _, n := range []string{"ta", "tb", "tc"} {
		tbl, err := NewTable[wideRow](t.Context(), src, n, TableOptions[wideRow]{})
		if err != nil {
			t.Fatal(err)
		}
		tbls = append(tbls, tbl)
	}
	started := make([]chan struct{}, 3)
	for i := range started {
		started[i] = make(chan struct{})
	}
	ctx := t.Context()
	rvs := make([]core.ResourceVersion, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, tbl := range tbls {
		wg.Go(func() {
			first := true
			n := 0
			rvs[i], errs[i] = tbl.List(ctx, driver.ListSink[wideRow]{Emit: func(ev driver.Event[wideRow]) error {
				n++
				if first {
					first = false
					close(started[i])
					// Wait for the next table's List to be reading too.
					select {
					case <-started[(i+1)%3]:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			}})
			if errs[i] == nil && n != 1000 {
				errs[i] = fmt.Errorf("listed %d rows", n)
			}
		})
	}
	wg.Wait()
	for i := range tbls {
		if errs[i] != nil {
			t.Fatalf("List %d: %v", i, errs[i])
		}
	}
	if rvs[0] != rvs[1] || rvs[1] != rvs[2] || rvs[0] == 0 {
		t.Fatalf("the first Lists returned %v; want the slot's one consistent point", rvs)
	}
}

type toastWide struct {
	ID  int64  `db:"id"`
	S   string `db:"s"`
	Num string `db:"num"`
	Big string `db:"big"`
	J   []byte `db:"j"`
	Bin []byte `db:"bin"`
}

// TestListToastMemory: List keeps, for TOAST fill-in, only the values that
// can be stored out of line: never a short text, a number or a fixed-length
// value, nor (Postgres 14+) a text stored inline though longer than 20
// bytes; a long text decoded into a string shares the string's bytes; and
// an update beside TOASTed text, jsonb and bytea values keeps them, for
// struct and map rows.
func TestListToastMemory(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE tw (id bigint PRIMARY KEY, s text NOT NULL, num numeric NOT NULL, big text NOT NULL, j jsonb NOT NULL, bin bytea NOT NULL, n int NOT NULL DEFAULT 0);
		ALTER TABLE tw ALTER COLUMN big SET STORAGE EXTERNAL, ALTER COLUMN j SET STORAGE EXTERNAL, ALTER COLUMN bin SET STORAGE EXTERNAL;
		INSERT INTO tw (id, s, num, big, j, bin) SELECT g, 'inline, over 20 bytes: ' || md5(g::text), g * 1.5, 'b' || g, '{"k": 1}', '\x01'
			FROM generate_series(1, 100) g;
		UPDATE tw SET big = (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 300) i),
			j = jsonb_build_object('doc', (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 200) i)),
			bin = decode((SELECT string_agg(md5(i::text), '') FROM generate_series(1, 200) i), 'hex')
			WHERE id <= 3`)
	src, err := NewSource(t.Context(), pg.ConnString(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	tbl, err := NewTable[toastWide](t.Context(), src, "tw", TableOptions[toastWide]{})
	if err != nil {
		t.Fatal(err)
	}
	mtbl, err := NewTable[map[string]any](t.Context(), src, "tw", TableOptions[map[string]any]{})
	if err != nil {
		t.Fatal(err)
	}
	_, got := listAll(t, tbl)
	listAll(t, mtbl)
	for _, st := range []*tableState{tbl.st, mtbl.st} {
		st.knownMu.Lock()
		// Short text, numeric and fixed-length values are never kept, nor
		// on Postgres 14+ an inline value over 20 bytes (the text s, the
		// small jsonb j; before, they cannot be told from out-of-line
		// ones); the long text, jsonb and bytea only on rows 1-3.
		for key := range 100 {
			key := strconv.Itoa(key + 1)
			var cols []string
			for _, kv := range st.known(key) {
				cols = append(cols, kv.col)
			}
			var want []string
			switch {
			case key == "1" || key == "2" || key == "3":
				want = []string{"big", "bin", "j"}
				if src.version < 140000 {
					want = append(want, "s")
				}
			case src.version < 140000:
				want = []string{"j", "s"}
			}
			if strings.Join(cols, ",") != strings.Join(want, ",") {
				t.Errorf("key %s keeps values of %v, want %s", key, cols, want)
			}
		}
		st.knownMu.Unlock()
	}
	tbl.st.knownMu.Lock()
	var big, j []byte
	for _, kv := range tbl.st.known("1") {
		switch kv.col {
		case "big":
			big = kv.data
		case "j":
			j = kv.data
		}
	}
	if obj := got["1"]; len(obj.Big) < 9000 || string(big) != obj.Big || unsafe.StringData(obj.Big) != &big[0] {
		t.Errorf("the kept big value (%d bytes) is not the listed string's bytes (%d)", len(big), len(obj.Big))
	}
	// jsonb decoded into a byte slice holds the same text: shared too.
	if obj := got["1"]; len(obj.J) < 6000 || !bytes.Equal(j, obj.J) || &obj.J[0] != &j[0] {
		t.Errorf("the kept jsonb value (%d bytes) is not the listed slice's bytes (%d)", len(j), len(obj.J))
	}
	tbl.st.knownMu.Unlock()

	// Updates beside the TOASTed values, from the snapshot's rows and
	// from a streamed one.
	conn := pg.Conn(t)
	inf, errs := informertest.Run[toastWide](t, tbl, core.InformerOptions[toastWide]{})
	minf, merrs := informertest.Run[map[string]any](t, mtbl, core.InformerOptions[map[string]any]{})
	if _, err := conn.Exec(t.Context(), `INSERT INTO tw SELECT 1000, s, num, big, j, bin, n FROM tw WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `UPDATE tw SET n = n + 1, s = 'changed'`); err != nil {
		t.Fatal(err)
	}
	rv := lsnNow(t, conn)
	informertest.WaitFor(t, inf, rv)
	informertest.WaitFor(t, minf, rv)
	for _, id := range []int64{1, 2, 3, 1000} {
		var want toastWide
		if err := conn.QueryRow(t.Context(), "SELECT id, s, num::text, big, j::text, bin FROM tw WHERE id = $1", id).Scan(&want.ID, &want.S, &want.Num, &want.Big, &want.J, &want.Bin); err != nil {
			t.Fatal(err)
		}
		obj, ok := inf.Lister().Get(fmt.Sprint(id))
		if !ok || obj.S != "changed" || obj.Big != want.Big || len(obj.Big) < 9000 || !bytes.Equal(obj.Bin, want.Bin) || len(obj.Bin) < 3000 || len(obj.J) < 6000 {
			t.Errorf("row %d: cached s=%q len(big)=%d len(j)=%d len(bin)=%d; want the database's (len(big)=%d)", id, obj.S, len(obj.Big), len(obj.J), len(obj.Bin), len(want.Big))
		}
		m, ok := minf.Lister().Get(fmt.Sprint(id))
		if b, _ := m["big"].(string); !ok || b != want.Big || m["s"] != "changed" || m["j"] == nil {
			t.Errorf("map row %d: len(big)=%d s=%v j=%v", id, len(b), m["s"], m["j"] != nil)
		}
	}
	for _, e := range append(errs.All(), merrs.All()...) {
		t.Errorf("informer error: %v", e)
	}
}

func lsnNow(t *testing.T, conn *pgx.Conn) core.ResourceVersion {
	t.Helper()
	var s string
	if err := conn.QueryRow(t.Context(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	var hi, lo uint64
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		t.Fatal(err)
	}
	return core.ResourceVersion(hi<<32 | lo)
}

// TestOutOfLineMatchesTheHeap holds outOfLine's verdict on every value of
// a table against the heap's own bytes (pageinspect: an out-of-line value
// is stored as a TOAST pointer, whose first byte is 0x01): it must be true
// for every out-of-line value (TOAST memory must keep it) and, on Postgres
// 14+, false for every uncompressed inline one, small values moved out of
// line by a low toast_tuple_target and inline ones over 20 bytes included,
// for text-like and other variable-length types.
func TestOutOfLineMatchesTheHeap(t *testing.T) {
	pg := harness.StartPostgres(t)
	cols := []struct{ name, typ, value string }{
		{"j", "jsonb", "jsonb_build_object('k', repeat('q', g * 5))"},
		{"num", "numeric", "repeat('9', g)::numeric / 7"},
		{"arr", "int[]", "ARRAY(SELECT generate_series(1, g * 2))"},
		{"t", "text", "repeat('t', g * 4)"},
		{"jc", "jsonb", "jsonb_build_object('k', repeat('c', g * 60))"}, // compressible (STORAGE EXTENDED)
	}
	ddl := "CREATE EXTENSION IF NOT EXISTS pageinspect; CREATE TABLE ool (id int PRIMARY KEY"
	ins := "INSERT INTO ool SELECT g"
	for _, c := range cols {
		ddl += ", " + c.name + " " + c.typ
		ins += ", " + c.value
	}
	ddl += ", pad text) WITH (toast_tuple_target = 128);"
	ins += ", CASE WHEN g % 3 = 0 THEN repeat('p', 3000) ELSE 'p' END FROM generate_series(1, 60) g"
	for _, c := range cols[:4] {
		ddl += " ALTER TABLE ool ALTER COLUMN " + c.name + " SET STORAGE EXTERNAL;"
	}
	pg.Exec(t, ddl+" ALTER TABLE ool ALTER COLUMN pad SET STORAGE EXTERNAL; "+ins)
	conn := pg.Conn(t)
	var version int
	if err := conn.QueryRow(t.Context(), "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	// The stored bytes of every live row's values, by id, in column order.
	heap := map[int][][]byte{}
	rows, err := conn.Query(t.Context(), `SELECT (SELECT id FROM ool WHERE ool.ctid = format('(%s,%s)', b, h.lp)::tid), h.t_attrs
		FROM generate_series(0, pg_relation_size('ool') / 8192 - 1) b, heap_page_item_attrs(get_raw_page('ool', b::int), 'ool'::regclass) h
		WHERE h.t_attrs IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id *int
		var attrs [][]byte
		if err := rows.Scan(&id, &attrs); err != nil {
			t.Fatal(err)
		}
		if id != nil {
			heap[*id] = attrs
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sel := "SELECT id"
	for _, c := range cols {
		sel += ", " + outOfLine(c.name, oidOf(t, conn, c.typ), version) + ", pg_column_size(" + c.name + ")"
	}
	rows, err = conn.Query(t.Context(), sel+" FROM ool")
	if err != nil {
		t.Fatal(err)
	}
	type tally struct{ out, smallOut, inlineLong int }
	seen := make([]tally, len(cols))
	n := 0
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		id := int(vals[0].(int32))
		for i, c := range cols {
			says, size := vals[1+2*i].(bool), vals[2+2*i].(int32)
			stored := heap[id][1+i] // column 1 is id
			external := stored[0] == 0x01
			compressed := stored[0]&0x03 == 0x02
			switch {
			case external && !says:
				t.Errorf("row %d column %s: out of line (%d bytes), but outOfLine says it cannot be", id, c.name, size)
			case says && !external && !compressed && version >= 140000:
				t.Errorf("row %d column %s: inline, uncompressed (%d bytes), but outOfLine says it may be out of line", id, c.name, size)
			}
			switch {
			case external && size < 100:
				seen[i].smallOut++
				fallthrough
			case external:
				seen[i].out++
			case !compressed && size > maxInline:
				seen[i].inlineLong++
			}
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 60 || len(heap) != 60 {
		t.Fatalf("read %d rows and the heap of %d, want 60", n, len(heap))
	}
	// The table has the cases that tell a right rule from a loose one.
	for i, c := range cols[:4] {
		if seen[i].out == 0 || seen[i].smallOut == 0 || seen[i].inlineLong == 0 {
			t.Errorf("column %s: %d values out of line (%d of them under 100 bytes), %d inline over %d bytes; the table should have each", c.name, seen[i].out, seen[i].smallOut, seen[i].inlineLong, maxInline)
		}
	}
}

func oidOf(t *testing.T, conn *pgx.Conn, typ string) uint32 {
	t.Helper()
	var oid uint32
	if err := conn.QueryRow(t.Context(), "SELECT $1::regtype::oid", typ).Scan(&oid); err != nil {
		t.Fatal(err)
	}
	return oid
}

// TestListToastFlagsOfManyColumns: a table with more TOAST-able columns
// than one flags field holds (flagsPerField) keeps, for TOAST fill-in,
// exactly the out-of-line values of each, in the first field and past it,
// and an update beside them fills them in.
func TestListToastFlagsOfManyColumns(t *testing.T) {
	pg := harness.StartPostgres(t)
	const ncols = flagsPerField + 7
	ddl := "CREATE TABLE tm (id bigint PRIMARY KEY"
	for i := range ncols {
		ddl += fmt.Sprintf(", c%d text NOT NULL DEFAULT 'short'", i)
	}
	ddl += ");"
	for i := range ncols {
		ddl += fmt.Sprintf(" ALTER TABLE tm ALTER COLUMN c%d SET STORAGE EXTERNAL;", i)
	}
	long := "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 100) i)"
	// Row 1: a long value in the first flags field (c1) and in the second
	// (c65); row 2: only c0; row 3: none.
	pg.Exec(t, ddl+" INSERT INTO tm (id) SELECT generate_series(1, 3);"+
		" UPDATE tm SET c1 = "+long+", c"+strconv.Itoa(flagsPerField+2)+" = "+long+" WHERE id = 1;"+
		" UPDATE tm SET c0 = "+long+" WHERE id = 2")
	src, err := NewSource(t.Context(), pg.ConnString(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	tbl, err := NewTable[map[string]any](t.Context(), src, "tm", TableOptions[map[string]any]{})
	if err != nil {
		t.Fatal(err)
	}
	listAll(t, tbl)
	far := "c" + strconv.Itoa(flagsPerField+2)
	want := map[string]string{"1": "c1," + far, "2": "c0", "3": ""}
	tbl.st.knownMu.Lock()
	for key, w := range want {
		var cols []string
		for _, kv := range tbl.st.known(key) {
			cols = append(cols, kv.col)
		}
		slices.Sort(cols)
		if got := strings.Join(cols, ","); got != w && src.version >= 140000 {
			t.Errorf("key %s keeps values of %q, want %q", key, got, w)
		}
	}
	tbl.st.knownMu.Unlock()

	conn := pg.Conn(t)
	inf, errs := informertest.Run[map[string]any](t, tbl, core.InformerOptions[map[string]any]{})
	if _, err := conn.Exec(t.Context(), "UPDATE tm SET c2 = 'changed'"); err != nil {
		t.Fatal(err)
	}
	informertest.WaitFor(t, inf, lsnNow(t, conn))
	for _, id := range []int64{1, 2, 3} {
		var c0, c1, cfar string
		if err := conn.QueryRow(t.Context(), "SELECT c0, c1, "+far+" FROM tm WHERE id = $1", id).Scan(&c0, &c1, &cfar); err != nil {
			t.Fatal(err)
		}
		m, ok := inf.Lister().Get(fmt.Sprint(id))
		if !ok || m["c2"] != "changed" || m["c0"] != c0 || m["c1"] != c1 || m[far] != cfar {
			t.Errorf("row %d: cached c2=%v, c0, c1, %s equal to the database's: %v %v %v", id, m["c2"], far, m["c0"] == c0, m["c1"] == c1, m[far] == cfar)
		}
	}
	for _, e := range errs.All() {
		t.Errorf("informer error: %v", e)
	}
}
