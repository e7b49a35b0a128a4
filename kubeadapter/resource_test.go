package kubeinformer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
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
	inf := core.NewSharedIndexInformer[*corev1.ConfigMap](lw, core.InformerOptions[*corev1.ConfigMap]{Logger: testLogger(t)})
	runInformer(t, inf)

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
	kubeinformer.Client[*corev1.ConfigMapList]
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
	ns := kubetest.CreateNamespace(t, cs, "badrv")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lw, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, badVersions{cs.CoreV1().ConfigMaps(ns)}, kubeinformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lw.List(ctx, core.ListSink[*corev1.ConfigMap]{Emit: func(core.Event[*corev1.ConfigMap]) error { return nil }})
	if err == nil {
		t.Fatal("List with a non-numeric resourceVersion succeeded")
	}
	if !strings.Contains(err.Error(), `"opaque-`) || !strings.Contains(err.Error(), "ConfigMap") || errors.Is(err, core.ErrExpired) {
		t.Fatalf("List error %q should name the source and the bad version, and not be ErrExpired", err)
	}
	t.Logf("error: %v", err)

	good, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, cs.CoreV1().ConfigMaps(ns), kubeinformer.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	err = good.Watch(ctx, 0, core.WatchOptions[*corev1.ConfigMap]{Emit: func([]core.Event[*corev1.ConfigMap]) error { return nil }})
	if !errors.Is(err, core.ErrExpired) {
		t.Fatalf("Watch(0) returned %v, want an error matching core.ErrExpired", err)
	}
}

// TestWrongNamespace: Options.Namespace names the namespace of a typed
// client; a client that watches another one is a permanent error naming
// both, not a silent mislabelling.
func TestWrongNamespace(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	ns := kubetest.CreateNamespace(t, cs, "wrongns")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := kubetest.PutConfigMap(ctx, cs, ns, "x", 1, nil); err != nil {
		t.Fatal(err)
	}
	lw, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, cs.CoreV1().ConfigMaps(ns), kubeinformer.Options{Namespace: "elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lw.List(ctx, core.ListSink[*corev1.ConfigMap]{Emit: func(core.Event[*corev1.ConfigMap]) error { return nil }})
	if !errors.Is(err, core.ErrPermanent) || !strings.Contains(err.Error(), ns+"/x") || !strings.Contains(err.Error(), `"elsewhere"`) {
		t.Fatalf("List of namespace %s with Options.Namespace \"elsewhere\" returned %v, want a permanent error naming both", ns, err)
	}
	if _, err := kubeinformer.NewDynamic(ctx, nil, kubetest.WidgetGVR, ns, kubeinformer.Options{}); err == nil {
		t.Fatal("NewDynamic with a nil client succeeded")
	}
}

// watchAll runs Watch in the background, sending each event on the
// returned channel; the second channel gets Watch's error.
func watchAll[T any](ctx context.Context, lw core.ListerWatcher[T], from core.ResourceVersion, progress <-chan struct{}) (<-chan core.Event[T], <-chan error) {
	events := make(chan core.Event[T], 1024)
	done := make(chan error, 1)
	go func() {
		done <- lw.Watch(ctx, from, core.WatchOptions[T]{
			Progress: progress,
			Emit: func(batch []core.Event[T]) error {
				for _, ev := range batch {
					select {
					case events <- ev:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			},
		})
	}()
	return events, done
}

// TestProgressRequest: a request on WatchOptions.Progress is answered with
// a bookmark at or after the head at the time of the request, for a head
// moved by writes the watch does not see; a watched write after it still
// arrives, and the watch ends with core.ErrWatchStopped when its context
// does.
func TestProgressRequest(t *testing.T) {
	kube := harness.StartKube(t)
	h := kubetest.NewConfigMaps(t, kube, kubetest.Options{Logger: testLogger(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	from, err := h.Resource().List(ctx, core.ListSink[*corev1.ConfigMap]{Emit: func(core.Event[*corev1.ConfigMap]) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	progress := make(chan struct{})
	events, done := watchAll[*corev1.ConfigMap](wctx, h.Resource(), from, progress)
	for range 3 {
		target, err := h.PutUnwatched(ctx)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case progress <- struct{}{}:
		case err := <-done:
			t.Fatalf("Watch returned %v", err)
		}
		for {
			var ev core.Event[*corev1.ConfigMap]
			select {
			case ev = <-events:
			case err := <-done:
				t.Fatalf("Watch returned %v", err)
			case <-ctx.Done():
				t.Fatalf("no bookmark at or after %d", target)
			}
			if ev.Type != core.Bookmark {
				t.Fatalf("unexpected %v of %q at %d: nothing watched was written", ev.Type, ev.Key, ev.RV)
			}
			if ev.RV >= target {
				t.Logf("bookmark at %d for an unwatched write at %d", ev.RV, target)
				break
			}
		}
	}
	put, err := h.Put(ctx, "mine", 1)
	if err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		if ev.Type == core.Bookmark {
			continue
		}
		if ev.Type != core.Added || ev.Key != h.EventKey("mine") || ev.RV != put {
			t.Fatalf("got %v of %q at %d, want Added of %q at %d", ev.Type, ev.Key, ev.RV, h.EventKey("mine"), put)
		}
		break
	}
	stop()
	if err := <-done; !errors.Is(err, core.ErrWatchStopped) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v after its context was cancelled, want core.ErrWatchStopped and context.Canceled", err)
	}
}

// TestResourceRemovedIsPermanent: deleting the CustomResourceDefinition of
// a watched resource ends its watch with an error matching
// core.ErrPermanent (the apiserver ends the watch, and the reopen gets 404),
// after the deletes of its objects; a List then fails the same way.
func TestResourceRemovedIsPermanent(t *testing.T) {
	kube := harness.StartKube(t)
	for _, objects := range []int{0, 2} {
		t.Run(fmt.Sprintf("%d objects", objects), func(t *testing.T) {
			h := kubetest.NewWidgets(t, kube, kubetest.Options{Logger: testLogger(t)})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			for i := range objects {
				if _, err := h.Put(ctx, fmt.Sprintf("w%d", i), 1); err != nil {
					t.Fatal(err)
				}
			}
			from, err := h.Resource().List(ctx, core.ListSink[*unstructured.Unstructured]{Emit: func(core.Event[*unstructured.Unstructured]) error { return nil }})
			if err != nil {
				t.Fatal(err)
			}
			events, done := watchAll[*unstructured.Unstructured](ctx, h.Resource(), from, nil)
			if err := h.Drop(ctx); err != nil {
				t.Fatal(err)
			}
			var deleted int
			for {
				select {
				case ev := <-events:
					if ev.Type == core.Deleted {
						deleted++
					}
					continue
				case err = <-done:
				case <-ctx.Done():
					t.Fatal("the watch did not end after its resource was removed")
				}
				break
			}
			for len(events) > 0 {
				if ev := <-events; ev.Type == core.Deleted {
					deleted++
				}
			}
			t.Logf("Watch returned after %d deletes: %v", deleted, err)
			if !errors.Is(err, core.ErrPermanent) {
				t.Fatalf("Watch of a removed resource returned %v, want an error matching core.ErrPermanent", err)
			}
			if deleted != objects {
				t.Errorf("%d deletes before the end, want %d", deleted, objects)
			}
			_, err = h.Resource().List(ctx, core.ListSink[*unstructured.Unstructured]{Emit: func(core.Event[*unstructured.Unstructured]) error { return nil }})
			if !errors.Is(err, core.ErrPermanent) {
				t.Fatalf("List of a removed resource returned %v, want an error matching core.ErrPermanent", err)
			}
		})
	}
}
