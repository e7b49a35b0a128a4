package bench_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pgx/v5/pgtype"
)

// warmRow is the warm restart's row: text and numeric columns, as most
// tables have, under the default REPLICA IDENTITY (the key only in the
// WAL's old rows, unchanged TOASTed values left out of updates).
type warmRow struct {
	ID     int64          `db:"id"`
	Org    string         `db:"org"`
	Team   string         `db:"team"`
	N      int32          `db:"n"`
	Amount pgtype.Numeric `db:"amount"`
	Note   string         `db:"note"`
}

const warmRowCols = "id bigint PRIMARY KEY, org text NOT NULL, team text NOT NULL, n int NOT NULL, amount numeric(12,2) NOT NULL, note text NOT NULL"

// warmRowsFrom is a SELECT producing warmRow values for ids lo..hi.
func warmRowsFrom(lo, hi int) string {
	return "SELECT g, 'org-' || (g % 100), 'team-' || (g % 1000), g % 1000000, (g * 1.37)::numeric(12,2), md5(g::text) FROM generate_series(" +
		strconv.Itoa(lo) + ", " + strconv.Itoa(hi) + ") g"
}

// noteCounter counts the notifications a handler gets, initial adds apart.
type noteCounter struct{ initial, other atomic.Int64 }

func (c *noteCounter) OnAdd(_ string, _ warmRow, initial bool) {
	if initial {
		c.initial.Add(1)
	} else {
		c.other.Add(1)
	}
}
func (c *noteCounter) OnUpdate(string, warmRow, warmRow) { c.other.Add(1) }
func (c *noteCounter) OnDelete(string, warmRow, bool)    { c.other.Add(1) }

// warmProcess is one run of a program syncing the table: a Source, a Table
// wrapped in a Spy, an informer (with checkpoints when store is set).
type warmProcess struct {
	src    *pginformer.Source
	spy    *informertest.Spy[warmRow]
	inf    *core.SharedIndexInformer[warmRow]
	cancel context.CancelFunc
	done   chan error
}

func startWarmProcess(b *testing.B, pg *harness.Postgres, slot string, store checkpoint.Store, h core.ResourceEventHandler[warmRow]) *warmProcess {
	return startWarmProcessEvery(b, pg, slot, store, h, -1)
}

