package kubeinformer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// withoutHeal hides the Resource's driver.HealWaiter (and forwards the rest).
type withoutHeal struct {
	r *kubeinformer.Resource[*corev1.ConfigMap]
}

func (w withoutHeal) List(ctx context.Context, sink driver.ListSink[*corev1.ConfigMap]) (core.ResourceVersion, error) {
	return w.r.List(ctx, sink)
}

func (w withoutHeal) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[*corev1.ConfigMap]) error {
	return w.r.Watch(ctx, from, opts)
}

func (w withoutHeal) Head(ctx context.Context) (core.ResourceVersion, error) {
	return w.r.Head(ctx)
}

func (w withoutHeal) ReportsProgress() bool { return true }

// BenchmarkRecoveryAfterRestart measures how long after a restarted
// apiserver is ready an informer takes to see a write made at that moment,
// once the outage lasted long enough for client-go's backoff
// (core.ClientGoBackoff: 800ms doubling to 30s) to be sleeping 12.8s or
// more: "heal" runs over a Resource, whose probes (driver.HealWaiter) cut
// the sleep short, "sleep" over a Resource with WaitHealed hidden, side by side
// through the same outage. One iteration takes about a minute:
//
//	go test -run '^$' -bench RecoveryAfterRestart -benchtime 1x ./kubeadapter/
func BenchmarkRecoveryAfterRestart(b *testing.B) {
	kube := harness.StartKube(b)
	h := kubetest.NewConfigMaps(b, kube, kubetest.Options{})
	direct, err := kubernetes.NewForConfig(kube.Config())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	newResource := func() *kubeinformer.Resource[*corev1.ConfigMap] {
		r, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, direct.CoreV1().ConfigMaps(h.Namespace()), kubeinformer.Options{Namespace: h.Namespace(), Logger: debugLogger(b)})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	opts := core.InformerOptions[*corev1.ConfigMap]{Backoff: core.ClientGoBackoff, Logger: testLogger(b),
		ErrorHandler: func(err error) { b.Logf("%s: %v", time.Now().Format("15:04:05.000"), err) }}
	healing, _ := informertest.Run(b, driver.ListerWatcher[*corev1.ConfigMap](newResource()), opts)
	sleeping, sleepErrs := informertest.Run(b, driver.ListerWatcher[*corev1.ConfigMap](withoutHeal{newResource()}), opts)
	var healTotal, sleepTotal time.Duration
	b.ResetTimer()
	for i := range b.N {
		kube.Stop()
		// Five failures in a row: the next sleep is 12.8s to 25.6s.
		failed := sleepErrs.Len()
		informertest.Eventually(b, "five failed attempts", func() bool { return sleepErrs.Len() >= failed+5 })
		kube.Restart(b)
		ready := time.Now()
		b.Logf("%s: the apiserver is ready again", ready.Format("15:04:05.000"))
		cm, err := kubetest.PutConfigMap(ctx, h.Direct(), h.Namespace(), "after-restart", int64(i), nil)
		if err != nil {
			b.Fatal(err)
		}
		rv := rv(b, cm.ResourceVersion)
		var wg sync.WaitGroup
		for _, c := range []struct {
			name  string
			inf   *core.SharedIndexInformer[*corev1.ConfigMap]
			total *time.Duration
		}{{"heal", healing, &healTotal}, {"sleep", sleeping, &sleepTotal}} {
			wg.Go(func() {
				wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				if err := c.inf.WaitFor(wctx, rv); err != nil {
					b.Error(err)
				}
				*c.total += time.Since(ready)
				b.Logf("%s: %s caught up", time.Now().Format("15:04:05.000"), c.name)
			})
		}
		wg.Wait()
	}
	b.ReportMetric(healTotal.Seconds()/float64(b.N), "s-heal/op")
	b.ReportMetric(sleepTotal.Seconds()/float64(b.N), "s-sleep/op")
}
