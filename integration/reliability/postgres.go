//go:build reliability_port

// Built only with -tags reliability_port until this file is ported to the
// push-style watch and the renamed adapter API (see WAVE2-PLAN.md): the
// adapter helper rewrites it onto reliability.Register and its adapter's
// <x>test harness.

package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
)

const pgSlot = "reliability_slot"

// Postgres drives a throwaway PostgreSQL server. The seed picks a
// permanent or a temporary slot. Expire drops a permanent slot while the
// informer is cut off (a temporary one vanishes with its connection, which
// the same outage ends).
type Postgres struct {
	srv       *harness.Postgres
	px        *proxy.Proxy
	permanent bool
	src       *postgres.Source
	table     *postgres.Table[Obj]

	mu   sync.Mutex
	conn *pgx.Conn // direct; reopened after a restart
}

var _ Adapter[Obj] = (*Postgres)(nil)

func (p *Postgres) Name() string { return "postgres" }

func (p *Postgres) Start(t testing.TB, rnd *rand.Rand) string {
	p.srv = harness.StartPostgres(t)
	p.permanent = rnd.IntN(2) == 0
	var err error
	if p.px, err = proxy.New(fmt.Sprintf("127.0.0.1:%d", p.srv.Port)); err != nil {
		t.Fatal(err)
	}
	p.srv.Exec(t, `CREATE TABLE reliability (k text PRIMARY KEY, v bigint NOT NULL)`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := postgres.Config{ConnString: p.viaProxy(), StatusInterval: time.Second}
	variant := "temporary slot"
	if p.permanent {
		cfg.PermanentSlot, cfg.Slot = true, pgSlot
		variant = "permanent slot"
	}
	if p.src, err = postgres.NewSource(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if p.table, err = postgres.NewTable[Obj](ctx, p.src, "public", "reliability"); err != nil {
		t.Fatal(err)
	}
	return variant
}

// viaProxy is the superuser's connection string with the proxy's port.
func (p *Postgres) viaProxy() string {
	q := func(s string) string { return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'" }
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s dbname=%s sslmode=disable connect_timeout=10",
		p.px.Port(), q(p.srv.User), q(p.srv.Password), q(p.srv.Database))
}

func (p *Postgres) ListerWatcher() core.ListerWatcher[Obj] { return p.table }

// with runs f on the direct connection, reconnecting first if the last
// call failed (the server may have restarted since).
func (p *Postgres) with(ctx context.Context, f func(*pgx.Conn) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		c, err := pgx.Connect(ctx, p.srv.ConnString())
		if err != nil {
			return err
		}
		p.conn = c
	}
	err := f(p.conn)
	if err != nil {
		_ = p.conn.Close(context.Background())
		p.conn = nil
	}
	return err
}

func (p *Postgres) Put(ctx context.Context, key string, ver int64) error {
	return p.with(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `INSERT INTO reliability (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v`, key, ver)
		return err
	})
}

func (p *Postgres) Delete(ctx context.Context, key string) error {
	return p.with(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, `DELETE FROM reliability WHERE k = $1`, key)
		return err
	})
}

func (p *Postgres) Truth(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	err := p.with(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT k, v FROM reliability`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var k string
			var v int64
			if err := rows.Scan(&k, &v); err != nil {
				return err
			}
			out[k] = v
		}
		return rows.Err()
	})
	return out, err
}

func (p *Postgres) Head(ctx context.Context) (core.ResourceVersion, error) {
	var lsn pglogrepl.LSN
	err := p.with(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&lsn)
	})
	return core.ResourceVersion(lsn), err
}

func (p *Postgres) Version(o Obj) int64 { return o.V }

func (p *Postgres) Faults() []Fault { return []Fault{Cut, Pause, Restart, Expire} }

func (p *Postgres) Inject(t testing.TB, ctx context.Context, f Fault) (func(), bool) {
	switch f {
	case Cut:
		p.px.Cut()
		return nil, false
	case Pause:
		p.px.Pause()
		p.px.Cut()
		return p.px.Resume, true
	case Restart:
		// Immediate: a crash, recovery at start.
		p.srv.Stop(t, "immediate")
		return func() { p.srv.Start(t) }, false
	case Expire:
		p.px.Pause()
		p.px.Cut()
		if p.permanent {
			// The walsender notices the cut connection on its own time:
			// terminate it, then drop the slot once it is inactive.
			retry(t, ctx, "drop the replication slot", func(ctx context.Context) error {
				return p.with(ctx, func(c *pgx.Conn) error {
					if _, err := c.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, pgSlot); err != nil {
						return err
					}
					var active bool
					err := c.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, pgSlot).Scan(&active)
					if err == pgx.ErrNoRows {
						return nil // not created again yet, or already gone
					}
					if err != nil {
						return err
					}
					if active {
						return fmt.Errorf("slot %s still active", pgSlot)
					}
					_, err = c.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, pgSlot)
					return err
				})
			})
		}
		return p.px.Resume, true
	}
	t.Fatalf("postgres: no fault %q", f)
	return nil, false
}

func (p *Postgres) Heal(t testing.TB) {
	p.px.Resume()
	p.srv.Start(t) // a no-op when it runs
}

func (p *Postgres) Stop(t testing.TB) {
	if p.src != nil {
		_ = p.src.Close()
	}
	p.mu.Lock()
	if p.conn != nil {
		_ = p.conn.Close(context.Background())
		p.conn = nil
	}
	p.mu.Unlock()
	if p.px != nil {
		_ = p.px.Close()
	}
	if p.srv != nil {
		p.srv.Close()
	}
}
