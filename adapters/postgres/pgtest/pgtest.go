// Package pgtest is the Postgres adapter's test kit: a
// conformance.Harness over a fresh table of a real server, watched by its
// own pginformer.Source, which the adapter's conformance test, the
// reliability suite (integration/reliability) and the benchmarks (bench/)
// all use. It implements every optional capability of the harness:
// Expirer, Unwatched, Transactor, Truth and, when the Source connects
// through a proxy, Faults.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/internal/testkit/proxy"
	"github.com/dbinformer/dbinformer/internal/testkit/servers"
)

// Row is the harness table's row: a text primary key and a version.
type Row struct {
	K string `db:"k"`
	V int64  `db:"v"`
}

// Options configures a Harness. The zero value is a temporary slot, replica
// identity DEFAULT, a direct connection.
type Options struct {
	// Slot names a permanent replication slot (PermanentSlot with this
	// name). Default: a temporary slot.
	Slot string
	// Full sets REPLICA IDENTITY FULL on the table (deletes carry the row).
	Full bool
	// Proxy connects the Source through an integration/proxy, so that the
	// Harness implements conformance.Faults.
	Proxy bool
	// StatusInterval is the Source's. Default 1s.
	StatusInterval time.Duration
	// Table names the table. Default: pgtest_<n>, fresh.
	Table string
	// Source holds the Source's other options (Slot and StatusInterval
	// above take precedence).
	Source pginformer.Options
	// Where is the Table's partial-sync filter (TableOptions.Where); Truth
	// then reports only the rows it matches.
	Where *filter.Filter[Row]
}

// Harness is one fresh table on a real Postgres, watched by its own Source.
type Harness struct {
	srv   *servers.Postgres
	px    *proxy.Proxy
	src   *pginformer.Source
	table *pginformer.Table[Row]
	name  string
	slot  string
	perm  bool
	where *filter.Filter[Row]

	conns chan *pgx.Conn // direct connections for writes and reads; nil entries reconnect
}

var (
	_ conformance.Harness[Row] = (*Harness)(nil)
	_ conformance.Expirer      = (*Harness)(nil)
	_ conformance.Unwatched    = (*Harness)(nil)
	_ conformance.Transactor   = (*Harness)(nil)
	_ conformance.Truth        = (*Harness)(nil)
	_ conformance.Faults       = (*Harness)(nil)
)

var seq atomic.Int64

// New creates a fresh table (k text PRIMARY KEY, v bigint NOT NULL) on srv,
// a Source and a Table for it, and lists the table once, so that the slot
// exists and a watch may start from any later version. Everything is
// closed when tb ends.
func New(tb testing.TB, srv *servers.Postgres, opts Options) *Harness {
	tb.Helper()
	h := &Harness{srv: srv, name: opts.Table, slot: opts.Slot, perm: opts.Slot != "", where: opts.Where, conns: make(chan *pgx.Conn, 4)}
	for range cap(h.conns) {
		h.conns <- nil
	}
	tb.Cleanup(h.close)
	if h.name == "" {
		h.name = fmt.Sprintf("pgtest_%d", seq.Add(1))
	}
	ident := pgx.Identifier{h.name}.Sanitize()
	srv.Exec(tb, fmt.Sprintf(`CREATE TABLE %s (k text PRIMARY KEY, v bigint NOT NULL);
		CREATE TABLE IF NOT EXISTS pgtest_unwatched (id serial PRIMARY KEY, v text)`, ident))
	if opts.Full {
		srv.Exec(tb, "ALTER TABLE "+ident+" REPLICA IDENTITY FULL")
	}
	conn := srv.ConnString()
	if opts.Proxy {
		var err error
		if h.px, err = proxy.New(fmt.Sprintf("127.0.0.1:%d", srv.Port)); err != nil {
			tb.Fatal(err)
		}
		conn = strings.Replace(conn, fmt.Sprintf("port=%d ", srv.Port), fmt.Sprintf("port=%d ", h.px.Port()), 1)
	}
	so := opts.Source
	if so.StatusInterval == 0 {
		so.StatusInterval = opts.StatusInterval
	}
	if so.StatusInterval == 0 {
		so.StatusInterval = time.Second
	}
	if h.perm {
		so.PermanentSlot, so.Slot = true, opts.Slot
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if h.src, err = pginformer.NewSource(ctx, conn, so); err != nil {
		tb.Fatal(err)
	}
	h.slot = h.src.SlotName()
	if h.table, err = pginformer.NewTable[Row](ctx, h.src, h.name, pginformer.TableOptions[Row]{Where: opts.Where}); err != nil {
		tb.Fatal(err)
	}
	if _, err := h.table.List(ctx, driver.ListSink[Row]{Emit: func(driver.Event[Row]) error { return nil }}); err != nil {
		tb.Fatal(err)
	}
	return h
}

func (h *Harness) close() {
	if h.src != nil {
		h.src.Close()
	}
	for range cap(h.conns) {
		if c := <-h.conns; c != nil {
			c.Close(context.Background())
		}
	}
	if h.px != nil {
		h.px.Close()
	}
}

// Source is the harness's Source.
func (h *Harness) Source() *pginformer.Source { return h.src }

// Table is the harness's Table.
func (h *Harness) Table() *pginformer.Table[Row] { return h.table }

// TableName is the table's (unquoted) name.
func (h *Harness) TableName() string { return h.name }

// Proxy is the proxy between the Source and the server, nil without
// Options.Proxy.
func (h *Harness) Proxy() *proxy.Proxy { return h.px }

// ListerWatcher is the Table.
func (h *Harness) ListerWatcher() driver.ListerWatcher[Row] { return h.table }

// Version is the row's v.
func (h *Harness) Version(r Row) int64 { return r.V }

// with runs f on a direct connection, reconnecting first if the last call
// on it failed (the server may have restarted since).
func (h *Harness) with(ctx context.Context, f func(*pgx.Conn) error) error {
	var c *pgx.Conn
	select {
	case c = <-h.conns:
	case <-ctx.Done():
		return ctx.Err()
	}
	if c == nil {
		var err error
		if c, err = pgx.Connect(ctx, h.srv.ConnString()); err != nil {
			h.conns <- nil
			return err
		}
	}
	err := f(c)
	if err != nil {
		c.Close(context.Background())
		c = nil
	}
	h.conns <- c
	return err
}

// exec runs sql and returns pg_current_wal_lsn() read on the same
// connection after the commit: at or after the commit's end LSN.
func (h *Harness) exec(ctx context.Context, sql string, args ...any) (core.ResourceVersion, error) {
	var lsn pglogrepl.LSN
	err := h.with(ctx, func(c *pgx.Conn) error {
		if _, err := c.Exec(ctx, sql, args...); err != nil {
			return err
		}
		return c.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn)
	})
	return core.ResourceVersion(lsn), err
}

