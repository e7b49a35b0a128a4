package bench_test

import (
	"context"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/bench/internal/userprog"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// scaleRow is a row of the Postgres-at-scale table: an int key, a short
// text, an int, a numeric, a timestamptz, a small jsonb document and a body
// that is 32 characters on most rows and 3.2 kB, stored out of line
// (STORAGE EXTERNAL: TOAST), on one row in 50. It is the user programs'
// row type (BenchmarkUserProgram reads the same table).
type scaleRow = userprog.Account

const scaleCols = "id bigint PRIMARY KEY, org text NOT NULL, n int NOT NULL, amount numeric NOT NULL, at timestamptz NOT NULL, attrs jsonb NOT NULL, body text NOT NULL"

const scaleSelect = "id, org, n, amount, at, attrs, body"

// scaleRowsFrom is a SELECT producing scaleRow values for ids lo..hi.
func scaleRowsFrom(lo, hi int) string {
	return "SELECT g, 'org-' || (g % 100), g % 1000000, (g % 100000) * 1.25, timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', " +
		"jsonb_build_object('team', g % 1000, 'tag', left(md5(g::text), 8)), " +
		"CASE WHEN g % 50 = 0 THEN repeat(md5(g::text), 100) ELSE md5(g::text) END FROM generate_series(" +
		strconv.Itoa(lo) + ", " + strconv.Itoa(hi) + ") g"
}

func createScaleTable(b *testing.B, pg *harness.Postgres, name string, rows int) {
	b.Helper()
	pg.Exec(b, "CREATE TABLE "+name+" ("+scaleCols+"); ALTER TABLE "+name+" ALTER COLUMN body SET STORAGE EXTERNAL")
	for lo := 1; lo <= rows; lo += 250_000 {
		pg.Exec(b, "INSERT INTO "+name+" "+scaleRowsFrom(lo, min(lo+250_000-1, rows)))
	}
	pg.Exec(b, "VACUUM ANALYZE "+name)
}

// rssMB is the process's resident set after returning freed memory to the
// OS (Linux; 0 elsewhere).
func rssMB() float64 {
	debug.FreeOSMemory()
	return float64(procStatusKB("VmRSS:")) / 1024
}

// scaleSync is an informer's initial sync of the scale table on a fresh
// Source, as a side's steps.
type scaleSync struct {
	b      *testing.B
	pg     *harness.Postgres
	rows   int
	src    *pginformer.Source
	inf    *core.SharedIndexInformer[scaleRow]
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *scaleSync) prepare() {
	var tbl *pginformer.Table[scaleRow]
	s.src, tbl = newPGTable[scaleRow](s.b, s.pg, "scale_rows")
	s.inf = core.NewSharedIndexInformer[scaleRow](tbl, core.InformerOptions[scaleRow]{})
}

// run starts the informer and returns when it has synced.
func (s *scaleSync) run() {
	var ctx context.Context
	ctx, s.cancel = context.WithCancel(context.Background())
	s.done = make(chan struct{})
	go func() { s.inf.Run(ctx); close(s.done) }()
	if err := s.inf.WaitForCacheSync(ctx); err != nil {
		s.b.Fatal(err)
	}
}

// stop checks that the cache holds every row, stops the informer and
// closes the Source.
func (s *scaleSync) stop() {
	if n := s.inf.Lister().Len(); n != s.rows {
		s.b.Fatalf("informer holds %d rows, want %d", n, s.rows)
	}
	s.cancel()
	<-s.done
	s.src.Close()
	s.src, s.inf = nil, nil
}

// BenchmarkPostgresScale is issue 20's Postgres at scale, on one server
// (the machine is shared: only the ratios of one run are claims):
//   - InitialSync: our List of 1,000,000 scaleRows (fresh Source: slot,
//     exported snapshot, rows decoded into structs; default
//     SnapshotReaders), and an informer's initial sync of them (fresh
//     Source, until synced), against COPY (SELECT the same columns) TO
//     STDOUT read through pgx and thrown away, in text and in binary
//     format; alternating, 3 rounds, medians.
//   - Heap: an informer's initial sync of the same rows (fresh Source)
//     against a plain pgx query of the same rows scanned into
//     map[key]scaleRow: the peak heap above the start during each, the
//     steady heap each holds after it (the informer's cache and the
//     Source's state, or the map), and the process's RSS then; the same
//     GC settings, alternating, 3 rounds, medians.
//   - ThreeTables: informers of three tables (1M, 500k, 250k rows) on one
//     fresh Source until all three synced, against the largest one alone
//     on a fresh Source; and the floor of that comparison: raw binary COPY
//     of the same tables, split into the same block ranges, through as
//     many connections as the Source's default snapshot readers, with no
//     informer at all, three tables against the largest; and the largest
//     table alone through one snapshot reader, the way a Source read
//     each table when issue 20 was written. Each side also
//     reports the share of the machine's CPU that was busy during it
//     (/proc/stat: every process, Postgres's backends included): when the
//     largest table alone already keeps the machine busy, three tables
//     take the time of their total work, whoever reads them.
func BenchmarkPostgresScale(b *testing.B) {
	pg := harness.StartPostgres(b)
	rows := size(1_000_000, 10_000)
	createScaleTable(b, pg, "scale_rows", rows)
	ctx := context.Background()
	rounds := size(3, 1)

	b.Run("InitialSync", func(b *testing.B) {
		conn := pg.Conn(b)
		copyAll := func(format string) func() {
			return func() {
				res, err := conn.PgConn().CopyTo(ctx, io.Discard, "COPY (SELECT "+scaleSelect+" FROM scale_rows) TO STDOUT"+format)
				if err != nil {
					b.Fatal(err)
				}
				if res.RowsAffected() != int64(rows) {
					b.Fatalf("copied %d rows, want %d", res.RowsAffected(), rows)
				}
			}
		}
		copyAll("")() // warm the buffer cache for every side
		var (
			src    *pginformer.Source
			tbl    *pginformer.Table[scaleRow]
			listed int
		)
		ours := side{name: "ours", n: rows, unit: "row",
			prepare: func() { src, tbl = newPGTable[scaleRow](b, pg, "scale_rows") },
			run: func() {
				listed = 0
				if _, err := tbl.List(ctx, driver.ListSink[scaleRow]{Emit: func(ev driver.Event[scaleRow]) error {
					if ev.Err != nil {
						return ev.Err
					}
					listed++
					return nil
				}}); err != nil {
					b.Fatal(err)
				}
			},
			finish: func() {
				src.Close()
				src, tbl = nil, nil
				if listed != rows {
					b.Fatalf("listed %d rows, want %d", listed, rows)
				}
			}}
		sync := &scaleSync{b: b, pg: pg, rows: rows}
		informer := side{name: "informer", n: rows, unit: "row", prepare: sync.prepare, run: sync.run,
			finish: func() { sync.stop(); runtime.GC() }}
		alternate(b, rounds, ours, informer,
			side{name: "copytext", n: rows, unit: "row", run: copyAll("")},
			side{name: "copybinary", n: rows, unit: "row", run: copyAll(" (FORMAT binary)")})
	})

	b.Run("Heap", func(b *testing.B) {
		var (
			m    map[string]scaleRow
			base uint64
		)
		var oursSteady, mapSteady, oursRSS, mapRSS []float64
		sync := &scaleSync{b: b, pg: pg, rows: rows}
		ours := side{name: "ours", peak: true,
			prepare: func() {
				base = liveHeap()
				sync.prepare()
			},
			run: sync.run,
			finish: func() {
				oursSteady = append(oursSteady, float64(liveHeap()-base)/(1<<20))
				oursRSS = append(oursRSS, rssMB())
				sync.stop()
			}}
		plain := side{name: "map", peak: true,
			prepare: func() { base = liveHeap() },
			run: func() {
				conn, err := pgx.Connect(ctx, pg.ConnString())
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close(ctx)
				m = map[string]scaleRow{}
				q, _ := conn.Query(ctx, "SELECT "+scaleSelect+" FROM scale_rows")
				for q.Next() {
					var r scaleRow
					if err := q.Scan(&r.ID, &r.Org, &r.N, &r.Amount, &r.At, &r.Attrs, &r.Body); err != nil {
						b.Fatal(err)
					}
					m[strconv.FormatInt(r.ID, 10)] = r
				}
				if err := q.Err(); err != nil {
					b.Fatal(err)
				}
			},
			finish: func() {
				if len(m) != rows {
					b.Fatalf("map holds %d rows, want %d", len(m), rows)
				}
				mapSteady = append(mapSteady, float64(liveHeap()-base)/(1<<20))
				mapRSS = append(mapRSS, rssMB())
				m = nil
			}}
		alternate(b, rounds, ours, plain)
		b.ReportMetric(medianOf(oursSteady), "ours-steady-heap-MB")
		b.ReportMetric(medianOf(mapSteady), "map-steady-heap-MB")
		b.ReportMetric(medianOf(oursRSS), "ours-rss-MB")
		b.ReportMetric(medianOf(mapRSS), "map-rss-MB")
	})

	threeReady := false // -count runs this sub-benchmark again on the same server
	b.Run("ThreeTables", func(b *testing.B) {
		if !threeReady {
			createScaleTable(b, pg, "scale_b", rows/2)
			createScaleTable(b, pg, "scale_c", rows/4)
			threeReady = true
		}
		var (
			src  *pginformer.Source
			infs []*core.SharedIndexInformer[scaleRow]
			stop []func()
		)
		// setup prepares a fresh Source of tables with readers snapshot
		// readers (0: the default).
		setup := func(readers int, tables ...string) func() {
			return func() {
				var err error
				if src, err = pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{SnapshotReaders: readers}); err != nil {
					b.Fatal(err)
				}
				infs = nil
				for _, name := range tables {
					tbl, err := pginformer.NewTable[scaleRow](ctx, src, name, pginformer.TableOptions[scaleRow]{})
					if err != nil {
						b.Fatal(err)
					}
					infs = append(infs, core.NewSharedIndexInformer[scaleRow](tbl, core.InformerOptions[scaleRow]{}))
				}
			}
		}
		run := func() {
			stop = nil
			for _, inf := range infs {
				ictx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { inf.Run(ictx); close(done) }()
				stop = append(stop, func() { cancel(); <-done })
			}
			for _, inf := range infs {
				if err := inf.WaitForCacheSync(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		finish := func() {
			for _, s := range stop {
				s()
			}
			src.Close()
			src, infs = nil, nil
			runtime.GC()
		}
		// The floor: the same tables read by raw COPY through as many
		// connections as the Source's default snapshot readers, split into
		// block ranges as a List splits them, no informer at all.
		readers := min(4, runtime.GOMAXPROCS(0))
		floor := func(tables ...string) func() {
			return func() {
				if n := copyRanges(b, pg, readers, tables...); n != rowsOf(rows, tables...) {
					b.Fatalf("raw COPY read %d rows of %v, want %d", n, tables, rowsOf(rows, tables...))
				}
			}
		}
		cpu, busy := cpuSides{}, machineBusy{}
		three, largest := []string{"scale_rows", "scale_b", "scale_c"}, []string{"scale_rows"}
		secs := alternate(b, rounds,
			side{name: "three", prepare: setup(0, three...), run: busy.wrap("three", cpu.wrap(b, "three", run)), finish: finish},
			side{name: "largest", prepare: setup(0, largest...), run: busy.wrap("largest", cpu.wrap(b, "largest", run)), finish: finish},
			side{name: "largestone", prepare: setup(1, largest...), run: busy.wrap("largestone", run), finish: finish},
			side{name: "copythree", run: busy.wrap("copythree", floor(three...))},
			side{name: "copylargest", run: busy.wrap("copylargest", floor(largest...))})
		// What three tables cost beyond the largest, over what they cost
		// raw COPY beyond its largest: the floor two cores set (#40).
		b.ReportMetric(secs["three"]/secs["largest"]/(secs["copythree"]/secs["copylargest"]), "three-vs-floor")
		cpu.report(b)
		busy.report(b)
	})
}

// rowsOf is the row count of the scale tables named (scale_rows holds
// rows, scale_b half, scale_c a quarter).
func rowsOf(rows int, tables ...string) int {
	n := 0
	for _, t := range tables {
		switch t {
		case "scale_b":
			n += rows / 2
		case "scale_c":
			n += rows / 4
		default:
			n += rows
		}
	}
	return n
}

// copyRanges reads every row of tables with binary COPY through conns
// connections that take ranges of 1024 blocks (up to 4 per connection per
// table, as a List splits a table) from one queue, and returns the rows
// read.
func copyRanges(b *testing.B, pg *harness.Postgres, conns int, tables ...string) int {
	c0, err := pgx.Connect(context.Background(), pg.ConnString())
	if err != nil {
		b.Fatal(err)
	}
	var queries []string
	for _, t := range tables {
		queries = append(queries, rangeQueries(b, c0, conns, t, scaleSelect, "")...)
	}
	return copyQueries(b, pg, c0, conns, "", queries)
}

// rangeQueries splits a read of cols of table (rows matching where, if
// given) into block ranges, as a List splits it for conns snapshot
// readers; c reads the table's size.
func rangeQueries(b *testing.B, c *pgx.Conn, conns int, table, cols, where string) []string {
	var blocks int64
	if err := c.QueryRow(context.Background(), "SELECT pg_relation_size($1::regclass) / current_setting('block_size')::int", table).Scan(&blocks); err != nil {
		b.Fatal(err)
	}
	n := max(1, min(blocks/1024, int64(4*conns)))
	step := (blocks + n - 1) / n
	var queries []string
	for i := range n {
		q := "SELECT " + cols + " FROM " + table + " WHERE ctid >= '(" + strconv.FormatInt(i*step, 10) + ",0)'::tid"
		if i < n-1 {
			q += " AND ctid < '(" + strconv.FormatInt((i+1)*step, 10) + ",0)'::tid"
		}
		if where != "" {
			q += " AND " + where
		}
		queries = append(queries, q)
	}
	return queries
}

// copyQueries runs each query as a binary COPY to nowhere through conns
// connections (first and more of pg's), in the exported snapshot if one is
// named, and returns the rows read.
func copyQueries(b *testing.B, pg *harness.Postgres, first *pgx.Conn, conns int, snapshot string, queries []string) int {
	ctx := context.Background()
	work := make(chan string, len(queries))
	for _, q := range queries {
		work <- q
	}
	close(work)
	var total atomic.Int64
	var wg sync.WaitGroup
	for i := range conns {
		conn := first
		if i > 0 {
			var err error
			if conn, err = pgx.Connect(ctx, pg.ConnString()); err != nil {
				b.Fatal(err)
			}
		}
		if snapshot != "" {
			if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '"+snapshot+"'"); err != nil {
				b.Fatal(err)
			}
		}
		wg.Go(func() {
			defer conn.Close(ctx)
			for q := range work {
				res, err := conn.PgConn().CopyTo(ctx, io.Discard, "COPY ("+q+") TO STDOUT (FORMAT binary)")
				if err != nil {
					b.Error(err)
					return
				}
				total.Add(res.RowsAffected())
			}
		})
	}
	wg.Wait()
	return int(total.Load())
}

// machineBusy records the share of the machine's CPU time (every core,
// every process: Postgres's backends as well as ours) that was busy
// during each run of the sides it wraps, from /proc/stat, and reports the
// median per side as "<side>-machine-busy-pct".
type machineBusy map[string][]float64

func (m machineBusy) wrap(name string, run func()) func() {
	return func() {
		busy0, all0 := cpuTicks()
		run()
		busy1, all1 := cpuTicks()
		if all1 > all0 {
			m[name] = append(m[name], 100*float64(busy1-busy0)/float64(all1-all0))
		}
	}
}

func (m machineBusy) report(b *testing.B) {
	for name, xs := range m {
		b.ReportMetric(medianOf(xs), name+"-machine-busy-pct")
	}
}

// cpuTicks is the machine's busy and total CPU time so far (the "cpu"
// line of /proc/stat: busy is all but idle and iowait); 0, 0 elsewhere.
func cpuTicks() (busy, all uint64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		all += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, all
}

// BenchmarkPostgresSyncWAL measures the WAL a new slot retains by the end
// of an informer's initial sync of the 1M-row scale table while a writer
// inserts 2,000 rows/s (200-byte rows, another table) all along: the slot
// holds WAL from its consistent point until the stream starts and confirms.
// Retained WAL is pg_current_wal_lsn() - the slot's restart_lsn when
// WaitForCacheSync returns. One snapshot reader against the default
// (Options.SnapshotReaders), alternating, 3 rounds, medians.
func BenchmarkPostgresSyncWAL(b *testing.B) {
	pg := harness.StartPostgres(b)
	rows := size(1_000_000, 10_000)
	createScaleTable(b, pg, "scale_rows", rows)
	pg.Exec(b, "CREATE TABLE wal_load (id bigserial PRIMARY KEY, v text NOT NULL)")
	ctx := context.Background()
	conn := pg.Conn(b)
	var retained [2][]float64
	side := func(i, readers int) func() {
		return func() {
			src, err := pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{SnapshotReaders: readers})
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			tbl, err := pginformer.NewTable[scaleRow](ctx, src, "scale_rows", pginformer.TableOptions[scaleRow]{})
			if err != nil {
				b.Fatal(err)
			}
			// The writer: 20 rows every 10ms.
			wctx, stopWriter := context.WithCancel(ctx)
			wconn := pg.Conn(b)
			writerDone := make(chan struct{})
			go func() {
				defer close(writerDone)
				t := time.NewTicker(10 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-wctx.Done():
						return
					case <-t.C:
					}
					if _, err := wconn.Exec(wctx, "INSERT INTO wal_load (v) SELECT repeat('w', 200) FROM generate_series(1, 20)"); err != nil && wctx.Err() == nil {
						b.Error(err)
						return
					}
				}
			}()
			inf := core.NewSharedIndexInformer[scaleRow](tbl, core.InformerOptions[scaleRow]{})
			ictx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { inf.Run(ictx); close(done) }()
			if err := inf.WaitForCacheSync(ictx); err != nil {
				b.Fatal(err)
			}
			var bytes float64
			if err := conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) FROM pg_replication_slots WHERE slot_name = $1", src.SlotName()).Scan(&bytes); err != nil {
				b.Fatal(err)
			}
			retained[i] = append(retained[i], bytes/(1<<20))
			stopWriter()
			<-writerDone
			cancel()
			<-done
		}
	}
	alternate(b, size(3, 1),
		sideOf("one", side(0, 1)),
		sideOf("parallel", side(1, 0)))
	for i, name := range []string{"one", "parallel"} {
		b.ReportMetric(medianOf(retained[i]), name+"-retained-WAL-MB")
	}
}

func sideOf(name string, run func()) side { return side{name: name, run: run} }
