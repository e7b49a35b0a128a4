package controller_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
)

// TestReadyReflectsAudits: a Manager's readiness includes the informers'
// audits. A divergence the audit only reports (HealReportOnly) makes the
// replica not ready, naming the informer and the key; the same divergence
// healed (HealKeys) leaves it ready, with the cache equal to etcd again.
func TestReadyReflectsAudits(t *testing.T) {
	_, cli := startEtcd(t)
	for k := range 4 {
		put(t, cli, keyName(k), Item{Spec: 1})
	}
	for i, tc := range []struct {
		heal      core.HealPolicy
		wantReady bool
	}{{core.HealReportOnly, false}, {core.HealKeys, true}} {
		key, spec := keyName(i), 10+i // each case drops an update the cache would otherwise see
		t.Run(tc.heal.String(), func(t *testing.T) {
			ctx := testCtx(t)
			lw, err := etcdinformer.NewPrefix(ctx, cli, prefix, etcdinformer.Options[Item]{})
			if err != nil {
				t.Fatal(err)
			}
			lossy := informertest.NewLossy[Item](lw, informertest.LossyOptions[Item]{})
			mgr := controller.NewManager(controller.ManagerOptions{Name: "audited"})
			inf := controller.Informer(mgr, "items-"+tc.heal.String(), driver.ListerWatcher[Item](lossy), core.InformerOptions[Item]{
				Audit: &core.AuditOptions[Item]{Period: time.Hour, Heal: tc.heal}, // runs only when asked
			})
			if _, err := controller.For(mgr, inf, controller.Func[string](func(context.Context, string) (controller.Result, error) {
				return controller.Result{}, nil
			}), controller.Options[string]{}); err != nil {
				t.Fatal(err)
			}
			run(t, mgr.Run)
			eventually(t, "ready", func() bool { return mgr.Ready(ctx) == nil })

			lossy.Arm(informertest.LossDrop) // the cache never hears of this update
			rv := put(t, cli, key, Item{Spec: spec})
			if err := inf.WaitFor(ctx, core.ResourceVersion(rv)); err != nil {
				t.Fatal(err)
			}
			if got, _ := inf.Lister().Get(key); got.Spec != 1 {
				t.Fatalf("the lossy source delivered the update (spec %d): the test proves nothing", got.Spec)
			}
			res := inf.AuditNow(ctx)
			if res.Outcome != core.AuditDivergent || res.Differing != 1 {
				t.Fatalf("audit: %s, want 1 differing", res)
			}
			err = mgr.Ready(ctx)
			if tc.wantReady {
				if err != nil {
					t.Fatalf("ready after a healed divergence: %v", err)
				}
				if got, _ := inf.Lister().Get(key); got.Spec != spec {
					t.Errorf("healed cache holds spec %d, etcd %d", got.Spec, spec)
				}
				return
			}
			if err == nil || errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "not healed") {
				t.Fatalf("not ready expected, naming %s: %v", key, err)
			}
		})
	}
}
