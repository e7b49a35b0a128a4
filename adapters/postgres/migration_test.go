package pginformer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// user is the table: a key, text, int4, numeric, text[] and
// timestamptz, every column mapped.
type user struct {
	ID   int64              `db:"id"`
	Name string             `db:"name"`
	Age  int64              `db:"age"`
	Plan pgtype.Numeric     `db:"plan"`
	Tags []*string          `db:"tags"`
	Seen pgtype.Timestamptz `db:"seen"`
}

// userTable creates table name with rows 1..n.
func userTable(t *testing.T, pg *harness.Postgres, name string, n int) {
	pg.Exec(t, fmt.Sprintf(`CREATE TABLE %[1]s (id bigint PRIMARY KEY, name text NOT NULL DEFAULT 'new', age int4 NOT NULL DEFAULT 1,
			plan numeric, tags text[], seen timestamptz, spare text);
		INSERT INTO %[1]s SELECT i, 'User' || i, i %% 90, i * 1.5, ARRAY['a', NULL], '2026-01-01'::timestamptz + i * interval '1 minute', 'x' FROM generate_series(1, %[2]d) i`, name, n))
}

// usersMatch compares the cache with the table (fields as text on both
// sides).
func usersMatch(t *testing.T, conn *pgx.Conn, table string, inf *core.SharedIndexInformer[user]) error {
	t.Helper()
	rows, _ := conn.Query(ctxFor(t), `SELECT id, name || '|' || age || '|' || coalesce(plan::text, 'null') || '|' || coalesce(array_to_string(tags, ',', 'NULL'), 'null') || '|' || coalesce(extract(epoch from seen)::bigint::text, 'null') FROM `+table)
	want := map[int64]string{}
	var id int64
	var s string
	if _, err := pgx.ForEachRow(rows, []any{&id, &s}, func() error { want[id] = s; return nil }); err != nil {
		return err
	}
	got := map[int64]string{}
	for _, u := range inf.Lister().List(nil) {
		plan := "null"
		if u.Plan.Valid {
			v, _ := u.Plan.Value()
			plan = fmt.Sprint(v)
		}
		tags := "null"
		if u.Tags != nil {
			var ts []string
			for _, x := range u.Tags {
				if x == nil {
					ts = append(ts, "NULL")
				} else {
					ts = append(ts, *x)
				}
			}
			tags = strings.Join(ts, ",")
		}
		seen := "null"
		if u.Seen.Valid {
			seen = fmt.Sprint(u.Seen.Time.Unix())
		}
		got[u.ID] = fmt.Sprintf("%s|%d|%s|%s|%s", u.Name, u.Age, plan, tags, seen)
	}
	if !maps.Equal(got, want) {
		n := 0
		var diff []string
		for k, w := range want {
			if g, ok := got[k]; !ok || g != w {
				n++
				if len(diff) < 3 {
					diff = append(diff, fmt.Sprintf("%d: cache %q, table %q", k, g, w))
				}
			}
		}
		// Rows only the cache holds (a delete it missed) are named too.
		extra := 0
		for k, g := range got {
			if _, ok := want[k]; !ok {
				extra++
				if len(diff) < 6 {
					diff = append(diff, fmt.Sprintf("%d: cache %q, not in the table", k, g))
				}
			}
		}
		return fmt.Errorf("cache (%d rows) differs from the table (%d rows) on %d of its rows and holds %d rows the table lacks, e.g. %s", len(got), len(want), n, extra, strings.Join(diff, "; "))
	}
	return nil
}

// appWriter runs the application's writes (updates, inserts, deletes of
// columns no migration touches) until stopped, and counts the ones the
// server refused.
type appWriter struct {
	failed  atomic.Int64
	lastErr atomic.Value
	stop    func()
}

func startWriter(t *testing.T, pg *harness.Postgres, table string) *appWriter {
	w := &appWriter{}
	conn := pg.Conn(t)
	// Stopping must not cancel a statement under way: a cancelled Exec
	// returns at once while the server may still commit it, after the
	// position the test compares at (a row the cache rightly lacks).
	var stopping atomic.Bool
	var done sync.WaitGroup
	done.Go(func() {
		for i := 0; !stopping.Load(); i++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			var err error
			switch k := int64(i%50 + 1); i % 3 {
			case 0:
				_, err = conn.Exec(ctx, `UPDATE `+table+` SET age = age % 90 + 1 WHERE id = $1`, k)
			case 1:
				_, err = conn.Exec(ctx, `INSERT INTO `+table+` (id, plan) VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET age = 7`, 1000+k)
			case 2:
				_, err = conn.Exec(ctx, `DELETE FROM `+table+` WHERE id = $1`, 1000+k-1)
			}
			cancel()
			if err != nil && !strings.Contains(err.Error(), "does not exist") {
				w.failed.Add(1)
				w.lastErr.Store(err)
			}
			time.Sleep(2 * time.Millisecond) // a paced application, not a benchmark
		}
	})
	w.stop = func() { stopping.Store(true); done.Wait() }
	t.Cleanup(w.stop)
	return w
}