// startWarmProcessEvery is startWarmProcess saving checkpoints every
// interval (negative: only when the run ends and when asked).
func startWarmProcessEvery(b *testing.B, pg *harness.Postgres, slot string, store checkpoint.Store, h core.ResourceEventHandler[warmRow], interval time.Duration) *warmProcess {
	b.Helper()
	p, err := openWarmProcess(pg.ConnString(), slot, store, h, interval, b.Logf)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// openWarmProcess starts a warmProcess on the database at conn, the
// informer's errors reported to logf; a child process (which has no
// testing.B) uses it directly.
func openWarmProcess(conn, slot string, store checkpoint.Store, h core.ResourceEventHandler[warmRow], interval time.Duration, logf func(string, ...any)) (*warmProcess, error) {
	ctx := context.Background()
	opts := pginformer.Options{}
	if slot != "" {
		opts.PermanentSlot, opts.Slot = true, slot
	}
	src, err := pginformer.NewSource(ctx, conn, opts)
	if err != nil {
		return nil, err
	}
	tbl, err := pginformer.NewTable[warmRow](ctx, src, "warm_rows", pginformer.TableOptions[warmRow]{})
	if err != nil {
		src.Close()
		return nil, err
	}
	p := &warmProcess{src: src, spy: informertest.Wrap[warmRow](tbl), done: make(chan error, 1)}
	io := core.InformerOptions[warmRow]{Name: "warm_rows", ErrorHandler: func(err error) { logf("informer: %v", err) }}
	if store != nil {
		io.Checkpoint = &core.CheckpointOptions[warmRow]{Store: store, Interval: interval}
	}
	p.inf = core.NewSharedIndexInformer[warmRow](p.spy, io)
	if h != nil {
		if _, err := p.inf.AddEventHandler(h); err != nil {
			src.Close()
			return nil, err
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	go func() { p.done <- p.inf.Run(rctx) }()
	return p, nil
}

func (p *warmProcess) waitSynced(b *testing.B) {
	b.Helper()
	if err := p.synced(); err != nil {
		b.Fatal(err)
	}
}

// synced waits (10 minutes at most) until the informer synced.
func (p *warmProcess) synced() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return p.inf.WaitForCacheSync(ctx)
}

// stop ends the informer (saving its final checkpoint) and the Source.
func (p *warmProcess) stop(b *testing.B) {
	b.Helper()
	if err := p.close(); err != nil {
		b.Fatal(err)
	}
}

// close is stop returning the informer's error; the Source is closed
// either way.
func (p *warmProcess) close() error {
	p.cancel()
	err := <-p.done
	p.src.Close()
	return err
}

// profileWarm (DBINFORMER_WARM_PROFILE=dir) writes a CPU profile and an
// execution trace of each warm run into dir (warm-N.cpu, warm-N.trace),
// for looking at the warm side alone: a whole-benchmark profile is
// mostly the cold side's list and the table's creation. It returns the
// function that ends them.
func profileWarm(b *testing.B) (stop func()) {
	dir := os.Getenv("DBINFORMER_WARM_PROFILE")
	if dir == "" {
		return func() {}
	}
	warmProfiles++
	name := filepath.Join(dir, "warm-"+strconv.Itoa(warmProfiles))
	cpu, err := os.Create(name + ".cpu")
	if err != nil {
		b.Fatal(err)
	}
	tr, err := os.Create(name + ".trace")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		b.Fatal(err)
	}
	if err := trace.Start(tr); err != nil {
		b.Fatal(err)
	}
	return func() {
		trace.Stop()
		pprof.StopCPUProfile()
		for _, f := range []*os.File{cpu, tr} {
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

var warmProfiles int

// rowsRead is how many rows Postgres read from warm_rows so far, by
// sequential and index scans. Statistics are flushed when a backend ends
// (every Source connection has ended when it is read) and otherwise at
// most once a second; the delta is reported, not asserted.
func rowsRead(b *testing.B, pg *harness.Postgres) int64 {
	b.Helper()
	conn := pg.Conn(b)
	defer conn.Close(context.Background())
	var n int64
	if err := conn.QueryRow(context.Background(), "SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables WHERE relname = 'warm_rows'").Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkWarmStart restarts an informer over a 1,000,000-row Postgres
// table with text and numeric columns under REPLICA IDENTITY DEFAULT
// (warmRow) in the same process, side by side, alternating, 3 rounds,
// medians:
//   - cold: a fresh Source and informer with no checkpoint list the table
//     (time from start to synced, cold-s);
//   - warm: a Source on the permanent slot and an informer loading the
//     last checkpoint (warm-s); warm-lists counts its Lists (must be 0)
//     and warm-rows-read the rows Postgres read for it
//     (pg_stat_user_tables seq_tup_read + idx_tup_fetch; target 0). With
//     no index function, the informer decodes the loaded objects when
//     first read (handlers, had it any, would decode their own initial
//     adds): warm-first-list-s is the first Lister().List(nil) after
//     synced, which decodes all of them;
//   - warmhandler: the warm start with a handler (warmhandler-s), which
//     gets the loaded rows as initial adds after synced, as after a list.
//
// Then the checkpoint is written once more, timed (checkpoint-write-s per
// million objects, checkpoint-MB per million), and an expiry: 1% of the
// rows change while no informer runs and the slot is dropped; the warm
// start relists, and expired-notified-pct is the notifications besides
// the initial adds, in percent of the rows (target ≈1, not 100).
func BenchmarkWarmStart(b *testing.B) {
	pg := harness.StartPostgres(b)
	rows := size(1_000_000, 10_000)
	// DBINFORMER_WARM_ROWS sets another size, for profiling (100000).
	if v, _ := strconv.Atoi(os.Getenv("DBINFORMER_WARM_ROWS")); v > 0 {
		rows = v
	}
	pg.Exec(b, "CREATE TABLE warm_rows ("+warmRowCols+"); INSERT INTO warm_rows "+warmRowsFrom(1, rows))
	pg.Exec(b, "VACUUM ANALYZE warm_rows")
	dir := b.TempDir()
	store, err := checkpoint.NewDirStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	const slot = "bench_warm"
	// The first start of the checkpointing program is cold: it lists and
	// saves the checkpoint the warm starts load.
	first := startWarmProcess(b, pg, slot, store, nil)
	first.waitSynced(b)
	first.stop(b)

	var warmLists, warmRead int64
	rounds := size(3, 1)
	var proc *warmProcess
	cold := side{name: "cold", n: rows, unit: "row",
		run: func() {
			proc = startWarmProcess(b, pg, "", nil, nil)
			proc.waitSynced(b)
		},
		finish: func() {
			if n := proc.inf.Indexer().Len(); n != rows {
				b.Fatalf("cold start cached %d rows, want %d", n, rows)
			}
			proc.stop(b)
			proc = nil
		}}
	var before int64
	var firstList []float64
	warm := side{name: "warm", n: rows, unit: "row",
		prepare: func() { before = rowsRead(b, pg) },
		run: func() {
			defer profileWarm(b)()
			proc = startWarmProcess(b, pg, slot, store, nil)
			proc.waitSynced(b)
		},
		finish: func() {
			if n := proc.inf.Indexer().Len(); n != rows {
				b.Fatalf("warm start cached %d rows, want %d", n, rows)
			}
			if st := proc.inf.SyncStatus(); st.Checkpoint == 0 {
				b.Fatalf("the warm start did not load the checkpoint")
			}
			// The loaded objects are decoded when first read: the first
			// List pays for all of them.
			t0 := time.Now()
			if n := len(proc.inf.Lister().List(nil)); n != rows {
				b.Fatalf("warm start listed %d rows, want %d", n, rows)
			}
			firstList = append(firstList, time.Since(t0).Seconds())
			warmLists += int64(proc.spy.Lists())
			proc.stop(b)
			proc = nil
			warmRead += rowsRead(b, pg) - before
		}}
	// The same warm start with a handler, which gets every loaded row as
	// an initial add (after synced, in its own goroutine, as after a list).
	var handled *noteCounter
	warmHandler := side{name: "warmhandler", n: rows, unit: "row",
		run: func() {
			handled = &noteCounter{}
			proc = startWarmProcess(b, pg, slot, store, handled)
			proc.waitSynced(b)
		},
		finish: func() {
			if st := proc.inf.SyncStatus(); st.Checkpoint == 0 {
				b.Fatalf("the warm start with a handler did not load the checkpoint")
			}
			informertest.Eventually(b, "the initial adds delivered", func() bool { return handled.initial.Load() == int64(rows) })
			proc.stop(b)
			proc = nil
		}}
	alternate(b, rounds, cold, warm, warmHandler)
	b.ReportMetric(medianOf(firstList), "warm-first-list-s")
	b.ReportMetric(float64(warmLists), "warm-lists")
	b.ReportMetric(float64(warmRead)/float64(rounds*b.N), "warm-rows-read")
	if warmLists != 0 {
		b.Errorf("warm starts listed %d times, want 0", warmLists)
	}

	// Checkpoint write time and size.
	proc = startWarmProcess(b, pg, slot, store, nil)
	proc.waitSynced(b)
	pg.Exec(b, "UPDATE warm_rows SET n = n + 1 WHERE id = 1") // so that the version moves
	informertest.Eventually(b, "the update applied", func() bool { r, _ := proc.inf.Lister().Get("1"); return r.N != 1 })
	t0 := time.Now()
	if err := proc.inf.Checkpoint(context.Background()); err != nil {
		b.Fatal(err)
	}
	write := time.Since(t0)
	fi, err := os.Stat(filepath.Join(dir, "warm_rows.ckpt"))
	if err != nil {
		b.Fatal(err)
	}
	perM := 1e6 / float64(rows)
	b.ReportMetric(write.Seconds()*perM, "checkpoint-write-s-per-M")
	b.ReportMetric(float64(fi.Size())/1e6*perM, "checkpoint-MB-per-M")
	proc.stop(b)

	// Expiry with 1% of the rows changed.
	pg.Exec(b, "UPDATE warm_rows SET n = n + 1 WHERE id % 100 = 0")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pgtest.DropSlot(ctx, pg.ConnString(), slot); err != nil {
		b.Fatal(err)
	}
	counter := &noteCounter{}
	proc = startWarmProcess(b, pg, slot, store, counter)
	proc.waitSynced(b)
	// The changed rows reach the handler after the loaded ones; what
	// arrived by the time the run ended is counted (a relist that updated
	// every key would have delivered far more than 1% by then).
	changed := int64(rows / 100)
	informertest.Eventually(b, "the changed rows notified", func() bool {
		return counter.initial.Load() >= int64(rows) && counter.other.Load() >= changed
	})
	if n := proc.spy.Lists(); n != 1 {
		b.Errorf("start from an expired checkpoint listed %d times, want 1", n)
	}
	proc.stop(b)
	b.ReportMetric(float64(counter.other.Load())*100/float64(rows), "expired-notified-pct")
}
