package kubeinformer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// TestWatchExpiredRelists breaks both informers' watches by restarting the
// apiserver after compacting etcd past the versions they applied: their
// watches resume with 410 Gone, they relist, and both converge on the
// server's state, including changes made around the outage.
func TestWatchExpiredRelists(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	ns := kubetest.CreateNamespace(t, cs, "expire")
	other := kubetest.CreateNamespace(t, cs, "expire-other")
	s := startSideBySide(t, cs, scope{name: "namespace " + ns, namespace: ns})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var last core.ResourceVersion
	for i, name := range []string{"alpha", "bravo", "charlie", "alpha"} {
		cm, err := kubetest.PutConfigMap(ctx, cs, ns, name, int64(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		last = rv(t, cm.ResourceVersion)
	}
	if err := s.ours.WaitFor(ctx, last); err != nil {
		t.Fatal(err)
	}
	// Writes nobody watches move the head past everything the informers
	// applied, so that their next watch is from a version the restarted
	// apiserver's watch cache does not have.
	for i := range 2 {
		if _, err := kubetest.PutConfigMap(ctx, cs, other, "elsewhere", int64(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	kube.Expire(t)

	if _, err := kubetest.DeleteConfigMap(ctx, cs, ns, "bravo"); err != nil {
		t.Fatal(err)
	}
	if _, err := kubetest.PutConfigMap(ctx, cs, ns, "charlie", 10, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := kubetest.PutConfigMap(ctx, cs, ns, "delta", 11, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.expired:
	case <-ctx.Done():
		t.Fatal("our informer never reported an expired watch (410) after the apiserver restarted on a compacted etcd")
	}
	s.converge(t, cs)
	checkOrder(t, "client-go", s.cgSeen.snapshot())
	checkOrder(t, "ours", s.ourSeen.snapshot())
	if _, ok := s.ours.Lister().Get(ns + "/bravo"); ok {
		t.Errorf("%s/bravo still cached after its delete", ns)
	}
}

// TestWaitForUnwatchedVersion: WaitFor reaches a version written outside
// the watched namespace, through RequestProgress, long before the
// apiserver's own once-a-minute bookmark.
func TestWaitForUnwatchedVersion(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	ns := kubetest.CreateNamespace(t, cs, "waitfor")
	other := kubetest.CreateNamespace(t, cs, "waitfor-other")
	lw, err := kubeinformer.NewResource[*corev1.ConfigMap](context.Background(), cs.CoreV1().ConfigMaps(ns), kubeinformer.Options{Namespace: ns, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run(t, lw, core.InformerOptions[*corev1.ConfigMap]{Logger: testLogger(t)})

	for i := range 3 {
		cm, err := kubetest.PutConfigMap(context.Background(), cs, other, "elsewhere", int64(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		target := rv(t, cm.ResourceVersion)
		// Well under the minute after which the apiserver would send a
		// bookmark by itself, so only a progress request can succeed.
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		start := time.Now()
		err = inf.WaitFor(ctx, target)
		cancel()
		if err != nil {
			t.Fatalf("WaitFor(%d) for a write in another namespace: %v", target, err)
		}
		t.Logf("WaitFor(%d) of an unwatched write returned after %v (applied %d)", target, time.Since(start).Round(time.Millisecond), inf.AppliedVersion())
	}

	// And a watched write right after is still delivered: the short
	// watches did not skip anything.
	cm, err := kubetest.PutConfigMap(context.Background(), cs, ns, "mine", 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := inf.WaitFor(ctx, rv(t, cm.ResourceVersion)); err != nil {
		t.Fatal(err)
	}
	got, ok := inf.Lister().Get(ns + "/mine")
	if !ok || got.ResourceVersion != cm.ResourceVersion {
		t.Fatalf("after WaitFor(%s) the cache has %v (found %t)", cm.ResourceVersion, got, ok)
	}
}

// TestCustomResourceDynamic creates a CRD at test time and watches its
// objects as unstructured through the dynamic client.
func TestCustomResourceDynamic(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	ns := kubetest.CreateNamespace(t, cs, "crd")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	gvr := kubetest.WidgetCRD(t, kube)

	dyn, err := dynamic.NewForConfig(kube.Config())
	if err != nil {
		t.Fatal(err)
	}
	widgets := dyn.Resource(gvr).Namespace(ns)
	lw, err := kubeinformer.NewDynamic(ctx, dyn, gvr, ns, kubeinformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := informertest.NewRecorder(t, func(u *unstructured.Unstructured) int64 { return int64(rv(t, u.GetResourceVersion())) })
	inf, _ := informertest.Run(t, lw, core.InformerOptions[*unstructured.Unstructured]{Logger: testLogger(t)}, rec)

	size := func(u *unstructured.Unstructured) int64 {
		n, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
		return n
	}
	var obj *unstructured.Unstructured
	for n := int64(1); n <= 3; n++ {
		u := kubetest.NewWidget("gizmo", map[string]any{"size": n})
		if obj == nil {
			obj, err = widgets.Create(ctx, u, metav1.CreateOptions{})
		} else {
			u.SetResourceVersion(obj.GetResourceVersion())
			obj, err = widgets.Update(ctx, u, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("write widget: %v", err)
		}
		if err := inf.WaitFor(ctx, rv(t, obj.GetResourceVersion())); err != nil {
			t.Fatal(err)
		}
		got, ok := inf.Lister().Get(ns + "/gizmo")
		if !ok || size(got) != n || got.GetResourceVersion() != obj.GetResourceVersion() {
			t.Fatalf("after WaitFor(%s) the cache holds %v (found %t), want spec.size %d", obj.GetResourceVersion(), got, ok, n)
		}
	}
	if err := widgets.Delete(ctx, "gizmo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	head, err := lw.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.WaitFor(ctx, head); err != nil {
		t.Fatal(err)
	}
	if _, ok := inf.Lister().Get(ns + "/gizmo"); ok {
		t.Fatalf("widget %s/gizmo still cached at version %d, after its delete", ns, head)
	}
	rec.Wait("the delete of "+ns+"/gizmo, with its last object", func(log []string, _ map[string]int64) bool {
		return len(log) > 0 && strings.HasPrefix(log[len(log)-1], "delete "+ns+"/gizmo v=") && !strings.HasSuffix(log[len(log)-1], "unknown")
	})
}

// TestResourceRemovedStopsInformer: when the CustomResourceDefinition of a
// watched resource is deleted, the informer delivers the deletes of its
// objects and then stops with an error matching driver.ErrPermanent instead
// of retrying forever.
func TestResourceRemovedStopsInformer(t *testing.T) {
	kube := harness.StartKube(t)
	h := kubetest.NewWidgets(t, kube, kubetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := h.Put(ctx, "doomed", 1); err != nil {
		t.Fatal(err)
	}
	rec := informertest.NewRecorder(t, h.Version)
	_, errs := informertest.Run(t, h.ListerWatcher(), core.InformerOptions[*unstructured.Unstructured]{Logger: testLogger(t)}, rec)
	rec.ExpectSet("add " + h.EventKey("doomed") + " v=1 initial")
	if err := h.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	rec.Expect("delete " + h.EventKey("doomed") + " v=1")
	err := errs.Wait(t, "a permanent error", func(err error) bool { return errors.Is(err, driver.ErrPermanent) })
	t.Logf("the informer stopped with: %v", err)
}