// migration is one DDL of the matrix and what it must end in: the cache
// equal to the table, or a *SchemaChangeError stopping the informer.
type migration struct {
	name, ddl string
	fails     bool // a typed permanent error, not a relist
	// decodable: the changes after the DDL still decode (a nullability
	// change with no NULL written yet): the informer may apply them
	// before the catalog check stops it.
	decodable bool
}

var migrations = []migration{
	{name: "add unmapped column", ddl: `ALTER TABLE {t} ADD COLUMN extra text DEFAULT 'e'`},
	{name: "drop unmapped column", ddl: `ALTER TABLE {t} DROP COLUMN spare`},
	{name: "widen int4 to int8", ddl: `ALTER TABLE {t} ALTER COLUMN age TYPE int8`},
	{name: "retype with USING (rewrite)", ddl: `ALTER TABLE {t} ALTER COLUMN name TYPE varchar(320) USING lower(name)`},
	{name: "set not null", ddl: `UPDATE {t} SET plan = 0 WHERE plan IS NULL; ALTER TABLE {t} ALTER COLUMN plan SET NOT NULL`},
	{name: "replica identity full", ddl: `ALTER TABLE {t} REPLICA IDENTITY FULL`},
	{name: "vacuum full", ddl: `VACUUM FULL {t}`},
	{name: "truncate", ddl: `TRUNCATE {t}`},
	{name: "rename table", ddl: `ALTER TABLE {t} RENAME TO renamed_{t}`},
	{name: "drop mapped column", ddl: `ALTER TABLE {t} DROP COLUMN plan`, fails: true},
	{name: "rename mapped column", ddl: `ALTER TABLE {t} RENAME COLUMN name TO full_name`, fails: true},
	{name: "drop not null of a non-pointer field", ddl: `ALTER TABLE {t} ALTER COLUMN age DROP NOT NULL`, fails: true, decodable: true},
	{name: "drop and create", ddl: `DROP TABLE {t}; CREATE TABLE {t} (id bigint PRIMARY KEY, name text NOT NULL DEFAULT 'new', age int4 NOT NULL DEFAULT 1, plan numeric, tags text[], seen timestamptz, spare text)`, fails: true},
	{name: "leave the publication", ddl: `ALTER PUBLICATION {pub} DROP TABLE {t}`, fails: true},
}

