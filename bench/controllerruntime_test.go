package bench_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	crbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
)

// BenchmarkControllerKube: the same ConfigMaps of a real kube-apiserver
// (5,000 in one namespace) reconciled from a cold start by package
// controller over kubeadapter and by controller-runtime, in one process:
// each side's manager starts its cache (list, then watch) and a
// controller with 4 workers whose reconcile reads the object from the
// cache and counts; timed is the start until every object has been
// reconciled. Construction (clients, discovery) is untimed on both sides.
func BenchmarkControllerKube(b *testing.B) {
	objects := size(5_000, 200)
	rounds := size(5, 1)
	const ns, workers = "bench", 4
	k := harness.StartKube(b)
	// One transport for both sides, closed at the end: client-go's own
	// transport cache would keep idle connections (and their goroutines)
	// for the life of the process.
	base := k.Config()
	tr, err := rest.TransportFor(base)
	if err != nil {
		b.Fatal(err)
	}
	defer closeIdle(tr)
	cfg := rest.CopyConfig(base)
	cfg.Transport, cfg.TLSClientConfig = tr, rest.TLSClientConfig{}
	cfg.BearerToken, cfg.QPS, cfg.Burst = "", -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < objects; i += 8 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i), Labels: map[string]string{"app": "bench"}},
					Data: map[string]string{"greeting": "hello", "index": fmt.Sprint(i)}}
				if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	crlog.SetLogger(logr.Discard())

	var (
		n      atomic.Int64
		done   chan struct{}
		cancel context.CancelFunc
		ran    sync.WaitGroup
		start  func(ctx context.Context) error
	)
	count := func() {
		if n.Add(1) == int64(objects) {
			close(done)
		}
	}
	reset := func() {
		n.Store(0)
		done = make(chan struct{})
	}
	run := func() {
		var rctx context.Context
		rctx, cancel = context.WithCancel(context.Background())
		ran.Go(func() { _ = start(rctx) })
		<-done
	}
	finish := func() { cancel(); ran.Wait() }
	ours := side{name: "ours", n: objects, unit: "reconcile", run: run, finish: finish,
		prepare: func() {
			reset()
			m := controller.NewManager(controller.ManagerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			src, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, cs.CoreV1().ConfigMaps(ns), kubeinformer.Options{Namespace: ns})
			if err != nil {
				b.Fatal(err)
			}
			inf := controller.Informer(m, "configmaps", src, core.InformerOptions[*corev1.ConfigMap]{})
			if _, err := controller.For(m, inf, controller.Func[string](func(_ context.Context, key string) (controller.Result, error) {
				if _, ok := inf.Lister().Get(key); ok {
					count()
				}
				return controller.Result{}, nil
			}), controller.Options[string]{Workers: workers}); err != nil {
				b.Fatal(err)
			}
			start = m.Run
		}}
	skip := true
	cr := side{name: "controllerruntime", n: objects, unit: "reconcile", run: run, finish: finish,
		prepare: func() {
			reset()
			m, err := crmanager.New(cfg, crmanager.Options{
				Cache:                  crcache.Options{DefaultNamespaces: map[string]crcache.Config{ns: {}}},
				Metrics:                crmetrics.Options{BindAddress: "0"},
				HealthProbeBindAddress: "0",
				Controller:             crconfig.Controller{SkipNameValidation: &skip},
				Logger:                 logr.Discard(),
			})
			if err != nil {
				b.Fatal(err)
			}
			cl := m.GetClient() // reads from the manager's cache
			err = crbuilder.ControllerManagedBy(m).For(&corev1.ConfigMap{}).
				WithOptions(crcontroller.Options{MaxConcurrentReconciles: workers}).
				Complete(crreconcile.Func(func(ctx context.Context, req crreconcile.Request) (crreconcile.Result, error) {
					var cm corev1.ConfigMap
					if err := cl.Get(ctx, req.NamespacedName, &cm); err == nil {
						count()
					}
					return crreconcile.Result{}, nil
				}))
			if err != nil {
				b.Fatal(err)
			}
			start = m.Start
		}}
	alternate(b, rounds, ours, cr)
}

func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
