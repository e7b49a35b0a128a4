package kubeadapter_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/kubeadapter"
)

// runInformer runs inf until the test ends and waits for its first sync.
func runInformer[T any](t *testing.T, inf *core.SharedIndexInformer[T]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := inf.Run(ctx); err != nil {
			t.Errorf("informer Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	defer scancel()
	if err := inf.WaitForCacheSync(sctx); err != nil {
		t.Fatal(err)
	}
}

// TestWatchExpiredRelists breaks both informers' watches by restarting the
// apiserver after compacting etcd past the versions they applied: their
// watches resume with 410 Gone, they relist, and both converge on the
// server's state, including changes made around the outage.
func TestWatchExpiredRelists(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	ns := createNamespace(t, cs, "expire")
	other := configMaps{cs: cs, ns: createNamespace(t, cs, "expire-other")}
	s := startSideBySide(t, cs, scope{name: "namespace " + ns, namespace: ns})
	cms := configMaps{cs: cs, ns: ns}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var last core.ResourceVersion
	for i, name := range []string{"alpha", "bravo", "charlie", "alpha"} {
		cm, err := cms.put(ctx, name, i, nil)
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
		if _, err := other.put(ctx, "elsewhere", i, nil); err != nil {
			t.Fatal(err)
		}
	}
	kube.Expire(t)

	if _, err := cms.delete(ctx, "bravo"); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.put(ctx, "charlie", 10, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.put(ctx, "delta", 11, nil); err != nil {
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
	ns := createNamespace(t, cs, "waitfor")
	other := configMaps{cs: cs, ns: createNamespace(t, cs, "waitfor-other")}
	lw := kubeadapter.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(ns), kubeadapter.Config{Logger: testLogger(t)})
	inf := core.NewSharedIndexInformer[*corev1.ConfigMap](lw, core.InformerOptions[*corev1.ConfigMap]{Logger: testLogger(t)})
	runInformer(t, inf)

	for i := range 3 {
		cm, err := other.put(context.Background(), "elsewhere", i, nil)
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
	cm, err := configMaps{cs: cs, ns: ns}.put(context.Background(), "mine", 7, nil)
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
	ns := createNamespace(t, cs, "crd")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	gvr := createWidgetCRD(t, kube)

	dyn, err := dynamic.NewForConfig(kube.Config())
	if err != nil {
		t.Fatal(err)
	}
	widgets := dyn.Resource(gvr).Namespace(ns)
	lw := kubeadapter.NewDynamic(dyn, gvr, ns, kubeadapter.Config{})
	var (
		mu      sync.Mutex
		deleted []string
	)
	inf := core.NewSharedIndexInformer[*unstructured.Unstructured](lw, core.InformerOptions[*unstructured.Unstructured]{Logger: testLogger(t)})
	if _, err := inf.AddEventHandler(core.ResourceEventHandlerFuncs[*unstructured.Unstructured]{
		DeleteFunc: func(key string, obj *unstructured.Unstructured, unknown bool) {
			if !unknown && obj.GetName() != "" {
				mu.Lock()
				deleted = append(deleted, key)
				mu.Unlock()
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)

	size := func(u *unstructured.Unstructured) int64 {
		n, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
		return n
	}
	var obj *unstructured.Unstructured
	for n := int64(1); n <= 3; n++ {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "test.dbinformer.io/v1",
			"kind":       "Widget",
			"metadata":   map[string]any{"name": "gizmo"},
			"spec":       map[string]any{"size": n},
		}}
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
	mu.Lock()
	defer mu.Unlock()
	if len(deleted) != 1 || deleted[0] != ns+"/gizmo" {
		t.Fatalf("delete notifications with the last object: %v, want [%s/gizmo]", deleted, ns)
	}
}

// badVersions wraps the real client and replaces the resourceVersion the
// server reports with one that is not a number, as a non-etcd apiserver
// could.
type badVersions struct {
	kubeadapter.Client[*corev1.ConfigMapList]
}

func (b badVersions) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	l, err := b.Client.List(ctx, opts)
	if l != nil {
		l.ResourceVersion = "opaque-" + l.ResourceVersion
	}
	return l, err
}

func (b badVersions) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return b.Client.Watch(ctx, opts)
}

// TestBadVersions: a resourceVersion that is not a number fails the List
// with an error that names the source and the value; a watch from version
// 0 (before all history) is expired, so that the caller lists.
func TestBadVersions(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	ns := createNamespace(t, cs, "badrv")
	lw := kubeadapter.New[*corev1.ConfigMap](badVersions{cs.CoreV1().ConfigMaps(ns)}, kubeadapter.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := lw.List(ctx, core.ListOptions[*corev1.ConfigMap]{Emit: func(core.Event[*corev1.ConfigMap]) error { return nil }})
	if err == nil {
		t.Fatal("List with a non-numeric resourceVersion succeeded")
	}
	if !strings.Contains(err.Error(), `"opaque-`) || !strings.Contains(err.Error(), "ConfigMap") || errors.Is(err, core.ErrExpired) {
		t.Fatalf("List error %q should name the source and the bad version, and not be ErrExpired", err)
	}
	t.Logf("error: %v", err)

	good := kubeadapter.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(ns), kubeadapter.Config{})
	if w, err := good.Watch(ctx, 0); !errors.Is(err, core.ErrExpired) {
		if w != nil {
			w.Stop()
		}
		t.Fatalf("Watch(0) returned %v, want an error matching core.ErrExpired", err)
	}
}

// createWidgetCRD creates a namespaced custom resource, widgets.test.dbinformer.io
// (spec.size and spec.n integers), and waits until it is served.
func createWidgetCRD(t *testing.T, kube *harness.Kube) schema.GroupVersionResource {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ext, err := apiextclient.NewForConfig(kube.Config())
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.test.dbinformer.io"},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: "test.dbinformer.io",
			Scope: apiextv1.NamespaceScoped,
			Names: apiextv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextv1.CustomResourceValidation{OpenAPIV3Schema: &apiextv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextv1.JSONSchemaProps{"size": {Type: "integer"}, "n": {Type: "integer"}}},
					},
				}},
			}},
		},
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	for {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		established := false
		for _, c := range got.Status.Conditions {
			established = established || (c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue)
		}
		if established {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("CRD %s never became established", crd.Name)
		case <-time.After(100 * time.Millisecond):
		}
	}

	return schema.GroupVersionResource{Group: "test.dbinformer.io", Version: "v1", Resource: "widgets"}
}
