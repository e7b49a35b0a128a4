package pginformer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
)

var pgCaps = conformance.Capabilities{DistinguishesUpdate: true, Timeout: time.Minute}

// The audit finds and heals every lie an informertest.Lossy tells, and
// reports no difference while writers race it, on a real Postgres; every
// audit leaves no slot behind.
func TestAuditConformance(t *testing.T) {
	pg := harness.StartPostgres(t)
	var h *pgtest.Harness
	conformance.RunAudit(t, pgCaps, func(t *testing.T) conformance.Harness[pgtest.Row] {
		h = pgtest.New(t, pg, pgtest.Options{})
		return h
	})
	onlyTheSourcesSlot(t, pg.Conn(t), h.Source())
}

// filteredTable is a pgtest table synced through TableOptions.Where: the
// key prefix goes into the snapshot query (REPLICA IDENTITY FULL), the
// even versions are checked on each decoded row.
type filteredTable struct{ *pgtest.Harness }

func (filteredTable) Matches(key string, n int64) bool {
	return strings.HasPrefix(key, "in.") && n%2 == 0
}

// A partial sync audits only what its filter selects: rows outside it
// (by the pushed-down prefix or by the residue) do not count as missing.
func TestAuditFiltered(t *testing.T) {
	pg := harness.StartPostgres(t)
	conformance.RunAudit(t, pgCaps, func(t *testing.T) conformance.Harness[pgtest.Row] {
		f := filter.MustNew[pgtest.Row](filter.And(
			filter.Prefix("k", "in."),
			filter.Where("even version", func(r pgtest.Row) bool { return r.V%2 == 0 }),
		))
		return filteredTable{pgtest.New(t, pg, pgtest.Options{Full: true, Where: f})}
	})
}

// onlyTheSourcesSlot fails t unless src's slot is the only replication
// slot of the server: no audit (or helper) slot outlived its read.
func onlyTheSourcesSlot(t *testing.T, conn *pgx.Conn, src *pginformer.Source) {
	t.Helper()
	rows, _ := conn.Query(ctxFor(t), "SELECT slot_name FROM pg_replication_slots ORDER BY slot_name")
	slots, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(slots, []string{src.SlotName()}) {
		t.Errorf("replication slots after the audits: %q, want only the source's %q", slots, src.SlotName())
	}
}

type shapedRow struct {
	ID     int64          `db:"id"`
	Region string         `db:"region"`
	V      int64          `db:"v"`
	Tags   []*string      `db:"tags"`
	Doc    map[string]any `db:"doc"`
	Amount string         `db:"amount"`
	When   *time.Time     `db:"at"`
}

