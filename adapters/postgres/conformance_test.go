package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

type confRow struct {
	ID string `db:"id"`
	N  int    `db:"n"`
}

var tableSeq atomic.Int64

// confSource is one fresh table on the shared server, watched by its own
// Source (its own temporary slot).
type confSource struct {
	pg    *harness.Postgres
	src   *postgres.Source
	table *postgres.Table[confRow]
	name  string
	conn  *connPool
}

// connPool hands out connections to concurrent writers (pgxpool would add a
// module to go.mod for a test helper).
type connPool struct{ c chan *pgx.Conn }

func newConnPool(t *testing.T, pg *harness.Postgres, n int) *connPool {
	p := &connPool{c: make(chan *pgx.Conn, n)}
	for range n {
		p.c <- pg.Conn(t)
	}
	return p
}

func (p *connPool) AcquireFunc(ctx context.Context, f func(*pgx.Conn) error) error {
	select {
	case c := <-p.c:
		defer func() { p.c <- c }()
		return f(c)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *confSource) ListerWatcher() core.ListerWatcher[confRow] { return c.table }
func (c *confSource) Version(o confRow) int                      { return o.N }

// exec runs one statement and returns pg_current_wal_lsn() read on the same
// connection after the commit: at or after the commit's end LSN.
func (c *confSource) exec(ctx context.Context, sql string, args ...any) (core.ResourceVersion, error) {
	var lsn pglogrepl.LSN
	err := c.conn.AcquireFunc(ctx, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			return err
		}
		return conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn)
	})
	return core.ResourceVersion(lsn), err
}

func (c *confSource) Put(ctx context.Context, key string, n int) (core.ResourceVersion, error) {
	return c.exec(ctx, fmt.Sprintf("INSERT INTO %s (id, n) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n", pgx.Identifier{c.name}.Sanitize()), key, n)
}

func (c *confSource) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	return c.exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE id = $1", pgx.Identifier{c.name}.Sanitize()), key)
}

func (c *confSource) PutUnwatched(ctx context.Context) (core.ResourceVersion, error) {
	return c.exec(ctx, "INSERT INTO unwatched (v) VALUES ('x')")
}

// Expire kills the walsender: the temporary slot goes with it.
func (c *confSource) Expire(ctx context.Context) error {
	return c.conn.AcquireFunc(ctx, func(conn *pgx.Conn) error { return dropSlot(ctx, conn, c.src.SlotName()) })
}

func dropSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", slot); err != nil {
		return err
	}
	for {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		// A permanent slot survives its walsender: drop it once inactive.
		_, _ = conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NULL", slot)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestConformance(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE unwatched (id serial PRIMARY KEY, v text)`)
	t.Run("IdentityDefault", func(t *testing.T) { runConformance(t, pg, false) })
	t.Run("IdentityFull", func(t *testing.T) { runConformance(t, pg, true) })
}

func runConformance(t *testing.T, pg *harness.Postgres, full bool) {
	conformance.Run(t, conformance.Capabilities{DistinguishesUpdate: true, DeletesCarryObject: full, Timeout: time.Minute},
		func(t *testing.T) conformance.Source[confRow] {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			name := fmt.Sprintf("conf_%d", tableSeq.Add(1))
			pg.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, n int NOT NULL)`, name))
			if full {
				pg.Exec(t, fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, name))
			}
			src, err := postgres.NewSource(ctx, postgres.Config{ConnString: pg.ConnString(), StatusInterval: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { src.Close() })
			tbl, err := postgres.NewTable[confRow](ctx, src, "", name)
			if err != nil {
				t.Fatal(err)
			}
			// The first List creates the slot: writes of the case come after.
			if _, err := tbl.List(ctx, core.ListOptions[confRow]{Emit: func(core.Event[confRow]) error { return nil }}); err != nil {
				t.Fatal(err)
			}
			pool := newConnPool(t, pg, 4)
			return &confSource{pg: pg, src: src, table: tbl, name: name, conn: pool}
		})
}
