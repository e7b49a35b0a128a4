package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
)

// Read-your-writes through a relay with the documented token,
// pginformer.CommitToken, under synchronous_commit = off: a commit
// returns before its WAL is written, so the WAL write position
// (pg_current_wal_lsn(), the token documented before) can lie before it;
// the insert position cannot. Every read after WaitFor(token) sees its
// write.
func TestReadYourWritesSynchronousCommitOff(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	h := pgtest.New(t, pg, pgtest.Options{})
	ctx := context.Background()
	js := nsrv.JetStream(t)
	if _, err := js.CreateStream(ctx, relay.StreamConfig("R", "r")); err != nil {
		t.Fatal(err)
	}
	el, err := leader.NewPostgres(pg.ConnString(), "ryw", leader.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(ctx, js, h.ListerWatcher(), relay.Options[pgtest.Row]{Stream: "R", Prefix: "r", Elector: el, ProgressInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()
	down, err := relay.NewDownstream[pgtest.Row](ctx, nsrv.JetStream(t), "R", "r", relay.DownstreamOptions[pgtest.Row]{})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run(t, down, core.InformerOptions[pgtest.Row]{Name: "ryw"})

	conn := pg.Conn(t)
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	write := func(n int) {
		t.Helper()
		if _, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO %s (k, v) VALUES ('k', $1) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", pgx.Identifier{h.TableName()}.Sanitize()), n); err != nil {
			t.Fatal(err)
		}
	}
	stale := func(n int, token core.ResourceVersion) bool {
		t.Helper()
		informertest.WaitFor(t, inf, token)
		got, ok := inf.Indexer().Get("k")
		return !ok || got.V != int64(n)
	}
	const reads = 100
	var bad, badOld int
	for i := range reads {
		write(2 * i)
		token, err := pginformer.CommitToken(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		if stale(2*i, token) {
			bad++
		}
		// The write position, for the record (not asserted: it is the
		// token this test shows wrong).
		write(2*i + 1)
		var lsn pglogrepl.LSN
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn); err != nil {
			t.Fatal(err)
		}
		if stale(2*i+1, core.ResourceVersion(lsn)) {
			badOld++
		}
	}
	t.Logf("stale reads of %d: %d with CommitToken, %d with pg_current_wal_lsn()", reads, bad, badOld)
	if bad != 0 {
		t.Errorf("%d of %d reads after WaitFor(CommitToken) were stale", bad, reads)
	}
}
