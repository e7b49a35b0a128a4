package pginformer_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

const waitLong = 2 * time.Minute

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitLong)
	t.Cleanup(cancel)
	return ctx
}

func newSource(t *testing.T, pg *harness.Postgres, cfg pginformer.Options) *pginformer.Source {
	t.Helper()
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = time.Second
	}
	if cfg.Logger == nil {
		// The log must never show the password.
		var buf syncBuffer
		cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		t.Cleanup(func() {
			if s := buf.String(); strings.Contains(s, pg.Password) {
				t.Errorf("the source's log shows the password:\n%s", s)
			} else if t.Failed() {
				t.Logf("source log:\n%s", s)
			}
		})
	}
	src, err := pginformer.NewSource(ctxFor(t), pg.ConnString(), cfg)
	if err != nil {
		t.Fatalf("NewSource: %v", err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func newTable[T any](t *testing.T, src *pginformer.Source, name string) *pginformer.Table[T] {
	t.Helper()
	tbl, err := pginformer.NewTable[T](ctxFor(t), src, name, pginformer.TableOptions[T]{})
	if err != nil {
		t.Fatalf("NewTable(%q): %v", name, err)
	}
	return tbl
}

// write runs sql and returns pg_current_wal_lsn() after its commit.
func write(t *testing.T, conn *pgx.Conn, sql string, args ...any) core.ResourceVersion {
	t.Helper()
	ctx := ctxFor(t)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
	return currentLSN(t, conn)
}

func currentLSN(t *testing.T, conn *pgx.Conn) core.ResourceVersion {
	t.Helper()
	var lsn pglogrepl.LSN
	if err := conn.QueryRow(ctxFor(t), "SELECT pg_current_wal_lsn()").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return core.ResourceVersion(lsn)
}

// recorder keeps what handlers saw.
type recorder[T any] struct {
	mu     sync.Mutex
	events []string
	errs   []error
}

func (r *recorder[T]) add(s string) {
	r.mu.Lock()
	r.events = append(r.events, s)
	r.mu.Unlock()
}

// informer runs a SharedIndexInformer over lw until the test ends.
func informer[T any](t *testing.T, lw driver.ListerWatcher[T], h core.ResourceEventHandler[T]) (*core.SharedIndexInformer[T], *recorder[T]) {
	t.Helper()
	rec := &recorder[T]{}
	inf := core.NewSharedIndexInformer(lw, core.InformerOptions[T]{
		Name: t.Name(),
		ErrorHandler: func(err error) {
			rec.mu.Lock()
			rec.errs = append(rec.errs, err)
			rec.mu.Unlock()
		},
		Backoff: core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
	})
	if h != nil {
		if _, err := inf.AddEventHandler(h); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	sctx, scancel := context.WithTimeout(ctx, waitLong)
	defer scancel()
	if err := inf.WaitForCacheSync(sctx); err != nil {
		t.Fatalf("WaitForCacheSync: %v", err)
	}
	return inf, rec
}

func waitFor[T any](t *testing.T, inf *core.SharedIndexInformer[T], rv core.ResourceVersion) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := inf.WaitFor(ctx, rv); err != nil {
		t.Fatalf("WaitFor(%d): %v", rv, err)
	}
}

// eventually polls cond until it returns nil or the deadline passes.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

type kv struct {
	ID int64  `db:"id"`
	V  string `db:"v"`
}

// cacheMatches compares an informer's cache of a (id bigint, v text NOT NULL)
// table with the table.
func cacheMatches(t *testing.T, conn *pgx.Conn, table string, inf *core.SharedIndexInformer[kv]) error {
	rows, _ := conn.Query(ctxFor(t), "SELECT id, v FROM "+pgx.Identifier{table}.Sanitize())
	want, err := pgx.CollectRows(rows, pgx.RowToStructByName[kv])
	if err != nil {
		return err
	}
	if n := inf.Indexer().Len(); n != len(want) {
		return fmt.Errorf("cache has %d rows, table %d", n, len(want))
	}
	for _, w := range want {
		got, ok := inf.Lister().Get(fmt.Sprint(w.ID))
		if !ok {
			return fmt.Errorf("key %d missing from the cache", w.ID)
		}
		if got != w {
			return fmt.Errorf("key %d: cache %+v, table %+v", w.ID, got, w)
		}
	}
	return nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// watcher runs one Watch until stop, handing each batch (copied) to C.
type watcher[T any] struct {
	C      chan []driver.Event[T]
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func watch[T any](t *testing.T, lw driver.ListerWatcher[T], from core.ResourceVersion, progress <-chan struct{}) *watcher[T] {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxFor(t))
	w := &watcher[T]{C: make(chan []driver.Event[T], 1024), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.err = lw.Watch(ctx, from, driver.WatchOptions[T]{Progress: progress, Emit: func(b []driver.Event[T]) error {
			select {
			case w.C <- append([]driver.Event[T](nil), b...):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

// next returns the next batch, or the error the watch ended with.
func (w *watcher[T]) next(t *testing.T) ([]driver.Event[T], error) {
	t.Helper()
	select {
	case b := <-w.C:
		return b, nil
	case <-w.done:
		select {
		case b := <-w.C:
			return b, nil
		default:
		}
		return nil, w.err
	case <-time.After(waitLong):
		t.Fatal("no batch from the watch")
		return nil, nil
	}
}

// stop cancels the watch and returns what it returned.
func (w *watcher[T]) stop() error {
	w.cancel()
	<-w.done
	return w.err
}

func newTestLogger(w *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