// TestAuditShapes: a partitioned table (rows in two partitions, one row
// moving between them) with a generated column, an omitted column, arrays
// with NULL elements, jsonb, numeric and nullable timestamps, audited
// while a writer changes it: every audit is equal (the audit lists what
// List lists, nothing the cache cannot hold), then a dropped change and
// an altered one are found, healed, and the next audit is equal.
func TestAuditShapes(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE shapes (id bigint NOT NULL, region text NOT NULL, v bigint NOT NULL,
			tags text[], doc jsonb NOT NULL, amount numeric NOT NULL, at timestamptz,
			secret text, twice bigint GENERATED ALWAYS AS (v * 2) STORED,
			PRIMARY KEY (id, region)) PARTITION BY LIST (region);
		CREATE TABLE shapes_eu PARTITION OF shapes FOR VALUES IN ('eu');
		CREATE TABLE shapes_us PARTITION OF shapes FOR VALUES IN ('us');
		INSERT INTO shapes (id, region, v, tags, doc, amount, at, secret)
			SELECT i, CASE WHEN i % 2 = 0 THEN 'eu' ELSE 'us' END, 1, ARRAY['a', NULL, 'c'],
				jsonb_build_object('i', i, 'n', NULL), i * 1.5, CASE WHEN i % 3 = 0 THEN NULL ELSE now() END, 'x'
			FROM generate_series(1, 300) i`)
	conn := pg.Conn(t)
	ctx := ctxFor(t)
	src := newSource(t, pg, pginformer.Options{})
	tbl, err := pginformer.NewTable[shapedRow](ctx, src, "shapes", pginformer.TableOptions[shapedRow]{Omit: []string{"secret"}})
	if err != nil {
		t.Fatal(err)
	}
	lossy := informertest.NewLossy[shapedRow](tbl, informertest.LossyOptions[shapedRow]{})
	inf, _ := informertest.Run[shapedRow](t, lossy, core.InformerOptions[shapedRow]{
		Audit: &core.AuditOptions[shapedRow]{Period: time.Hour, Pace: -1},
	})

	// A writer changes rows (one moves between partitions) while audits
	// run: no false positive.
	wconn := pg.Conn(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := 1 + i%300
			sql := `UPDATE shapes SET v = v + 1, doc = jsonb_set(doc, '{v}', to_jsonb(v + 1)), amount = amount + 0.25 WHERE id = $1`
			if i%10 == 9 {
				sql = `UPDATE shapes SET region = CASE WHEN region = 'eu' THEN 'us' ELSE 'eu' END WHERE id = $1`
			}
			if _, err := wconn.Exec(ctx, sql, id); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
		}
	})
	for range 3 {
		r := inf.AuditNow(ctx)
		if r.Outcome != core.AuditEqual || r.Rows < 300 {
			t.Errorf("audit under a writer: %v, want equal over at least 300 rows", r)
		}
	}
	close(stop)
	wg.Wait()

	// Two lies: an update dropped, another altered.
	lossy.Arm(informertest.LossDrop)
	write(t, conn, `UPDATE shapes SET v = 1000 WHERE id = 7`)
	lossy.Arm(informertest.LossAlter)
	informertest.WaitFor(t, inf, write(t, conn, `UPDATE shapes SET amount = 99.5 WHERE id = 8`))
	if got := lossy.Losses(); len(got) != 2 {
		t.Fatalf("losses %v, want 2", got)
	}
	r := inf.AuditNow(ctx)
	if r.Outcome != core.AuditDivergent || r.Divergent() < 2 || r.Healed != r.Divergent() {
		t.Fatalf("audit after two lies (%v): %v, want both found and healed", lossy.Losses(), r)
	}
	if o, _ := inf.Lister().Get("7/us"); o.V != 1000 {
		t.Errorf("row 7 after healing: %+v, want v = 1000", o)
	}
	if o, _ := inf.Lister().Get("8/eu"); o.Amount != "99.5" {
		t.Errorf("row 8 after healing: %+v, want amount 99.5", o)
	}
	if r := inf.AuditNow(ctx); r.Outcome != core.AuditEqual {
		t.Errorf("audit after healing: %v, want equal", r)
	}
	onlyTheSourcesSlot(t, conn, src)
}

// TestAuditListEnds: an AuditList whose sink blocks until its context is
// cancelled, whose sink fails, and whose reader's connection is killed
// mid-read (the snapshot goes with it: driver.ErrExpired) each returns and
// leaves no slot behind; the Table's watch goes on meanwhile.
func TestAuditListEnds(t *testing.T) {
	pg := harness.StartPostgres(t)
	h := pgtest.New(t, pg, pgtest.Options{})
	ctx := ctxFor(t)
	conn := pg.Conn(t)
	// Enough rows that the COPY outlasts the socket's buffers.
	write(t, conn, fmt.Sprintf(`INSERT INTO %s SELECT 'k' || i, i FROM generate_series(1, 200000) i`, pgx.Identifier{h.TableName()}.Sanitize()))
	inf, _ := informertest.Run[pgtest.Row](t, h.Table(), core.InformerOptions[pgtest.Row]{})

	t.Run("cancelled", func(t *testing.T) {
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		_, err := h.Table().AuditList(actx, 0, driver.ListSink[pgtest.Row]{Emit: func(driver.Event[pgtest.Row]) error {
			cancel()
			<-actx.Done()
			return actx.Err()
		}})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("AuditList with its context cancelled: %v, want context.Canceled", err)
		}
		onlyTheSourcesSlot(t, conn, h.Source())
	})
	t.Run("sink fails", func(t *testing.T) {
		boom := errors.New("boom")
		_, err := h.Table().AuditList(ctx, 0, driver.ListSink[pgtest.Row]{Emit: func(driver.Event[pgtest.Row]) error { return boom }})
		if !errors.Is(err, boom) || errors.Is(err, driver.ErrExpired) {
			t.Errorf("AuditList with a failing sink: %v, want the sink's error as it is", err)
		}
		onlyTheSourcesSlot(t, conn, h.Source())
	})
	t.Run("snapshot lost", func(t *testing.T) {
		killed := false
		rows := 0
		_, err := h.Table().AuditList(ctx, 0, driver.ListSink[pgtest.Row]{Emit: func(driver.Event[pgtest.Row]) error {
			rows++
			if !killed {
				killed = true
				var n int
				if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE query LIKE 'COPY (SELECT%' AND pid <> pg_backend_pid()`).Scan(&n); err != nil || n != 1 {
					t.Errorf("terminate the audit's reader: %d backends, %v", n, err)
				}
			}
			return nil
		}})
		if !errors.Is(err, driver.ErrExpired) {
			t.Errorf("AuditList whose reader was killed after %d rows: %v, want an error matching core.ErrExpired", rows, err)
		}
		onlyTheSourcesSlot(t, conn, h.Source())
	})
	// The watch was not disturbed: a write after all that arrives.
	rv, n := write(t, conn, fmt.Sprintf(`UPDATE %s SET v = -1 WHERE k = 'k1'`, pgx.Identifier{h.TableName()}.Sanitize())), int64(-1)
	informertest.WaitFor(t, inf, rv)
	if o, _ := inf.Lister().Get("k1"); o.V != n {
		t.Errorf("k1 after the audits: %+v, want v = %d", o, n)
	}
	if r := inf.AuditNow(ctx); r.Outcome != core.AuditEqual || r.Rows != 200000 {
		t.Errorf("audit after the failed ones: %v, want equal over 200000 rows", r)
	}
	onlyTheSourcesSlot(t, conn, h.Source())
}

