package kubeinformer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

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
	_, err = lw.List(ctx, driver.ListSink[*corev1.ConfigMap]{Emit: func(driver.Event[*corev1.ConfigMap]) error { return nil }})
	if err == nil {
		t.Fatal("List with a non-numeric resourceVersion succeeded")
	}
	if !strings.Contains(err.Error(), `"opaque-`) || !strings.Contains(err.Error(), "ConfigMap") || errors.Is(err, driver.ErrExpired) {
		t.Fatalf("List error %q should name the source and the bad version, and not be ErrExpired", err)
	}
	t.Logf("error: %v", err)

	good, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, cs.CoreV1().ConfigMaps(ns), kubeinformer.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	err = good.Watch(ctx, 0, driver.WatchOptions[*corev1.ConfigMap]{Emit: func([]driver.Event[*corev1.ConfigMap]) error { return nil }})
	if !errors.Is(err, driver.ErrExpired) {
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
	_, err = lw.List(ctx, driver.ListSink[*corev1.ConfigMap]{Emit: func(driver.Event[*corev1.ConfigMap]) error { return nil }})
	if !errors.Is(err, driver.ErrPermanent) || !strings.Contains(err.Error(), ns+"/x") || !strings.Contains(err.Error(), `"elsewhere"`) {
		t.Fatalf("List of namespace %s with Options.Namespace \"elsewhere\" returned %v, want a permanent error naming both", ns, err)
	}
	if _, err := kubeinformer.NewDynamic(ctx, nil, kubetest.WidgetGVR, ns, kubeinformer.Options{}); err == nil {
		t.Fatal("NewDynamic with a nil client succeeded")
	}
}

// watchAll runs Watch in the background, sending each event on the
// returned channel; the second channel gets Watch's error.
func watchAll[T any](ctx context.Context, lw driver.ListerWatcher[T], from core.ResourceVersion, progress <-chan struct{}) (<-chan driver.Event[T], <-chan error) {
	events := make(chan driver.Event[T], 1024)
	done := make(chan error, 1)
	go func() {
		done <- lw.Watch(ctx, from, driver.WatchOptions[T]{
			Progress: progress,
			Emit: func(batch []driver.Event[T]) error {
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
// arrives, and the watch ends with driver.ErrWatchStopped when its context
// does.
func TestProgressRequest(t *testing.T) {
	kube := harness.StartKube(t)
	h := kubetest.NewConfigMaps(t, kube, kubetest.Options{Logger: testLogger(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	from, err := h.Resource().List(ctx, driver.ListSink[*corev1.ConfigMap]{Emit: func(driver.Event[*corev1.ConfigMap]) error { return nil }})
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
			var ev driver.Event[*corev1.ConfigMap]
			select {
			case ev = <-events:
			case err := <-done:
				t.Fatalf("Watch returned %v", err)
			case <-ctx.Done():
				t.Fatalf("no bookmark at or after %d", target)
			}
			if ev.Type != driver.Bookmark {
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
		if ev.Type == driver.Bookmark {
			continue
		}
		if ev.Type != driver.Added || ev.Key != h.EventKey("mine") || ev.RV != put {
			t.Fatalf("got %v of %q at %d, want Added of %q at %d", ev.Type, ev.Key, ev.RV, h.EventKey("mine"), put)
		}
		break
	}
	stop()
	if err := <-done; !errors.Is(err, driver.ErrWatchStopped) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v after its context was cancelled, want core.ErrWatchStopped and context.Canceled", err)
	}
}

// TestResourceRemovedIsPermanent: deleting the CustomResourceDefinition of
// a watched resource ends its watch with an error matching
// driver.ErrPermanent (the apiserver ends the watch, and the reopen gets 404),
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
			from, err := h.Resource().List(ctx, driver.ListSink[*unstructured.Unstructured]{Emit: func(driver.Event[*unstructured.Unstructured]) error { return nil }})
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
					if ev.Type == driver.Deleted {
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
				if ev := <-events; ev.Type == driver.Deleted {
					deleted++
				}
			}
			t.Logf("Watch returned after %d deletes: %v", deleted, err)
			if !errors.Is(err, driver.ErrPermanent) {
				t.Fatalf("Watch of a removed resource returned %v, want an error matching core.ErrPermanent", err)
			}
			if deleted != objects {
				t.Errorf("%d deletes before the end, want %d", deleted, objects)
			}
			_, err = h.Resource().List(ctx, driver.ListSink[*unstructured.Unstructured]{Emit: func(driver.Event[*unstructured.Unstructured]) error { return nil }})
			if !errors.Is(err, driver.ErrPermanent) {
				t.Fatalf("List of a removed resource returned %v, want an error matching core.ErrPermanent", err)
			}
		})
	}
}
