package pginformer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

var warmSeq atomic.Int64

func seqNo() int64 { return warmSeq.Add(1) }

type vrow struct {
	ID   int64  `db:"id"`
	V    int64  `db:"v"`
	Note string `db:"note"`
}

// runWarm runs one "process": a Source on the permanent slot, a Table and a
// checkpointing informer wrapped in a Spy, until stop (which waits for Run,
// and with it the final checkpoint, then closes the Source).
func runWarm(t *testing.T, pg *harness.Postgres, table, dir string, rec core.ResourceEventHandler[vrow]) (*core.SharedIndexInformer[vrow], *informertest.Spy[vrow], *informertest.Errors, func()) {
	t.Helper()
	src := newSource(t, pg, pginformer.Options{PermanentSlot: true, Slot: "warm_" + table})
	spy := informertest.Wrap[vrow](newTable[vrow](t, src, table))
	store, err := checkpoint.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	errs := &informertest.Errors{}
	inf := core.NewSharedIndexInformer[vrow](spy, core.InformerOptions[vrow]{
		Name:         table,
		ErrorHandler: errs.Add,
		Backoff:      core.Backoff{Initial: 50e6, Max: 1e9},
		Checkpoint:   &core.CheckpointOptions[vrow]{Store: store, Interval: -1},
	})
	if rec != nil {
		if _, err := inf.AddEventHandler(rec); err != nil {
			t.Fatal(err)
		}
	}
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

func vrowCacheMatches(t *testing.T, conn *pgx.Conn, table string, inf *core.SharedIndexInformer[vrow]) {
	t.Helper()
	rows, _ := conn.Query(ctxFor(t), "SELECT id, v, note FROM "+pgx.Identifier{table}.Sanitize())
	want, err := pgx.CollectRows(rows, pgx.RowToStructByName[vrow])
	if err != nil {
		t.Fatal(err)
	}
	if n := inf.Indexer().Len(); n != len(want) {
		t.Fatalf("cache has %d rows, table %d", n, len(want))
	}
	for _, w := range want {
		if got, ok := inf.Lister().Get(fmt.Sprint(w.ID)); !ok || got != w {
			t.Fatalf("key %d: cache %+v (present %v), table %+v", w.ID, got, ok, w)
		}
	}
}

// A restart from a checkpoint over a permanent slot reads no row: the
// informer restores the table's keys, watches from the checkpoint's
// version, and hands handlers the loaded rows as initial adds, then exactly
// the changes made while it was down, under FULL and DEFAULT identity
// alike (a text column does not keep a table from restarting warm). When
// the checkpoint cannot be watched from (the slot was dropped), it
// relists, and handlers get only the real differences.
func TestWarmRestart(t *testing.T) {
	pg := harness.StartPostgres(t)
	for _, c := range []struct {
		name     string
		full     bool
		dropSlot bool
		warm     bool // watched from the checkpoint, no list
	}{
		{"full identity", true, false, true},
		{"slot dropped", true, true, false},
		{"default identity with a text column", false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			table := fmt.Sprintf("warm_%d", seqNo())
			ident := pgx.Identifier{table}.Sanitize()
			pg.Exec(t, "CREATE TABLE "+ident+" (id bigint PRIMARY KEY, v bigint NOT NULL, note text NOT NULL)")
			if c.full {
				pg.Exec(t, "ALTER TABLE "+ident+" REPLICA IDENTITY FULL")
			}
			conn := pg.Conn(t)
			write(t, conn, "INSERT INTO "+ident+" SELECT g, 1, 'n' || g FROM generate_series(1, 50) g")
			dir := t.TempDir()

			rec1 := informertest.NewRecorder[vrow](t, func(r vrow) int64 { return r.V })
			inf1, spy1, _, stop1 := runWarm(t, pg, table, dir, rec1)
			rv := write(t, conn, "UPDATE "+ident+" SET v = 2 WHERE id <= 5")
			waitFor(t, inf1, rv)
			if spy1.Lists() != 1 {
				t.Errorf("first start: %d lists, want 1", spy1.Lists())
			}
			stop1()

			// While no informer runs.
			write(t, conn, "UPDATE "+ident+" SET v = 3, note = 'changed' WHERE id IN (1, 10)")
			write(t, conn, "DELETE FROM "+ident+" WHERE id = 20")
			write(t, conn, "INSERT INTO "+ident+" VALUES (51, 3, 'new')")
			if c.dropSlot {
				if err := pgtest.DropSlot(ctxFor(t), pg.ConnString(), "warm_"+table); err != nil {
					t.Fatal(err)
				}
			}

			rec2 := informertest.NewRecorder[vrow](t, func(r vrow) int64 { return r.V })
			inf2, spy2, errs2, _ := runWarm(t, pg, table, dir, rec2)
			head := currentLSN(t, conn)
			waitFor(t, inf2, head)
			vrowCacheMatches(t, conn, table, inf2)
			if st := inf2.SyncStatus(); st.Checkpoint == 0 {
				t.Errorf("SyncStatus.Checkpoint is 0: the second start did not load the checkpoint (errors: %v)", errs2.All())
			}
			lists := spy2.Lists()
			if c.warm && lists != 0 {
				t.Errorf("warm start listed %d times, want 0 (errors: %v)", lists, errs2.All())
			}
			if !c.warm && lists != 1 {
				t.Errorf("start from an unusable checkpoint listed %d times, want 1 (errors: %v)", lists, errs2.All())
			}
			// 50 loaded rows as initial adds, then only what changed.
			initial := make([]string, 0, 50)
			for id := 1; id <= 50; id++ {
				v := 1
				if id <= 5 {
					v = 2
				}
				initial = append(initial, fmt.Sprintf("add %d v=%d initial", id, v))
			}
			rec2.ExpectSet(initial...)
			if c.warm {
				rec2.Expect("update 1 2->3", "update 10 1->3", "delete 20 v=1", "add 51 v=3")
			} else {
				rec2.ExpectSet("update 1 2->3", "update 10 1->3", "delete 20 v=1 unknown", "add 51 v=3")
			}
			rec2.ExpectNone()
		})
	}
}