// TestMigrationMatrix: each migration of issue 36 applied while the
// application writes, on a temporary and on a permanent slot with the
// Source's defaults: the application's writes never fail, and each case
// ends with the cache equal to the table at one LSN (after a relist where
// the schema changed under T) or with the informer stopped by a
// *SchemaChangeError naming the table and the change, whose version the
// informer never passed.
func TestMigrationMatrix(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := pg.Conn(t)
	for _, permanent := range []bool{false, true} {
		for i, m := range migrations {
			table := fmt.Sprintf("users_%d_%t", i, permanent)
			t.Run(fmt.Sprintf("%s/permanent=%t", m.name, permanent), func(t *testing.T) {
				userTable(t, pg, table, 200)
				opts := pginformer.Options{}
				if permanent {
					opts = pginformer.Options{PermanentSlot: true, Slot: "mig_" + fmt.Sprint(i)}
					t.Cleanup(func() {
						pg.Exec(t, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'mig_"+fmt.Sprint(i)+"' AND NOT active")
					})
				}
				src := newSource(t, pg, opts)
				tbl := newTable[user](t, src, table)
				inf, errs := informertest.Run[user](t, tbl, core.InformerOptions[user]{})
				app := startWriter(t, pg, table)
				informertest.WaitFor(t, inf, currentLSN(t, conn))
				pg.Exec(t, strings.NewReplacer("{t}", table, "{pub}", pgx.Identifier{src.PublicationName()}.Sanitize()).Replace(m.ddl))
				ddlAt := currentLSN(t, conn)
				if m.fails {
					err := errs.Wait(t, "a *SchemaChangeError", func(err error) bool {
						var sc *pginformer.SchemaChangeError
						return errors.As(err, &sc) && sc.Action == pginformer.SchemaFail
					})
					var sc *pginformer.SchemaChangeError
					errors.As(err, &sc)
					if !errors.Is(err, driver.ErrPermanent) || !strings.Contains(sc.Table, table) || sc.Change == "" {
						t.Errorf("error %v: want a permanent SchemaChangeError naming table %s and the change", err, table)
					}
					if last := tbl.LastSchemaChange(); last == nil {
						t.Errorf("LastSchemaChange is nil after %v", err)
					}
					if applied := inf.AppliedVersion(); applied >= ddlAt && !m.decodable {
						t.Errorf("the informer applied up to %d, past the migration at %d that stopped its table's stream", applied, ddlAt)
					}
				} else {
					informertest.WaitFor(t, inf, currentLSN(t, conn))
					app.stop()
					at := currentLSN(t, conn)
					informertest.WaitFor(t, inf, at)
					name := table
					if strings.HasPrefix(m.name, "rename table") {
						name = "renamed_" + table
					}
					if err := usersMatch(t, conn, name, inf); err != nil {
						t.Errorf("at %d: %v", at, err)
					}
				}
				app.stop()
				if n := app.failed.Load(); n > 0 {
					t.Errorf("%d of the application's writes failed, e.g. %v", n, app.lastErr.Load())
				}
			})
		}
	}
}

// TestWarmRestartOverChangedSchema: a checkpoint carries the table's shape
// (Table.Codec's Schema). A warm start after the table's schema changed
// while no informer ran (a mapped column retyped, which rewrites every
// value) does not restore the checkpoint's cache: the informer reports the
// checkpoint unusable, naming the shapes, lists the table, and its cache
// equals the table.
func TestWarmRestartOverChangedSchema(t *testing.T) {
	pg := harness.StartPostgres(t)
	table := fmt.Sprintf("warm_%d", seqNo())
	ident := pgx.Identifier{table}.Sanitize()
	pg.Exec(t, "CREATE TABLE "+ident+" (id bigint PRIMARY KEY, v int4 NOT NULL, note text NOT NULL); ALTER TABLE "+ident+" REPLICA IDENTITY FULL")
	conn := pg.Conn(t)
	write(t, conn, "INSERT INTO "+ident+" SELECT g, 1, 'n' || g FROM generate_series(1, 50) g")
	dir := t.TempDir()
	inf1, _, _, stop1 := runWarm(t, pg, table, dir, nil)
	waitFor(t, inf1, write(t, conn, "UPDATE "+ident+" SET v = 2 WHERE id <= 5"))
	stop1()

	pg.Exec(t, "ALTER TABLE "+ident+" ALTER COLUMN v TYPE int8 USING v * 10")
	inf2, spy2, errs2, _ := runWarm(t, pg, table, dir, nil)
	waitFor(t, inf2, currentLSN(t, conn))
	vrowCacheMatches(t, conn, table, inf2)
	if spy2.Lists() != 1 {
		t.Errorf("warm start over a changed schema listed %d times, want 1 (errors: %v)", spy2.Lists(), errs2.All())
	}
	var ce *core.CheckpointError
	if err := errs2.Find(func(err error) bool { return errors.As(err, &ce) }); err == nil || !strings.Contains(err.Error(), "pg relation") {
		t.Errorf("errors %v: want a CheckpointError naming the table's shapes", errs2.All())
	}
}

// TestDefaultsNeverRefuseTheApplication: with the Source's defaults (no
// column list, no row filter in the publication) the application's
// ordinary migrations and writes all succeed while the Source runs:
// ALTER COLUMN ... TYPE of a mapped column, REPLICA IDENTITY FULL, DROP
// COLUMN of a mapped column, and UPDATEs and DELETEs after each (with a
// column list, Postgres refuses the first and the third, and every UPDATE
// and DELETE after the second). The informer relists after the retype and
// stops with a *SchemaChangeError at the dropped column.
func TestDefaultsNeverRefuseTheApplication(t *testing.T) {
	pg := harness.StartPostgres(t)
	userTable(t, pg, "app", 100)
	src := newSource(t, pg, pginformer.Options{})
	tbl := newTable[user](t, src, "app")
	inf, errs := informertest.Run[user](t, tbl, core.InformerOptions[user]{})
	conn := pg.Conn(t)
	for _, sql := range []string{
		`ALTER TABLE app ALTER COLUMN age TYPE int8`,
		`UPDATE app SET age = age + 1 WHERE id <= 10`,
		`DELETE FROM app WHERE id = 11`,
		`ALTER TABLE app REPLICA IDENTITY FULL`,
		`UPDATE app SET name = 'full' WHERE id <= 20`,
		`DELETE FROM app WHERE id = 21`,
	} {
		pg.Exec(t, sql)
	}
	informertest.WaitFor(t, inf, currentLSN(t, conn))
	if err := usersMatch(t, conn, "app", inf); err != nil {
		t.Error(err)
	}
	for _, sql := range []string{
		`ALTER TABLE app DROP COLUMN plan`,
		`UPDATE app SET age = 1 WHERE id <= 30`,
		`DELETE FROM app WHERE id = 31`,
	} {
		pg.Exec(t, sql)
	}
	err := errs.Wait(t, "a *SchemaChangeError for the dropped column", func(err error) bool {
		var sc *pginformer.SchemaChangeError
		return errors.As(err, &sc) && sc.Column == "plan"
	})
	if !errors.Is(err, driver.ErrPermanent) {
		t.Errorf("dropped mapped column: %v, want a permanent error", err)
	}
	if n := tbl.SchemaChanges(); n != 2 {
		t.Errorf("SchemaChanges = %d, want 2 (the retype, the drop)", n)
	}
}
