package pginformer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// runUnsynced runs an informer over lw without waiting for its sync, until
// the test ends; it returns the informer and the errors it reports.
func runUnsynced(t *testing.T, lw core.ListerWatcher[kv]) (*core.SharedIndexInformer[kv], *informertest.Errors) {
	t.Helper()
	errs := &informertest.Errors{}
	inf := core.NewSharedIndexInformer(lw, core.InformerOptions[kv]{
		Name:         t.Name(),
		Backoff:      core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
		ErrorHandler: errs.Add,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := inf.Run(ctx); err != nil && ctx.Err() == nil {
			errs.Add(fmt.Errorf("Run returned: %w", err))
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return inf, errs
}

// saysWhy checks that the informer names cause in its sync status, through
// its error handler and in WaitForCacheSyncTimeout's error, and that none
// of them holds secret.
func saysWhy(t *testing.T, inf *core.SharedIndexInformer[kv], errs *informertest.Errors, cause, secret string) {
	t.Helper()
	informertest.Eventually(t, "the sync status to name "+cause, func() bool {
		return strings.Contains(inf.SyncStatus().String(), cause)
	})
	if errs.Find(func(err error) bool { return strings.Contains(err.Error(), cause) }) == nil {
		t.Errorf("the error handler got %v, none naming %q", errs.All(), cause)
	}
	err := core.WaitForCacheSyncTimeout(context.Background(), 100*time.Millisecond, inf)
	if err == nil || !strings.Contains(err.Error(), cause) {
		t.Errorf("WaitForCacheSyncTimeout = %v, want an error naming %q", err, cause)
	}
	t.Logf("sync status: %s", inf.SyncStatus())
	t.Logf("WaitForCacheSyncTimeout: %v", err)
	for _, e := range append(errs.All(), err, errors.New(inf.SyncStatus().String())) {
		if e != nil && strings.Contains(e.Error(), secret) {
			t.Errorf("the password appears in %q", e)
		}
	}
}

// A server that is stopped, then a role whose password changed, while the
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

	pg.Stop(t, "fast")
	inf, errs := runUnsynced(t, tbl)
	saysWhy(t, inf, errs, "connection refused", password)

	pg.Start(t)
	pg.Exec(t, `ALTER ROLE cause_reader PASSWORD 'another-password'`)
	saysWhy(t, inf, errs, "password authentication failed", password)

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