// A checkpoint whose header is good and whose body is not: the table's
// restore starts on the header, the load then fails its checksum, the
// error says so, and the informer lists as after a cold start and follows
// the stream from there. The next start, from a good checkpoint and with
// no handler (so objects are decoded when first read), reads no row and
// takes changes into the loaded cache.
func TestWarmRestartCorruptCheckpoint(t *testing.T) {
	pg := harness.StartPostgres(t)
	table := fmt.Sprintf("warm_%d", seqNo())
	ident := pgx.Identifier{table}.Sanitize()
	pg.Exec(t, "CREATE TABLE "+ident+" (id bigint PRIMARY KEY, v bigint NOT NULL, note text NOT NULL); ALTER TABLE "+ident+" REPLICA IDENTITY FULL")
	conn := pg.Conn(t)
	write(t, conn, "INSERT INTO "+ident+" SELECT g, 1, 'n' || g FROM generate_series(1, 2000) g")
	dir := t.TempDir()
	_, _, _, stop1 := runWarm(t, pg, table, dir, nil)
	stop1()
	write(t, conn, "UPDATE "+ident+" SET v = 2 WHERE id <= 100")
	write(t, conn, "DELETE FROM "+ident+" WHERE id > 1990")

	store, err := checkpoint.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := store.Path(table)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	inf2, spy2, errs2, stop2 := runWarm(t, pg, table, dir, nil)
	if spy2.Lists() != 1 {
		t.Errorf("start from a corrupt checkpoint listed %d times, want 1", spy2.Lists())
	}
	var ce *core.CheckpointError
	if all := errs2.All(); len(all) == 0 || !errors.As(all[0], &ce) || !strings.Contains(all[0].Error(), "checksum") {
		t.Errorf("errors %v, want the checkpoint's checksum failure first", all)
	}
	if st := inf2.SyncStatus(); st.Checkpoint != 0 {
		t.Errorf("SyncStatus.Checkpoint = %d after a corrupt checkpoint", st.Checkpoint)
	}
	waitFor(t, inf2, write(t, conn, "UPDATE "+ident+" SET v = 3 WHERE id = 7"))
	vrowCacheMatches(t, conn, table, inf2)
	stop2()

	write(t, conn, "INSERT INTO "+ident+" VALUES (5000, 5, 'while down')")
	inf3, spy3, errs3, _ := runWarm(t, pg, table, dir, nil)
	if spy3.Lists() != 0 || inf3.SyncStatus().Checkpoint == 0 {
		t.Errorf("warm start: %d lists, checkpoint %d (errors: %v)", spy3.Lists(), inf3.SyncStatus().Checkpoint, errs3.All())
	}
	waitFor(t, inf3, currentLSN(t, conn))
	vrowCacheMatches(t, conn, table, inf3)
	waitFor(t, inf3, write(t, conn, "UPDATE "+ident+" SET v = 4 WHERE id <= 10; DELETE FROM "+ident+" WHERE id BETWEEN 11 AND 1000; INSERT INTO "+ident+" VALUES (6000, 6, 'new')"))
	vrowCacheMatches(t, conn, table, inf3)
}

