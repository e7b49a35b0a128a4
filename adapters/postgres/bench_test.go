package pginformer_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pglogrepl"
)

// Initial sync of a 100k-row table through List (snapshot, text decode into
// a struct) against the floor, a raw COPY ... TO STDOUT of the same table.
// Compare the two ns/op figures of one run as a ratio.
func BenchmarkInitialSync(b *testing.B) {
	pg := harness.StartPostgres(b)
	pg.Exec(b, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL);
		INSERT INTO kv SELECT g, md5(g::text) FROM generate_series(1, 100000) g; ANALYZE kv`)
	b.Run("CopyToStdout", func(b *testing.B) {
		conn := pg.Conn(b)
		for b.Loop() {
			if _, err := conn.PgConn().CopyTo(b.Context(), io.Discard, "COPY kv TO STDOUT"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("List", func(b *testing.B) {
		src, err := pginformer.NewSource(b.Context(), pg.ConnString(), pginformer.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer src.Close()
		tbl, err := pginformer.NewTable[kv](b.Context(), src, "kv", pginformer.TableOptions[kv]{})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			n := 0
			if _, err := tbl.List(b.Context(), driver.ListSink[kv]{Emit: func(driver.Event[kv]) error { n++; return nil }}); err != nil {
				b.Fatal(err)
			}
			if n != 100000 {
				b.Fatalf("listed %d rows", n)
			}
		}
	})
}

// Streaming apply: one 1000-row transaction per op, written and then
// waited for in the informer's cache (WaitFor), against writing alone.
func BenchmarkStreamApply(b *testing.B) {
	pg := harness.StartPostgres(b)
	pg.Exec(b, `CREATE TABLE kv (id bigint PRIMARY KEY, v text NOT NULL)`)
	conn := pg.Conn(b)
	upsert := "INSERT INTO kv SELECT g, md5(random()::text) FROM generate_series(1, 1000) g ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v"
	b.Run("WriteOnly", func(b *testing.B) {
		for b.Loop() {
			if _, err := conn.Exec(b.Context(), upsert); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("WriteAndWaitFor", func(b *testing.B) {
		src, err := pginformer.NewSource(b.Context(), pg.ConnString(), pginformer.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer src.Close()
		tbl, err := pginformer.NewTable[kv](b.Context(), src, "kv", pginformer.TableOptions[kv]{})
		if err != nil {
			b.Fatal(err)
		}
		inf := core.NewSharedIndexInformer[kv](tbl, core.InformerOptions[kv]{})
		ctx, cancel := context.WithCancel(b.Context())
		done := make(chan struct{})
		go func() { inf.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		if err := inf.WaitForCacheSync(ctx); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := conn.Exec(ctx, upsert); err != nil {
				b.Fatal(err)
			}
			var lsn pglogrepl.LSN
			if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn); err != nil {
				b.Fatal(err)
			}
			if err := inf.WaitFor(ctx, core.ResourceVersion(lsn)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkStreamWideTable is what publishing every column (the default)
// costs against Options.PublishColumnList when T maps two of a table's five
// columns, the other three holding 200 bytes of text each: one op updates
// every one of the table's rows (wideRows, one transaction) and waits
// until the informer applied it. AllColumns/ColumnList is the cost.
func BenchmarkStreamWideTable(b *testing.B) {
	const wideRows = 50_000
	pg := harness.StartPostgres(b)
	pg.Exec(b, fmt.Sprintf(`CREATE TABLE kvw (id bigint PRIMARY KEY, v text NOT NULL, a text, b text, c text);
		INSERT INTO kvw SELECT g, 'v', repeat('a', 200), repeat('b', 200), repeat('c', 200) FROM generate_series(1, %d) g`, wideRows))
	conn := pg.Conn(b)
	for _, c := range []struct {
		name string
		opts pginformer.Options
	}{{"AllColumns", pginformer.Options{}}, {"ColumnList", pginformer.Options{PublishColumnList: true}}} {
		b.Run(c.name, func(b *testing.B) {
			src, err := pginformer.NewSource(b.Context(), pg.ConnString(), c.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			tbl, err := pginformer.NewTable[kv](b.Context(), src, "kvw", pginformer.TableOptions[kv]{})
			if err != nil {
				b.Fatal(err)
			}
			inf := core.NewSharedIndexInformer[kv](tbl, core.InformerOptions[kv]{})
			ctx, cancel := context.WithCancel(b.Context())
			done := make(chan struct{})
			go func() { inf.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			if err := inf.WaitForCacheSync(ctx); err != nil {
				b.Fatal(err)
			}
			n := 0
			for b.Loop() {
				n++
				if _, err := conn.Exec(ctx, fmt.Sprintf("UPDATE kvw SET v = 'v%d'", n)); err != nil {
					b.Fatal(err)
				}
				var lsn pglogrepl.LSN
				if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn); err != nil {
					b.Fatal(err)
				}
				if err := inf.WaitFor(ctx, core.ResourceVersion(lsn)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*wideRows), "ns/row")
		})
	}
}
