package bench_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// partialRow maps the fixed-length columns of the scale table (see
// createScaleTable). Under REPLICA IDENTITY DEFAULT a condition goes into
// the List's query only when every mapped column is fixed-length (or the
// table has REPLICA IDENTITY FULL; see adapters/postgres/filter.go), and
// one on the key into the publication's row filter too (Postgres 15+).
// The publication's column list is opt-in since #36 and not set here: the
// time measured is the List's, which reads only the mapped columns anyway.
type partialRow struct {
	ID int64     `db:"id"`
	N  int32     `db:"n"`
	At time.Time `db:"at"`
}

// partialSyncPostgres: the scale table (int, text, numeric, timestamptz,
// jsonb, 1 in 50 TOASTed) of 1,000,000 rows (20,000 under -short),
// REPLICA IDENTITY DEFAULT, synced into partialRow whole ("all") and
// through filter.Le("id", rows/100), 1%, pushed down into the List's query
// and the publication's row filter ("filtered"); each run on a fresh
// Source, alternating. Postgres runs out of process, so the heap is the
// informer's and its Source's. Reported as by partialSyncNATS: each side's
// median initial sync time (until HasSynced) and steady heap (live heap
// with the synced informer held, less the live heap before its Source was
// made), their ratios filtered/all (target ≤ 0.05), the floor (a
// consistent start with no informer, whole and 1%: see raw below), and the
// row changes the filtered Table decoded (Table.StreamedChanges) while
// 10,000 updates in 10 transactions touched only non-matching rows
// (target 0: the row filter keeps them on the server), after WaitFor
// reached their LSN.
func partialSyncPostgres(b *testing.B) {
	pg := harness.StartPostgres(b)
	rows := size(1_000_000, 20_000)
	createScaleTable(b, pg, "partial_rows", rows)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rounds := size(3, 1)
	matching := rows / 100
	f := filter.MustNew[partialRow](filter.Le("id", matching))
	// sync runs one informer on a fresh Source to HasSynced and returns
	// it running, with its stop function.
	sync := func(where *filter.Filter[partialRow], want int) (*pginformer.Table[partialRow], *core.SharedIndexInformer[partialRow], func()) {
		src, err := pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{PublishRowFilter: true})
		if err != nil {
			b.Fatal(err)
		}
		tbl, err := pginformer.NewTable[partialRow](ctx, src, "partial_rows", pginformer.TableOptions[partialRow]{Where: where})
		if err != nil {
			src.Close()
			b.Fatal(err)
		}
		inf := core.NewSharedIndexInformer[partialRow](tbl, core.InformerOptions[partialRow]{Name: "bench", MinWatchTimeout: time.Hour})
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = inf.Run(rctx) }()
		if err := inf.WaitForCacheSync(ctx); err != nil {
			b.Fatal(err)
		}
		if n := inf.Lister().Len(); n != want {
			b.Fatalf("synced %d rows, want %d", n, want)
		}
		return tbl, inf, func() { stop(); <-done; src.Close() }
	}
	run := func(where *filter.Filter[partialRow], want int) syncSample {
		base := liveHeap()
		t0 := time.Now()
		_, inf, stop := sync(where, want)
		d := time.Since(t0)
		heap := liveHeap()
		_ = inf.Lister().Len() // the informer is live while the heap is read
		stop()
		return syncSample{secs: d.Seconds(), heapMB: (float64(heap) - float64(base)) / (1 << 20)}
	}
	// The floor: what any consistent start of a change stream costs,
	// with no informer: a replication connection and a temporary slot
	// exporting its snapshot, then binary COPY of the same columns in that
	// snapshot through as many connections as the Source's default
	// snapshot readers (the whole table in block ranges, as a List splits
	// it; the 1% through one, as a List reads a filtered table).
	readers := min(4, runtime.GOMAXPROCS(0))
	raw := func(filtered bool) float64 {
		t0 := time.Now()
		repl, err := pgconn.Connect(ctx, pg.ReplicationConnString())
		if err != nil {
			b.Fatal(err)
		}
		defer repl.Close(ctx)
		slot, err := pglogrepl.CreateReplicationSlot(ctx, repl, "bench_partial_floor", "pgoutput", pglogrepl.CreateReplicationSlotOptions{Temporary: true, SnapshotAction: "EXPORT_SNAPSHOT"})
		if err != nil {
			b.Fatal(err)
		}
		first, err := pgx.Connect(ctx, pg.ConnString())
		if err != nil {
			b.Fatal(err)
		}
		conns, want, queries := readers, rows, []string(nil)
		if filtered {
			conns, want = 1, matching
			queries = []string{"SELECT id, n, at FROM partial_rows WHERE id <= " + strconv.Itoa(matching)}
		} else {
			queries = rangeQueries(b, first, readers, "partial_rows", "id, n, at", "")
		}
		if n := copyQueries(b, pg, first, conns, slot.SnapshotName, queries); n != want {
			b.Fatalf("raw COPY read %d rows, want %d", n, want)
		}
		return time.Since(t0).Seconds()
	}
	for range b.N {
		reportPartialSync(b, rounds, func() syncSample { return run(nil, rows) }, func() syncSample { return run(f, matching) }, raw)
	}

	// Writes that touch only non-matching rows: the filtered Table decodes
	// none of them.
	const writes, txns = 10_000, 10
	if rows-matching < writes {
		b.Fatalf("%d rows leave %d outside the filter, fewer than the %d writes", rows, rows-matching, writes)
	}
	tbl, inf, stop := sync(f, matching)
	defer stop()
	before := tbl.StreamedChanges()
	conn := pg.Conn(b)
	for i := range txns {
		lo := matching + 1 + i*writes/txns
		if _, err := conn.Exec(ctx, "UPDATE partial_rows SET n = n + 1 WHERE id BETWEEN "+strconv.Itoa(lo)+" AND "+strconv.Itoa(lo+writes/txns-1)); err != nil {
			b.Fatal(err)
		}
	}
	var head string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&head); err != nil {
		b.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(head)
	if err != nil {
		b.Fatal(err)
	}
	if err := inf.WaitFor(ctx, core.ResourceVersion(lsn)); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(tbl.StreamedChanges()-before), "decoded-nonmatching")
	b.ReportMetric(writes, "writes-nonmatching")
}