// binTypesRow is typesRow without its jsonb/json maps, which codec.Binary
// refuses (their checkpoints are JSON).
type binTypesRow struct {
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
	By   []byte         `db:"by"`
	AI   []pgtype.Int4  `db:"ai"`
	AT   []pgtype.Text  `db:"at"`
	M    *string        `db:"m"`
	AM   []*string      `db:"am"`
	Nul  *int32         `db:"nul"`
	NulT *string        `db:"nult"`
}

// A table's checkpoint codec is codec.Binary for a struct of plain and
// pgtype fields, JSON for one with a map: rows of every common type, NULLs
// included, come back from a checkpoint's encoding as the same values (the
// same JSON, and the same encoding again, which is what a relist after an
// expired checkpoint compares).
func TestCheckpointCodecRoundTripsEveryType(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, typesDDL)
	conn := pg.Conn(t)
	write(t, conn, "INSERT INTO types VALUES "+fmt.Sprintf(typesValues, 1))
	write(t, conn, "INSERT INTO types (id) VALUES (3)")
	src := newSource(t, pg, pginformer.Options{})
	tbl := newTable[binTypesRow](t, src, "types")
	codec := tbl.Codec()
	type schemaer interface{ Schema() string }
	if _, ok := codec.(interface {
		AppendEncode([]byte, binTypesRow) ([]byte, error)
	}); !ok {
		t.Fatalf("codec %T, want core.Binary's", codec)
	}
	if s, ok := codec.(schemaer); !ok || !strings.Contains(s.Schema(), "pg relation") || !strings.Contains(s.Schema(), `"id"`) {
		t.Errorf("codec %T does not name the table's shape in its Schema", codec)
	}
	if s, ok := newTable[typesRow](t, src, "types").Codec().(schemaer); !ok || !strings.HasPrefix(s.Schema(), "json; pg relation") {
		t.Errorf("codec of a row with maps: want JSON naming the table's shape")
	}
	n := 0
	if _, err := tbl.List(ctxFor(t), driver.ListSink[binTypesRow]{Emit: func(ev driver.Event[binTypesRow]) error {
		if ev.Err != nil {
			t.Errorf("List: %v", ev.Err)
			return nil
		}
		n++
		data, err := codec.Encode(ev.Object)
		if err != nil {
			t.Fatalf("key %s: encode: %v", ev.Key, err)
		}
		back, err := codec.Decode(data)
		if err != nil {
			t.Fatalf("key %s: decode: %v", ev.Key, err)
		}
		again, _ := codec.Encode(back)
		if !bytes.Equal(data, again) {
			t.Errorf("key %s: the decoded row encodes differently", ev.Key)
		}
		j1, _ := json.Marshal(ev.Object)
		j2, _ := json.Marshal(back)
		if !bytes.Equal(j1, j2) {
			t.Errorf("key %s: row\n%s\ncame back as\n%s", ev.Key, j1, j2)
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("listed %d rows, want 2", n)
	}
}

// heldStore holds Load until release is closed.
type heldStore struct {
	checkpoint.Store
	release chan struct{}
}

func (h heldStore) Load(ctx context.Context, name string) (io.ReadCloser, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.Store.Load(ctx, name)
}

// Two checkpointing tables of one Source restart warm even when one of
// them watches before the other has restored: the first watch holds the
// stream back while the other table's informer, already running, has not
// restored yet, so the stream does not pass the second checkpoint (which
// would make that table relist).
func TestWarmRestartTwoTablesOneSource(t *testing.T) {
	pg := harness.StartPostgres(t)
	a, b := fmt.Sprintf("warm_%d", seqNo()), fmt.Sprintf("warm_%d", seqNo())
	conn := pg.Conn(t)
	for _, table := range []string{a, b} {
		ident := pgx.Identifier{table}.Sanitize()
		pg.Exec(t, "CREATE TABLE "+ident+" (id bigint PRIMARY KEY, v bigint NOT NULL, note text NOT NULL); ALTER TABLE "+ident+" REPLICA IDENTITY FULL")
		write(t, conn, "INSERT INTO "+ident+" SELECT g, 1, 'n' || g FROM generate_series(1, 20) g")
	}
	dir := t.TempDir()
	slot := "warm_two_" + a
	start := func(release chan struct{}) (map[string]*core.SharedIndexInformer[vrow], map[string]*informertest.Spy[vrow], func()) {
		src := newSource(t, pg, pginformer.Options{PermanentSlot: true, Slot: slot})
		store, err := checkpoint.NewDirStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		infs, spies := map[string]*core.SharedIndexInformer[vrow]{}, map[string]*informertest.Spy[vrow]{}
		ctx, cancel := context.WithCancel(context.Background())
		var done []chan error
		tables := map[string]*pginformer.Table[vrow]{}
		for _, table := range []string{a, b} { // every table before the first List
			tables[table] = newTable[vrow](t, src, table)
		}
		for _, table := range []string{a, b} {
			spy := informertest.Wrap[vrow](tables[table])
			var cs checkpoint.Store = store
			if table == b && release != nil {
				cs = heldStore{store, release}
			}
			inf := core.NewSharedIndexInformer[vrow](spy, core.InformerOptions[vrow]{
				Name:       table,
				Checkpoint: &core.CheckpointOptions[vrow]{Store: cs, Interval: -1},
			})
			infs[table], spies[table] = inf, spy
			d := make(chan error, 1)
			go func() { d <- inf.Run(ctx) }()
			done = append(done, d)
		}
		stop := func() {
			cancel()
			for _, d := range done {
				if err := <-d; err != nil {
					t.Errorf("Run: %v", err)
				}
			}
			src.Close()
		}
		return infs, spies, stop
	}
	infs, spies, stop := start(nil)
	for _, inf := range infs {
		waitFor(t, inf, currentLSN(t, conn))
	}
	stop()

	// While down: changes to both tables, which a watch from a's
	// checkpoint streams past b's.
	write(t, conn, "UPDATE "+pgx.Identifier{a}.Sanitize()+" SET v = 2 WHERE id <= 5")
	write(t, conn, "UPDATE "+pgx.Identifier{b}.Sanitize()+" SET v = 2 WHERE id <= 5")

	release := make(chan struct{})
	infs, spies, stop = start(release)
	defer stop()
	// a loads its checkpoint and watches; b's informer is running (its
	// table gated) but has not read its checkpoint yet. b is let go once
	// a has applied the change made while down (which, without the hold,
	// takes milliseconds and puts the stream past b's checkpoint) or half
	// a second has passed (with it, a's watch waits for b up to 2 s).
	informertest.Eventually(t, "a serving its checkpoint", func() bool { _, ok := infs[a].ServingCheckpoint(); return ok || infs[a].HasSynced() })
	for range 50 {
		if r, ok := infs[a].Lister().Get("1"); ok && r.V == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	head := currentLSN(t, conn)
	for _, table := range []string{a, b} {
		waitFor(t, infs[table], head)
		vrowCacheMatches(t, conn, table, infs[table])
		if n := spies[table].Lists(); n != 0 {
			t.Errorf("%s listed %d times on a warm start, want 0", table, n)
		}
	}
}