// Put upserts key with version n.
func (h *Harness) Put(ctx context.Context, key string, n int64) (core.ResourceVersion, error) {
	return h.exec(ctx, "INSERT INTO "+pgx.Identifier{h.name}.Sanitize()+" (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", key, n)
}

// Delete deletes key.
func (h *Harness) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	return h.exec(ctx, "DELETE FROM "+pgx.Identifier{h.name}.Sanitize()+" WHERE k = $1", key)
}

// PutAll upserts every key with version n in one transaction.
func (h *Harness) PutAll(ctx context.Context, keys []string, n int64) (core.ResourceVersion, error) {
	return h.exec(ctx, "INSERT INTO "+pgx.Identifier{h.name}.Sanitize()+" (k, v) SELECT unnest($1::text[]), $2 ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", keys, n)
}

// PutUnwatched writes to a table the Source does not watch.
func (h *Harness) PutUnwatched(ctx context.Context) (core.ResourceVersion, error) {
	return h.exec(ctx, "INSERT INTO pgtest_unwatched (v) VALUES ('x')")
}

// Truth reads the table directly: the rows Options.Where matches.
func (h *Harness) Truth(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	err := h.with(ctx, func(c *pgx.Conn) error {
		clear(out)
		rows, _ := c.Query(ctx, "SELECT k, v FROM "+pgx.Identifier{h.name}.Sanitize())
		var r Row
		_, err := pgx.ForEachRow(rows, []any{&r.K, &r.V}, func() error {
			if h.where.Match(r.K, r) {
				out[r.K] = r.V
			}
			return nil
		})
		return err
	})
	return out, err
}

// Head is pg_current_wal_lsn(), read directly.
func (h *Harness) Head(ctx context.Context) (core.ResourceVersion, error) {
	var lsn pglogrepl.LSN
	err := h.with(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn)
	})
	return core.ResourceVersion(lsn), err
}

// Expire makes every version so far unusable: it terminates the walsender
// (a temporary slot goes with it) and drops a permanent slot once it is
// inactive.
func (h *Harness) Expire(ctx context.Context) error {
	return DropSlot(ctx, h.srv.ConnString(), h.slot)
}

// DropSlot terminates the walsender of slot and drops the slot if it
// survives (a permanent one), retrying until it is gone: the Source may
// take it back in between.
func DropSlot(ctx context.Context, connString, slot string) error {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for {
		if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", slot); err != nil {
			return err
		}
		// A permanent slot survives its walsender: drop it once inactive.
		_, _ = conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NULL", slot)
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Faults lists the faults Inject supports: with a proxy, cut, pause,
// restart, expire and freeze; without, restart and expire.
func (h *Harness) Faults() []conformance.Fault {
	if h.px == nil {
		return []conformance.Fault{conformance.Restart, conformance.Expire}
	}
	return []conformance.Fault{conformance.Cut, conformance.Pause, conformance.Restart, conformance.Expire, conformance.Freeze}
}

// Inject starts fault f.
func (h *Harness) Inject(t testing.TB, ctx context.Context, f conformance.Fault) (end func(), writable bool) {
	t.Helper()
	switch f {
	case conformance.Cut:
		if h.px != nil {
			h.px.Cut()
			return nil, false
		}
	case conformance.Pause:
		if h.px != nil {
			h.px.Pause()
			h.px.Cut()
			return h.px.Resume, true
		}
	case conformance.Freeze:
		if h.px != nil {
			h.px.Freeze()
			return h.px.Thaw, true
		}
	case conformance.Restart:
		// Immediate: a crash, recovery at start.
		h.srv.Stop(t, "immediate")
		return func() { h.srv.Start(t) }, false
	case conformance.Expire:
		if h.px != nil {
			// Cut off first, so that the Source cannot take a permanent
			// slot back while it is dropped.
			h.px.Pause()
			h.px.Cut()
		}
		if err := h.Expire(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("pgtest: expire: %v", err)
		}
		if h.px != nil {
			return h.px.Resume, true
		}
		return nil, true
	}
	t.Fatalf("pgtest: fault %q not supported", f)
	return nil, false
}

// Heal ends any outage: the proxy resumed, the server running.
func (h *Harness) Heal(t testing.TB) {
	if h.px != nil {
		h.px.Resume()
	}
	h.srv.Start(t) // a no-op when it runs
}
