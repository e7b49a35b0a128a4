package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
)

// The migration matrix (issue 36): a table synced by a typed informer over
// a Source behind a proxy while the application writes, and migrations
// applied between connection cuts and server crashes. Per seed: three
// migrations T still holds (in random order), after which the cache must
// equal the table at a head it reached; then one that breaks the mapping
// or stops the table's stream, after which the informer must stop with a
// *pginformer.SchemaChangeError naming the table. The application's writes
// never fail because of the Source.

type migUser struct {
	ID   int64   `db:"id"`
	Name string  `db:"name"`
	Age  int64   `db:"age"`
	Plan *string `db:"plan"`
}

var holdingMigrations = []string{
	`ALTER TABLE mig ADD COLUMN extra text DEFAULT 'e'`,
	`ALTER TABLE mig DROP COLUMN IF EXISTS spare`,
	`ALTER TABLE mig ALTER COLUMN age TYPE int8`,
	`ALTER TABLE mig ALTER COLUMN name TYPE varchar(320) USING lower(name)`,
	`ALTER TABLE mig ALTER COLUMN plan TYPE varchar(64)`,
	`ALTER TABLE mig REPLICA IDENTITY FULL`,
	`VACUUM FULL mig`,
	`TRUNCATE mig`,
	`CLUSTER mig USING mig_pkey`,
}

var breakingMigrations = []string{
	`ALTER TABLE mig DROP COLUMN plan`,
	`ALTER TABLE mig RENAME COLUMN name TO full_name`,
	`DROP TABLE mig; CREATE TABLE mig (id bigint PRIMARY KEY, name text NOT NULL DEFAULT 'n', age int4 NOT NULL DEFAULT 1, plan text)`,
	`ALTER PUBLICATION {pub} DROP TABLE mig`,
}

func TestPostgresMigrationMatrix(t *testing.T) {
	for _, seed := range seeds() {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runMigrationMatrix(t, seed) })
	}
}

