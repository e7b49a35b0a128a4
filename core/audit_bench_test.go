package core_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// auditRow is a table row of plain fields, as bench's pgRow.
type auditRow struct {
	ID        int64
	Org, Team string
	N         int32
	Note      string
}

// rowsLW lists, watches nothing and audit-lists the same pre-built rows at
// version 1: the source costs next to nothing, so what an audit of it
// takes is the core's own per-row pass.
type rowsLW struct {
	rows []driver.Event[auditRow]
	// at, when set, reads the live heap above base as the at-th row of an
	// AuditList has been emitted into held.
	at         int
	base, held uint64
}

func (l *rowsLW) emit(sink driver.ListSink[auditRow], probe bool) (core.ResourceVersion, error) {
	if sink.Estimate != nil {
		sink.Estimate(int64(len(l.rows)))
	}
	for n, ev := range l.rows {
		if err := sink.Emit(ev); err != nil {
			return 0, err
		}
		if probe && n+1 == l.at {
			l.held = benchLiveHeap() - min(l.base, benchLiveHeap())
		}
	}
	return 1, nil
}

// List hands the cache objects of its own, as decoding does: what the
// cache holds is then its own heap.
func (l *rowsLW) List(_ context.Context, sink driver.ListSink[auditRow]) (core.ResourceVersion, error) {
	emit := sink.Emit
	sink.Emit = func(ev driver.Event[auditRow]) error {
		o := &ev.Object
		ev.Key, o.Org, o.Team, o.Note = strings.Clone(ev.Key), strings.Clone(o.Org), strings.Clone(o.Team), strings.Clone(o.Note)
		return emit(ev)
	}
	return l.emit(sink, false)
}

func (l *rowsLW) Watch(ctx context.Context, _ core.ResourceVersion, _ driver.WatchOptions[auditRow]) error {
	<-ctx.Done()
	return driver.Stopped(ctx)
}

func (l *rowsLW) AuditList(_ context.Context, _ core.ResourceVersion, sink driver.ListSink[auditRow]) (core.ResourceVersion, error) {
	return l.emit(sink, l.at > 0)
}

func benchLiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkAuditPass measures the core's share of an audit: an unpaced
// AuditNow of a synced informer over a source that hands it pre-built rows
// (DBINFORMER_AUDIT_ROWS, default 1,000,000), per row, beside a read of
// the same rows into a sink that only counts; and the live heap the audit
// holds at its last row against the cache's (audit-retained-%). "audit"
// is an informer without index functions, whose initial list is filed
// into a base (stage.go); "indexed" one with an index function, whose
// cache is a map.
func BenchmarkAuditPass(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("DBINFORMER_AUDIT_ROWS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	lw := &rowsLW{rows: make([]driver.Event[auditRow], n)}
	for i := range lw.rows {
		id := strconv.Itoa(i)
		lw.rows[i] = driver.Event[auditRow]{Type: driver.Added, Key: "public.audit_rows/" + id, HasObject: true, Object: auditRow{
			ID: int64(i), Org: "org-" + strconv.Itoa(i%100), Team: "team-" + strconv.Itoa(i%1000), N: 1,
			Note: "note of row " + id + " 0123456789abcdef0123456789abcdef",
		}}
	}
	for _, indexed := range []bool{false, true} {
		name := "audit"
		var ix core.Indexers[auditRow]
		if indexed {
			name = "indexed"
			ix = core.Indexers[auditRow]{"org": func(r auditRow) ([]string, error) { return []string{r.Org}, nil }}
		}
		before := benchLiveHeap()
		inf := core.NewSharedIndexInformer[auditRow](lw, core.InformerOptions[auditRow]{
			Name: "audit-pass", Indexers: ix, Audit: &core.AuditOptions[auditRow]{Pace: -1},
		})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { _ = inf.Run(ctx) })
		if err := inf.WaitForCacheSync(ctx); err != nil {
			b.Fatal(err)
		}
		cache := benchLiveHeap() - before
		audit := func(b *testing.B) {
			if r := inf.AuditNow(ctx); r.Outcome != core.AuditEqual || r.Rows != int64(n) {
				b.Fatalf("audit: %v, want equal over %d rows", r, n)
			}
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				audit(b)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
			lw.at, lw.base = n, benchLiveHeap()
			audit(b)
			lw.at = 0
			b.ReportMetric(100*float64(lw.held)/float64(cache), "audit-retained-%")
			b.ReportMetric(float64(cache)/(1<<20), "cache-MB")
		})
		cancel()
		wg.Wait()
	}
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			rows := 0
			if _, err := lw.AuditList(context.Background(), 0, driver.ListSink[auditRow]{Emit: func(driver.Event[auditRow]) error { rows++; return nil }}); err != nil || rows != n {
				b.Fatal(err, rows)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
	})
}
