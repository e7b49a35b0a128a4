package bench_test

import (
	"context"
	"sync"
	"testing"

	"github.com/dbinformer/dbinformer/core"
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
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = inf.Run(rctx) })
	defer func() { cancel(); wg.Wait() }()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		b.Fatal(err)
	}
	cacheMB := float64(liveHeap()-before) / (1 << 20)

	lsrc, ltbl := newPGTable[pgRow](b, pg, "audit_rows")
	defer lsrc.Close()
	list := func() {
		n := 0
		if _, err := ltbl.List(ctx, core.ListSink[pgRow]{Emit: func(ev core.Event[pgRow]) error {
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
		if _, err := tbl.AuditList(ctx, 0, core.ListSink[pgRow]{Emit: func(ev core.Event[pgRow]) error {
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