func runMigrationMatrix(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 0x316))
	srv := harness.StartPostgres(t)
	srv.Exec(t, `CREATE TABLE mig (id bigint PRIMARY KEY, name text NOT NULL DEFAULT 'n', age int4 NOT NULL DEFAULT 1, plan text, spare text);
		INSERT INTO mig SELECT i, 'User ' || i, i % 90, 'p' || i, 's' FROM generate_series(1, 500) i`)
	px, err := proxy.New(fmt.Sprintf("127.0.0.1:%d", srv.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	var logBuf strings.Builder
	var logMu sync.Mutex
	opts := pginformer.Options{StatusInterval: time.Second, Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logBuf}, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	t.Cleanup(func() {
		if t.Failed() {
			logMu.Lock()
			t.Logf("source log:\n%s", logBuf.String())
			logMu.Unlock()
		}
	})
	if rnd.IntN(2) == 0 {
		opts.PermanentSlot, opts.Slot = true, "migmatrix"
	}
	t.Logf("seed %d, permanent slot: %t", seed, opts.PermanentSlot)
	viaProxy := strings.Replace(srv.ConnString(), fmt.Sprintf("port=%d ", srv.Port), fmt.Sprintf("port=%d ", px.Port()), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	src, err := pginformer.NewSource(ctx, viaProxy, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	tbl, err := pginformer.NewTable[migUser](ctx, src, "mig", pginformer.TableOptions[migUser]{})
	if err != nil {
		t.Fatal(err)
	}
	inf, errs := informertest.Run[migUser](t, tbl, core.InformerOptions[migUser]{Backoff: core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second}})

	app := startMigWriter(t, srv)
	exec := func(sql string) {
		t.Helper()
		var err error
		for attempt := 0; attempt < 100; attempt++ {
			var conn *pgx.Conn
			if conn, err = pgx.Connect(ctx, srv.ConnString()); err == nil {
				_, err = conn.Exec(ctx, sql)
				conn.Close(context.Background())
				if err == nil {
					return
				}
			}
			time.Sleep(100 * time.Millisecond) // the server is restarting
		}
		t.Fatalf("%s: %v", sql, err)
	}
	fault := func() {
		switch rnd.IntN(3) {
		case 0:
			px.Cut()
		case 1:
			srv.Stop(t, "immediate")
			srv.Start(t)
		}
	}
	order := rnd.Perm(len(holdingMigrations))[:3]
	for _, i := range order {
		fault()
		exec(holdingMigrations[i])
		t.Logf("applied %s", holdingMigrations[i])
	}
	fault()
	waitFor := func(head core.ResourceVersion) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := inf.WaitFor(wctx, head); err != nil {
			t.Fatalf("seed %d: WaitFor(%s): %v (errors: %v)", seed, pglogrepl.LSN(head), err, errs.All())
		}
	}
	waitFor(migHead(ctx, t, srv))
	app.pause()
	head := migHead(ctx, t, srv)
	waitFor(head)
	if err := migMatches(ctx, srv, inf); err != nil {
		t.Errorf("seed %d (replay: go test -run 'TestPostgresMigrationMatrix' -seed %d ./integration/reliability/): after %v at %s: %v", seed, seed, order, pglogrepl.LSN(head), err)
	}
	app.resume()

	breaking := strings.ReplaceAll(breakingMigrations[rnd.IntN(len(breakingMigrations))], "{pub}", pgx.Identifier{src.PublicationName()}.Sanitize())
	exec(breaking)
	t.Logf("applied %s", breaking)
	err = errs.Wait(t, "a *SchemaChangeError", func(err error) bool {
		var sc *pginformer.SchemaChangeError
		return errors.As(err, &sc) && sc.Action == pginformer.SchemaFail
	})
	var sc *pginformer.SchemaChangeError
	if !errors.As(err, &sc) || !strings.Contains(sc.Table, "mig") || !errors.Is(err, driver.ErrPermanent) {
		t.Errorf("seed %d: after %s: %v, want a permanent SchemaChangeError naming table mig", seed, breaking, err)
	}
	app.stop()
	if n := app.failed.Load(); n > 0 {
		t.Errorf("seed %d: %d of the application's writes failed, e.g. %v", seed, n, app.lastErr.Load())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func migHead(ctx context.Context, t *testing.T, srv *harness.Postgres) core.ResourceVersion {
	t.Helper()
	for attempt := 0; ; attempt++ {
		conn, err := pgx.Connect(ctx, srv.ConnString())
		if err == nil {
			var lsn pglogrepl.LSN
			err = conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn)
			conn.Close(context.Background())
			if err == nil {
				return core.ResourceVersion(lsn)
			}
		}
		if attempt > 100 {
			t.Fatalf("read the head: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// migMatches compares the cache with the table's own text of each column.
func migMatches(ctx context.Context, srv *harness.Postgres, inf *core.SharedIndexInformer[migUser]) error {
	conn, err := pgx.Connect(ctx, srv.ConnString())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, _ := conn.Query(ctx, `SELECT id, name || '|' || age::text || '|' || coalesce(plan::text, '<null>') FROM mig`)
	want := map[int64]string{}
	var id int64
	var s string
	if _, err := pgx.ForEachRow(rows, []any{&id, &s}, func() error { want[id] = s; return nil }); err != nil {
		return err
	}
	got := map[int64]string{}
	for _, u := range inf.Lister().List(nil) {
		plan := "<null>"
		if u.Plan != nil {
			plan = *u.Plan
		}
		got[u.ID] = fmt.Sprintf("%s|%d|%s", u.Name, u.Age, plan)
	}
	if maps.Equal(got, want) {
		return nil
	}
	var diff []string
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			diff = append(diff, fmt.Sprintf("%d: cache %q, table %q", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diff = append(diff, fmt.Sprintf("%d: cache %q, not in the table", k, g))
		}
	}
	return fmt.Errorf("%d divergences (cache %d rows, table %d), e.g. %s", len(diff), len(got), len(want), strings.Join(diff[:min(5, len(diff))], "; "))
}

// migWriter is the application: updates, upserts and deletes of columns
// no migration touches, paced, on its own connection (reconnecting after
// a crash). Writes refused because of a migration's own effect (the table
// dropped or being re-created) are not counted; any other refusal is.
type migWriter struct {
	failed  atomic.Int64
	lastErr atomic.Value
	paused  atomic.Bool
	writing sync.Mutex // held while a write is under way
	stop    func()
}

// pause returns once no write is under way, and none starts until resume.
func (w *migWriter) pause() {
	w.paused.Store(true)
	w.writing.Lock()
	w.writing.Unlock()
}

func (w *migWriter) resume() { w.paused.Store(false) }

func startMigWriter(t *testing.T, srv *harness.Postgres) *migWriter {
	w := &migWriter{}
	ctx, cancel := context.WithCancel(context.Background())
	var done sync.WaitGroup
	done.Go(func() {
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		for i := 0; ctx.Err() == nil; i++ {
			time.Sleep(2 * time.Millisecond) // a paced application
			w.writing.Lock()
			if w.paused.Load() {
				w.writing.Unlock()
				continue
			}
			if conn == nil || conn.IsClosed() {
				c, err := pgx.Connect(ctx, srv.ConnString())
				if err != nil {
					w.writing.Unlock()
					continue // the server is restarting
				}
				conn = c
			}
			var err error
			switch k := int64(i%50 + 1); i % 3 {
			case 0:
				_, err = conn.Exec(ctx, `UPDATE mig SET age = age % 90 + 1 WHERE id = $1`, k)
			case 1:
				_, err = conn.Exec(ctx, `INSERT INTO mig (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET age = 7`, 1000+k)
			case 2:
				_, err = conn.Exec(ctx, `DELETE FROM mig WHERE id = $1`, 1000+k-1)
			}
			w.writing.Unlock()
			if err == nil || ctx.Err() != nil || conn.IsClosed() || strings.Contains(err.Error(), "does not exist") || strings.Contains(err.Error(), "terminating connection") {
				continue
			}
			w.failed.Add(1)
			w.lastErr.Store(err)
		}
	})
	w.stop = func() { cancel(); done.Wait() }
	t.Cleanup(w.stop)
	return w
}
