package kubeinformer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// countingLists counts full List calls (Head's one-object lists aside) and
// Watch calls of the real client, to tell a resumed watch from a relist.
type countingLists struct {
	kubeinformer.Client[*corev1.ConfigMapList]
	lists, watches atomic.Int32
}

func (c *countingLists) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	c.watches.Add(1)
	return c.Client.Watch(ctx, opts)
}

func (c *countingLists) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	if opts.Limit != 1 {
		c.lists.Add(1)
	}
	return c.Client.List(ctx, opts)
}

// TestBrokenWatchResumes cuts the connections between the informer and the
// apiserver: the stream ends, the watch is reopened from the last version
// (the apiserver still has it), and changes made during the cut arrive
// without a relist.
func TestBrokenWatchResumes(t *testing.T) {
	kube := harness.StartKube(t)
	h := kubetest.NewConfigMaps(t, kube, kubetest.Options{})
	cs, ns := h.Direct(), h.Namespace()
	viaProxy, err := kubernetes.NewForConfig(h.ProxiedConfig())
	if err != nil {
		t.Fatal(err)
	}
	client := &countingLists{Client: viaProxy.CoreV1().ConfigMaps(ns)}
	lw, err := kubeinformer.NewResource[*corev1.ConfigMap](context.Background(), client, kubeinformer.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i, name := range []string{"alpha", "bravo"} {
		if _, err := kubetest.PutConfigMap(ctx, cs, ns, name, int64(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	inf, errs := informertest.Run(t, lw, core.InformerOptions[*corev1.ConfigMap]{
		Logger:  testLogger(t),
		Backoff: core.Backoff{Initial: 100 * time.Millisecond, Max: time.Second},
	})
	// A change delivered through the watch proves the stream is open.
	b, err := kubetest.PutConfigMap(ctx, cs, ns, "bravo", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.WaitFor(ctx, rv(t, b.ResourceVersion)); err != nil {
		t.Fatal(err)
	}
	watchesBefore := client.watches.Load()

	if n := h.Proxy().Cut(); n == 0 {
		t.Fatal("no connection to cut: the informer does not go through the proxy")
	}
	var last core.ResourceVersion
	if last, err = kubetest.DeleteConfigMap(ctx, cs, ns, "alpha"); err != nil {
		t.Fatal(err)
	}
	cm, err := kubetest.PutConfigMap(ctx, cs, ns, "charlie", 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	last = max(last, rv(t, cm.ResourceVersion))
	if err := inf.WaitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	if _, ok := inf.Lister().Get(ns + "/alpha"); ok {
		t.Errorf("%s/alpha still cached after its delete", ns)
	}
	if got, ok := inf.Lister().Get(ns + "/charlie"); !ok || got.ResourceVersion != cm.ResourceVersion {
		t.Errorf("%s/charlie: cache has %v (found %t), want version %s", ns, got, ok, cm.ResourceVersion)
	}
	t.Logf("watch calls: %d before the cut, %d after; full lists: %d", watchesBefore, client.watches.Load(), client.lists.Load())
	if client.watches.Load() == watchesBefore {
		t.Errorf("no new watch after the connections were cut: the watch did not break")
	}
	if n := client.lists.Load(); n != 1 || errs.Is(driver.ErrExpired) != nil {
		t.Errorf("the informer listed %d times (expired: %v); a broken watch within the apiserver's history must resume, not relist", n, errs.Is(driver.ErrExpired))
	}
}
