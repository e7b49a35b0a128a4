package prommetrics

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
)

// An audit run shows as dbinformer_informer_audit_runs_total by result, and
// the last run's divergent keys by kind stay until a run finds the cache
// equal; a failed run leaves them alone.
func TestAuditMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm, err := New(reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := memory.New[string](memory.Options{})
	src.Put("a", "1")
	src.Put("b", "2")
	lossy := informertest.NewLossy[string](src, informertest.LossyOptions[string]{})
	inf, _ := informertest.Run[string](t, lossy, core.InformerOptions[string]{
		Name:    "things",
		Metrics: pm,
		Audit:   &core.AuditOptions[string]{Period: time.Hour, Heal: core.HealReportOnly},
	})
	ctx := context.Background()
	lossy.Arm(informertest.LossDrop)
	rv, _ := src.Delete("a")
	if err := inf.WaitFor(ctx, rv); err != nil {
		t.Fatal(err)
	}
	if r := inf.AuditNow(ctx); r.Extra != 1 || r.Healed != 0 {
		t.Fatalf("report-only audit after a dropped delete: %v", r)
	}
	want(t, reg, "dbinformer_informer_audit_runs_total", map[string]string{"informer": "things", "result": "divergent"}, 1)
	want(t, reg, "dbinformer_informer_audit_divergent_keys", map[string]string{"informer": "things", "kind": "extra"}, 1)
	want(t, reg, "dbinformer_informer_audit_divergent_keys", map[string]string{"informer": "things", "kind": "missing"}, 0)
	want(t, reg, "dbinformer_informer_audit_rows", map[string]string{"informer": "things"}, 1)
	want(t, reg, "dbinformer_informer_audit_resource_version", map[string]string{"informer": "things"}, float64(rv))
	if _, ok := sample(t, reg, "dbinformer_informer_audit_duration_seconds", map[string]string{"informer": "things"}); !ok {
		t.Error("no dbinformer_informer_audit_duration_seconds")
	}

	// Report only: the next run finds the same key; then a run that
	// cannot read (ctx done) is counted as failed and changes nothing else.
	inf.AuditNow(ctx)
	want(t, reg, "dbinformer_informer_audit_runs_total", map[string]string{"informer": "things", "result": "divergent"}, 2)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if r := inf.AuditNow(cctx); r.Outcome != core.AuditFailed {
		t.Fatalf("audit with its context done: %v", r)
	}
	want(t, reg, "dbinformer_informer_audit_runs_total", map[string]string{"informer": "things", "result": "failed"}, 1)
	want(t, reg, "dbinformer_informer_audit_divergent_keys", map[string]string{"informer": "things", "kind": "extra"}, 1)
}
