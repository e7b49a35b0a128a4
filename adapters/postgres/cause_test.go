package pginformer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// runUnsynced runs an informer over lw without waiting for its sync, until
// the test ends, retrying quickly; it returns the informer and the errors
// it reports.
func runUnsynced(t *testing.T, lw driver.ListerWatcher[kv]) (*core.SharedIndexInformer[kv], *informertest.Errors) {
	t.Helper()
	return informertest.Start(t, lw, core.InformerOptions[kv]{
		Backoff: core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
	})
}

// A role whose password changed, then a server that is stopped, while the
// informer makes its first sync: each List fails at once, and its cause
// (connection refused; password authentication failed, never the
// password) is named by the sync status, the error handler and
// WaitForCacheSyncTimeout. Once the server is back and the password is the
// one the Source has, the informer syncs.
func TestListNamesCause(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE cause (id bigint PRIMARY KEY, v text NOT NULL); INSERT INTO cause VALUES (1, 'a')`)
	connString := pg.CreateRole(t, "cause_reader", "REPLICATION")
	pg.Exec(t, `GRANT SELECT ON cause TO cause_reader; GRANT CREATE ON DATABASE `+pgx.Identifier{pg.Database}.Sanitize()+` TO cause_reader; ALTER TABLE cause OWNER TO cause_reader`)
	_, password, _ := strings.Cut(connString, "password=")
	password, _, _ = strings.Cut(password, " ")
	password = strings.Trim(password, "'")
	if len(password) < 8 {
		t.Fatalf("setup: no password found in the role's connection string")
	}
	src, err := pginformer.NewSource(ctxFor(t), connString, pginformer.Options{StatusInterval: time.Second})
	if err != nil {
		t.Fatalf("NewSource: %v", err)
	}
	t.Cleanup(func() { src.Close() })
	tbl := newTable[kv](t, src, "cause")

	// The password changes while the server is up, so that the informer
	// cannot sync between the two causes: once the server is back it still
	// meets the wrong password.
	pg.Exec(t, `ALTER ROLE cause_reader PASSWORD 'another-password'`)
	inf, errs := runUnsynced(t, tbl)
	informertest.SaysWhy(t, inf, errs, "password authentication failed", password)

	pg.Stop(t, "fast")
	informertest.SaysWhy(t, inf, errs, "connection refused", password)

	pg.Start(t)
	pg.Exec(t, `ALTER ROLE cause_reader PASSWORD '`+password+`'`)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatalf("with the server back and the password valid: %v", err)
	}
	if o, ok := inf.Indexer().Get("1"); !ok || o.V != "a" {
		t.Errorf("cache holds %v %v for key 1", o, ok)
	}

	// The watch too: with the server stopped, the watch failure in the
	// sync status names the cause.
	pg.Stop(t, "fast")
	informertest.Eventually(t, "the sync status to name the watch's connection refused", func() bool {
		st := inf.SyncStatus()
		return st.WatchFailures.Count > 0 && strings.Contains(st.String(), "connection refused")
	})
	t.Logf("sync status: %s", inf.SyncStatus())
	pg.Start(t)
	conn := pg.Conn(t)
	waitFor(t, inf, write(t, conn, `INSERT INTO cause VALUES (2, 'b')`))
}