// TestAuditUndecodable: a row that does not decode (an empty key) is
// emitted with Err by AuditList whether or not the Table skips such rows,
// and does not count in Table.Skipped; the audit of a skipping Table's
// informer is equal, the row counted as undecodable.
func TestAuditUndecodable(t *testing.T) {
	pg := harness.StartPostgres(t)
	pg.Exec(t, `CREATE TABLE eka (k text PRIMARY KEY, v text NOT NULL); INSERT INTO eka VALUES ('', 'empty'), ('a', 'x'), ('b', 'y')`)
	ctx := ctxFor(t)
	src := newSource(t, pg, pginformer.Options{})
	strict := newTable[keyRow](t, src, "eka")
	skip, err := pginformer.NewTable[keyRow](ctx, src, "eka", pginformer.TableOptions[keyRow]{SkipUndecodable: true})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run[keyRow](t, skip, core.InformerOptions[keyRow]{})
	skipped := skip.Skipped()
	var bad []error
	good := 0
	if _, err := strict.AuditList(ctx, 0, driver.ListSink[keyRow]{Emit: func(ev driver.Event[keyRow]) error {
		if ev.Err != nil {
			bad = append(bad, ev.Err)
		} else {
			good++
		}
		return nil
	}}); err != nil || good != 2 || len(bad) != 1 {
		t.Errorf("AuditList of a strict Table: %v, %d good, %v bad; want 2 good and 1 with Err", err, good, bad)
	}
	if r := inf.AuditNow(ctx); r.Outcome != core.AuditEqual || r.Undecodable != 1 || r.Rows != 3 {
		t.Errorf("audit of a skipping Table: %v (undecodable %d), want equal over 3 rows, 1 undecodable", r, r.Undecodable)
	}
	if n := skip.Skipped(); n != skipped {
		t.Errorf("Skipped went from %d to %d over the audit; the audit skips nothing of the sync's", skipped, n)
	}
}
