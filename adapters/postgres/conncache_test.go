package pginformer_test

import (
	"fmt"
	"slices"
	"testing"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pgx/v5"
)

// The connection of a short catalog query is kept for the next one:
// NewSource, NewTable and Head run on one server process, and Close ends
// it.
func TestShortQueriesShareAConnection(t *testing.T) {
	pg := harness.StartPostgres(t)
	table := fmt.Sprintf("conns_%d", seqNo())
	pg.Exec(t, "CREATE TABLE "+pgx.Identifier{table}.Sanitize()+" (id bigint PRIMARY KEY)")
	app := "conncache_" + table
	conn := pg.Conn(t)
	backends := func() []int32 {
		t.Helper()
		rows, _ := conn.Query(ctxFor(t), "SELECT pid FROM pg_stat_activity WHERE application_name = $1 ORDER BY pid", app)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		return pids
	}
	src := newSource(t, pg, pginformer.Options{ApplicationName: app})
	newTable[struct {
		ID int64 `db:"id"`
	}](t, src, table)
	first := backends()
	if len(first) != 1 {
		t.Fatalf("after NewSource and NewTable: server processes %v, want one", first)
	}
	for range 3 {
		if _, err := src.Head(ctxFor(t)); err != nil {
			t.Fatal(err)
		}
	}
	if got := backends(); !slices.Equal(got, first) {
		t.Errorf("after three Heads: server processes %v, want %v", got, first)
	}
	src.Close()
	eventually(t, "the idle connection closed", func() error {
		if got := backends(); len(got) != 0 {
			return fmt.Errorf("server processes %v after Close", got)
		}
		return nil
	})
}
