package bench_test

import (
	"context"
	"testing"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// BenchmarkPostgresAudit (#37): the consistency audit of an informer over
// a Postgres table of rows pgRows (1,000,000; 100,000 with -short or
// DBINFORMER_BENCH_SMALL): an audit (unpaced, AuditNow: a temporary slot,
// its snapshot read by one COPY, each row compared with the cache) against
// a List of the same rows by a Table of a second Source (a late List: a
// helper slot's snapshot, read by as many readers as the table's size
// and Options.SnapshotReaders give), alternating, 3 rounds, medians; the
// target is audit ≤ 1.2× list. auditlist is the adapter's share alone:
// AuditList into a sink that only counts, compared with nothing; auditeq
// the audit with AuditOptions.Equal set to ==, against the default (DeepEqual's
// answer, field by field in place for a row of plain fields such as
// pgRow). Beside them the audit's retained heap when
// its last row arrives, against the cache's own heap (the target "heap
// beyond the cache ≤ 5%").
func BenchmarkPostgresAudit(b *testing.B) {
	pg := harness.StartPostgres(b)
	rows := size(1_000_000, 100_000)
	pg.Exec(b, "CREATE TABLE audit_rows ("+pgRowCols+"); INSERT INTO audit_rows "+pgRowsFrom(1, rows))
	pg.Exec(b, "VACUUM ANALYZE audit_rows")
	ctx := context.Background()

	before := liveHeap()
	src, tbl := newPGTable[pgRow](b, pg, "audit_rows")
	defer src.Close()
	probe := &heapProbe[pgRow]{lw: tbl}
	aopts := &core.AuditOptions[pgRow]{Pace: -1}
	inf := core.NewSharedIndexInformer[pgRow](probe, core.InformerOptions[pgRow]{Name: "audit-bench", Audit: aopts})
	defer runSynced(b, inf)()
	cacheMB := float64(liveHeap()-before) / (1 << 20)

	lsrc, ltbl := newPGTable[pgRow](b, pg, "audit_rows")
	defer lsrc.Close()
	list := func() {
		n := 0
		if _, err := ltbl.List(ctx, driver.ListSink[pgRow]{Emit: func(ev driver.Event[pgRow]) error {
			if ev.Err != nil {
				return ev.Err
			}
			n++
			return nil
		}}); err != nil {
			b.Fatal(err)
		}
		if n != rows {
			b.Fatalf("listed %d rows, want %d", n, rows)
		}
	}
	audit := func() {
		if r := inf.AuditNow(ctx); r.Outcome != core.AuditEqual || r.Rows != int64(rows) {
			b.Fatalf("audit: %v, want equal over %d rows", r, rows)
		}
	}
	// The adapter's share: AuditList into a sink that only counts (no
	// comparison with the cache), beside the audit and the List.
	read := func() {
		n := 0
		if _, err := tbl.AuditList(ctx, 0, driver.ListSink[pgRow]{Emit: func(ev driver.Event[pgRow]) error {
			if ev.Err != nil {
				return ev.Err
			}
			n++
			return nil
		}}); err != nil {
			b.Fatal(err)
		}
		if n != rows {
			b.Fatalf("audit-listed %d rows, want %d", n, rows)
		}
	}
	list() // the second Source's session and stream: later Lists use helper slots
	audit()
	list()
	probe.at, probe.base = rows, liveHeap()
	audit()
	probe.at = 0
	b.ReportMetric(float64(probe.held)/(1<<20), "audit-retained-MB")
	alternate(b, 3,
		side{name: "audit", n: rows, unit: "row", peak: true, run: audit},
		side{name: "list", n: rows, unit: "row", peak: true, run: list},
		side{name: "auditlist", n: rows, unit: "row", run: read},
		side{name: "auditeq", n: rows, unit: "row", run: audit,
			prepare: func() { aopts.Equal = func(a, b pgRow) bool { return a == b } },
			finish:  func() { aopts.Equal = nil }})
	b.ReportMetric(cacheMB, "cache-MB")
}

// BenchmarkPostgresAuditThroughput (#37): the informer's event throughput
// while audits run, over a Postgres table of pgRows rows (1M; 100k with
// -short or DBINFORMER_BENCH_SMALL). One writer updates changes rows
// (200k; 50k small) in transactions of 1,000 (UPDATE … SET n = n + 1 over
// a window of ids moving through the table), timed from the first UPDATE
// until WaitFor the last commit's CommitToken, while audits run back to
// back at the default pace (10,000 rows/s) and unpaced, against the same
// without an audit; alternating, 3 rounds, medians. The target is paced ≥
// 0.8× alone. An audit still running when a side's writes are applied is
// cancelled (a paced audit of 1M rows takes 100 s), so the rounds do not
// wait for it.
func BenchmarkPostgresAuditThroughput(b *testing.B) {
	pg := harness.StartPostgres(b)
	rows := size(1_000_000, 100_000)
	changes := size(200_000, 50_000)
	const txRows = 1000
	pg.Exec(b, "CREATE TABLE audit_tput ("+pgRowCols+"); INSERT INTO audit_tput "+pgRowsFrom(1, rows))
	pg.Exec(b, "VACUUM ANALYZE audit_tput")
	ctx := context.Background()

	src, tbl := newPGTable[pgRow](b, pg, "audit_tput")
	defer src.Close()
	aopts := &core.AuditOptions[pgRow]{}
	inf := core.NewSharedIndexInformer[pgRow](tbl, core.InformerOptions[pgRow]{Name: "audit-tput", Audit: aopts})
	defer runSynced(b, inf)()
	conn := pg.Conn(b)
	next := 1
	update := func() {
		for done := 0; done < changes; done += txRows {
			if next+txRows-1 > rows {
				next = 1
			}
			if _, err := conn.Exec(ctx, "UPDATE audit_tput SET n = n + 1 WHERE id BETWEEN $1 AND $2", next, next+txRows-1); err != nil {
				b.Fatal(err)
			}
			next += txRows
		}
		last, err := pginformer.CommitToken(ctx, conn)
		if err != nil {
			b.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
		defer wcancel()
		if err := inf.WaitFor(wctx, last); err != nil {
			b.Fatal(err)
		}
	}
	update() // warm: the first changes' path, not timed

	aud := newBackToBackAudits(b, inf, aopts)
	alternate(b, 3,
		side{name: "paced", n: changes, unit: "change", prepare: aud.start("paced", 0), run: update, finish: aud.stop},
		side{name: "unpaced", n: changes, unit: "change", prepare: aud.start("unpaced", -1), run: update, finish: aud.stop},
		side{name: "alone", n: changes, unit: "change", run: update})
	aud.report(3)
}
