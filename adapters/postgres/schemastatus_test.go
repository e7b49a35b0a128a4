package pginformer_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	prommetrics "github.com/dbinformer/dbinformer/metrics/prometheus"
	"github.com/dbinformer/dbinformer/statuspage"
)

// schemaChangesMetric reads dbinformer_informer_schema_changes_total for
// informer and action.
func schemaChangesMetric(t *testing.T, reg *prometheus.Registry, informer, action string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "dbinformer_informer_schema_changes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["informer"] == informer && labels["action"] == action {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A schema change that relists, then one that stops the informer: each
// shows in SyncStatus, on the status page (what was done, the change in
// one line) and as dbinformer_informer_schema_changes_total{action}.
func TestSchemaChangeShown(t *testing.T) {
	pg := harness.StartPostgres(t)
	conn := pg.Conn(t)
	userTable(t, pg, "shown", 20)
	src := newSource(t, pg, pginformer.Options{PermanentSlot: true, Slot: "shown"})
	tbl := newTable[user](t, src, "shown")
	page := statuspage.New(statuspage.Options{})
	reg := prometheus.NewRegistry()
	pm, err := prommetrics.New(reg, prommetrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inf, errs := informertest.Run[user](t, tbl, core.InformerOptions[user]{Name: "users", Metrics: core.MultiMetrics(page, pm)})
	page.Add(inf)
	if sc := inf.SyncStatus().SchemaChanges; sc != nil {
		t.Fatalf("schema changes before any: %+v", sc)
	}

	pg.Exec(t, `ALTER TABLE shown ALTER COLUMN age TYPE int8`) // still an int64: relisted
	informertest.WaitFor(t, inf, currentLSN(t, conn))
	sc := inf.SyncStatus().SchemaChanges
	if sc == nil || sc.Count != 1 || sc.Last.SchemaAction() != "relist" || !strings.Contains(sc.Last.Error(), `"age"`) {
		t.Fatalf("SyncStatus.SchemaChanges after a widening: %+v", sc)
	}
	ps := page.Snapshot(context.Background())
	if len(ps.Informers) != 1 || ps.Informers[0].SchemaChanges == nil || ps.Informers[0].SchemaChanges.Action != "relist" || ps.Informers[0].SchemaChanges.Count != 1 {
		t.Fatalf("the page's schema changes after a widening: %+v", ps.Informers)
	}
	if n := schemaChangesMetric(t, reg, "users", "relist"); n != 1 {
		t.Errorf("schema_changes_total{action=relist} = %v, want 1", n)
	}

	pg.Exec(t, `ALTER TABLE shown DROP COLUMN plan`) // mapped: the informer stops
	errs.Wait(t, "the informer to stop on the dropped column", func(err error) bool {
		var e *pginformer.SchemaChangeError
		return errors.As(err, &e) && e.Action == pginformer.SchemaFail
	})
	informertest.Eventually(t, "SyncStatus to show the failing change", func() bool {
		sc := inf.SyncStatus().SchemaChanges
		return sc != nil && sc.Count == 2 && sc.Last.SchemaAction() == "fail"
	})
	s := page.Snapshot(context.Background()).Informers[0].SchemaChanges
	if s == nil || s.Action != "fail" || !strings.Contains(s.Last, `"plan"`) {
		t.Fatalf("the page's schema changes after a dropped column: %+v", s)
	}
	rec := httptest.NewRecorder()
	page.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/informers/", nil))
	if html := rec.Body.String(); !strings.Contains(html, "Schema changes") || !strings.Contains(html, `column &#34;plan&#34;`) {
		t.Errorf("the page's HTML does not show the schema change:\n%s", html)
	}
	if n := schemaChangesMetric(t, reg, "users", "fail"); n != 1 {
		t.Errorf("schema_changes_total{action=fail} = %v, want 1", n)
	}
}
