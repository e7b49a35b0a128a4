package bench_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// narrowRow maps three of wide_rows' five columns: the key and two small
// ones. The application does not map body (200 bytes of text) nor attrs
// (a jsonb document of about 110 bytes of text).
type narrowRow struct {
	ID  int64  `db:"id"`
	Org string `db:"org"`
	N   int32  `db:"n"`
}

// wideRowsFrom is a SELECT producing wide_rows' rows for ids lo..hi.
func wideRowsFrom(lo, hi int) string {
	return "SELECT g, 'org-' || (g % 100), 0, left(repeat(md5(g::text), 7), 200), " +
		"jsonb_build_object('team', g % 1000, 'tag', left(md5(g::text), 8), 'labels', jsonb_build_array('a-' || g % 7, 'b-' || g % 11, 'c-' || g % 13), 'note', md5((g + 1)::text)) " +
		"FROM generate_series(" + strconv.Itoa(lo) + ", " + strconv.Itoa(hi) + ") g"
}

// BenchmarkPostgresColumns (#36) is what publishing every column (the
// default since #36) costs against Options.PublishColumnList, on a table
// of 1,000,000 rows (20,000 under -short) where T (narrowRow) maps the
// key and two small columns and the table also holds a 200-byte text and
// a jsonb document of about 110 bytes that T does not map; none of them
// is TOASTed (pgoutput sends an unchanged TOASTed value as "unchanged",
// without its bytes, column list or not). Each round runs both sides
// ("all": the default; "collist": PublishColumnList), alternating, 3
// rounds (1 under -short), medians; each side on a fresh Source over the
// same table, VACUUMed (autovacuum off) before it:
//   - sync: a fresh informer until synced. The List reads only the
//     columns T maps either way (its COPY selects them), so the two
//     should not differ: the row says whether they do.
//   - stream: one writer updates n on updates rows (200,000; 5,000
//     under -short) in 1,000-row transactions, unpaced, while the
//     informer follows; timed from the first write until WaitFor reached
//     the last write's LSN and the handler saw every update: applied
//     changes/s. The writer competes for the machine's CPU with the
//     walsender and the informer, as an application's writes do.
//   - drain: the follower's walsender is held (SIGSTOP) while the writer
//     updates as many other rows, then let go; timed until WaitFor and
//     the handler saw every update: the rate at which the walsender and
//     the informer get through a backlog with no writer competing. Over
//     the drain: the walsender's CPU, this process's CPU, and the bytes
//     this process read from its sockets (/proc/self/io rchar: the
//     replication stream, and the few bytes of the WaitFor queries),
//     per change.
func BenchmarkPostgresColumns(b *testing.B) {
	pg := harness.StartPostgres(b)
	rows := size(1_000_000, 20_000)
	updates := size(200_000, 5_000)
	pg.Exec(b, "CREATE TABLE wide_rows (id bigint PRIMARY KEY, org text NOT NULL, n int NOT NULL, body text NOT NULL, attrs jsonb NOT NULL) WITH (autovacuum_enabled = false)")
	for lo := 1; lo <= rows; lo += 250_000 {
		pg.Exec(b, "INSERT INTO wide_rows "+wideRowsFrom(lo, min(lo+250_000-1, rows)))
	}
	pg.Exec(b, "VACUUM ANALYZE wide_rows")
	ctx := context.Background()
	writer := pg.Conn(b)
	probe := pg.Conn(b)

	type sample struct{ sync, stream, drain, walCPU, ownCPU, readB float64 }
	got := map[string][]sample{}
	run := func(name string, opts pginformer.Options, wantCols int) {
		pg.Exec(b, "VACUUM wide_rows")
		src, err := pginformer.NewSource(ctx, pg.ConnString(), opts)
		if err != nil {
			b.Fatal(err)
		}
		defer src.Close()
		tbl, err := pginformer.NewTable[narrowRow](ctx, src, "wide_rows", pginformer.TableOptions[narrowRow]{})
		if err != nil {
			b.Fatal(err)
		}
		inf := core.NewSharedIndexInformer[narrowRow](tbl, core.InformerOptions[narrowRow]{Name: "wide_rows"})
		var seen atomic.Int64
		if _, err := inf.AddEventHandler(core.ResourceEventHandlerFuncs[narrowRow]{
			UpdateFunc: func(string, narrowRow, narrowRow) { seen.Add(1) },
		}); err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		var s sample
		t0 := time.Now()
		go func() { _ = inf.Run(rctx); close(done) }()
		defer func() { cancel(); <-done }()
		if err := inf.WaitForCacheSync(ctx); err != nil {
			b.Fatal(err)
		}
		s.sync = time.Since(t0).Seconds()
		if n := inf.Lister().Len(); n != rows {
			b.Fatalf("%s: informer holds %d rows, want %d", name, n, rows)
		}
		// What the publication sends of the table: every column, or the
		// three T maps.
		var cols []string
		if err := probe.QueryRow(ctx, "SELECT attnames::text[] FROM pg_publication_tables WHERE pubname = $1 AND tablename = 'wide_rows'", src.PublicationName()).Scan(&cols); err != nil {
			b.Fatal(err)
		}
		if len(cols) != wantCols {
			b.Fatalf("%s: the publication sends columns %v of wide_rows, want %d of them", name, cols, wantCols)
		}

		// update sets n on ids lo..lo+updates-1 in 1,000-row transactions
		// and returns the LSN after the last.
		update := func(lo int) core.ResourceVersion {
			for from := lo; from < lo+updates; from += 1000 {
				to := min(from+1000, lo+updates) - 1
				if _, err := writer.Exec(ctx, "UPDATE wide_rows SET n = n + 1 WHERE id BETWEEN "+strconv.Itoa(from)+" AND "+strconv.Itoa(to)); err != nil {
					b.Fatal(err)
				}
			}
			var lsn pglogrepl.LSN
			if err := writer.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn); err != nil {
				b.Fatal(err)
			}
			return core.ResourceVersion(lsn)
		}
		// applied waits until the informer applied rv and the handler saw
		// want updates in all.
		applied := func(rv core.ResourceVersion, want int64) {
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
			defer wcancel()
			if err := inf.WaitFor(wctx, rv); err != nil {
				b.Fatal(err)
			}
			awaitApplied(b, &seen, want, time.Now())
			if n := seen.Load(); n != want {
				b.Fatalf("%s: the handler saw %d updates, want %d", name, n, want)
			}
		}

		t0 = time.Now()
		applied(update(1), int64(updates))
		s.stream = float64(updates) / time.Since(t0).Seconds()

		pid := slotWalsender(b, probe, src.SlotName())
		resume := holdWalsender(b, pid)
		defer resume()
		rv := update(1 + updates)
		walCPU, ownCPU, read := procCPU([]int{pid}), selfCPU(), readBytes()
		t0 = time.Now()
		resume()
		applied(rv, 2*int64(updates))
		s.drain = float64(updates) / time.Since(t0).Seconds()
		s.walCPU = procCPU([]int{pid}) - walCPU
		s.ownCPU = selfCPU() - ownCPU
		s.readB = float64(readBytes()-read) / float64(updates)
		if printRounds {
			fmt.Fprintf(os.Stderr, "round %s %s sync %.3f s, %.0f changes/s, drained %.0f changes/s, walsender %.0f ms, process %.0f ms, %.1f B/change\n",
				b.Name(), name, s.sync, s.stream, s.drain, s.walCPU, s.ownCPU, s.readB)
		}
		got[name] = append(got[name], s)
	}
	for range b.N {
		for range size(3, 1) {
			run("all", pginformer.Options{}, 5)
			run("collist", pginformer.Options{PublishColumnList: true}, 3)
		}
	}
	for _, name := range []string{"all", "collist"} {
		ss := got[name]
		med := func(f func(sample) float64) float64 { return median(ss, f) }
		b.ReportMetric(med(func(s sample) float64 { return s.sync }), name+"-sync-s")
		b.ReportMetric(med(func(s sample) float64 { return s.stream }), name+"-changes/s")
		b.ReportMetric(med(func(s sample) float64 { return s.drain }), name+"-drained-changes/s")
		b.ReportMetric(med(func(s sample) float64 { return s.walCPU }), name+"-walsender-cpu-ms")
		b.ReportMetric(med(func(s sample) float64 { return s.ownCPU }), name+"-process-cpu-ms")
		b.ReportMetric(med(func(s sample) float64 { return s.readB }), name+"-read-B/change")
	}
}

// slotWalsender is the pid of the walsender streaming slot, once it
// streams.
func slotWalsender(b *testing.B, conn *pgx.Conn, slot string) int {
	deadline := time.Now().Add(time.Minute)
	for {
		var pid *int32
		err := conn.QueryRow(context.Background(), "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&pid)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			b.Fatal(err)
		}
		if pid != nil {
			return int(*pid)
		}
		if time.Now().After(deadline) {
			b.Fatalf("slot %s has no walsender a minute after the informer synced", slot)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readBytes is what the process has read through read(2) and the like so
// far (/proc/self/io rchar: sockets included); 0 where unreadable.
func readBytes() int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
