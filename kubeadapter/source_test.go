package kubeadapter_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/kubeadapter"
)

// versionKey is the ConfigMap data key holding the version the tests wrote.
const versionKey = "n"

func randomSuffix(t testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// createNamespace creates a fresh namespace and deletes it at cleanup.
func createNamespace(t testing.TB, cs kubernetes.Interface, prefix string) string {
	t.Helper()
	name := prefix + "-" + randomSuffix(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

func rv(t testing.TB, s string) core.ResourceVersion {
	t.Helper()
	v, err := core.ParseResourceVersion(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// configMaps writes ConfigMaps in one namespace the way the tests need:
// every write returns its exact resourceVersion, deletes included.
type configMaps struct {
	cs kubernetes.Interface
	ns string
}

func (c configMaps) put(ctx context.Context, name string, n int, labels map[string]string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns, Labels: labels},
		Data:       map[string]string{versionKey: strconv.Itoa(n)},
	}
	api := c.cs.CoreV1().ConfigMaps(c.ns)
	out, err := api.Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// ConfigMaps allow unconditional updates: no read needed.
		out, err = api.Update(ctx, cm, metav1.UpdateOptions{})
	}
	return out, err
}

// delete deletes name and returns the resourceVersion of the delete. The
// API answers a ConfigMap delete with a Status that has no version, so the
// version is read from a watch on that one object, opened before the
// delete from the version of a fresh list (the object's own version may be
// older than what the apiserver's watch cache still holds).
func (c configMaps) delete(ctx context.Context, name string) (core.ResourceVersion, error) {
	api := c.cs.CoreV1().ConfigMaps(c.ns)
	byName := "metadata.name=" + name
	l, err := api.List(ctx, metav1.ListOptions{FieldSelector: byName})
	if err != nil {
		return 0, err
	}
	if len(l.Items) != 1 {
		return 0, fmt.Errorf("configmap %s/%s: found %d", c.ns, name, len(l.Items))
	}
	cur := &l.Items[0]
	w, err := api.Watch(ctx, metav1.ListOptions{
		FieldSelector:   byName,
		ResourceVersion: l.ResourceVersion,
	})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	if err := api.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cur.ResourceVersion}}); err != nil {
		return 0, err
	}
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, fmt.Errorf("watch on %s/%s ended before its delete arrived", c.ns, name)
			}
			switch ev.Type {
			case watch.Deleted:
				return core.ParseResourceVersion(ev.Object.(*corev1.ConfigMap).ResourceVersion)
			case watch.Error:
				return 0, apierrors.FromObject(ev.Object)
			}
		}
	}
}

// kubeSource is one conformance Source: a fresh namespace on a shared
// apiserver.
type kubeSource struct {
	kube      *harness.Kube
	cms       configMaps
	unwatched configMaps
	lw        *kubeadapter.ListerWatcher[*corev1.ConfigMap]
	t         *testing.T
}

func (s *kubeSource) ListerWatcher() core.ListerWatcher[*corev1.ConfigMap] { return s.lw }

// EventKey: the adapter reports "namespace/name" for the name the suite
// wrote (conformance.KeyMapper).
func (s *kubeSource) EventKey(key string) string { return s.cms.ns + "/" + key }

func (s *kubeSource) Put(ctx context.Context, key string, n int) (core.ResourceVersion, error) {
	cm, err := s.cms.put(ctx, key, n, nil)
	if err != nil {
		return 0, err
	}
	return core.ParseResourceVersion(cm.ResourceVersion)
}

func (s *kubeSource) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	return s.cms.delete(ctx, key)
}

func (s *kubeSource) Version(cm *corev1.ConfigMap) int {
	n, err := strconv.Atoi(cm.Data[versionKey])
	if err != nil {
		s.t.Errorf("ConfigMap %s/%s has no version in data[%q]: %v", cm.Namespace, cm.Name, versionKey, err)
	}
	return n
}

// Expire compacts etcd at its head and restarts the apiserver, so that
// neither etcd nor the new watch cache can serve an older version.
func (s *kubeSource) Expire(ctx context.Context) error {
	s.kube.Expire(s.t)
	return nil
}

func (s *kubeSource) PutUnwatched(ctx context.Context) (core.ResourceVersion, error) {
	cm, err := s.unwatched.put(ctx, "unwatched-"+randomSuffix(s.t), 1, nil)
	if err != nil {
		return 0, err
	}
	return core.ParseResourceVersion(cm.ResourceVersion)
}

// testWriter sends log lines to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// widgetSource is a conformance Source over custom resources in a fresh
// namespace, read as unstructured.
type widgetSource struct {
	kube      *harness.Kube
	t         *testing.T
	ns        string
	widgets   dynamic.ResourceInterface
	unwatched configMaps
	lw        *kubeadapter.ListerWatcher[*unstructured.Unstructured]
}

func (s *widgetSource) ListerWatcher() core.ListerWatcher[*unstructured.Unstructured] {
	return s.lw
}

// EventKey: the adapter reports "namespace/name" (conformance.KeyMapper).
func (s *widgetSource) EventKey(key string) string { return s.ns + "/" + key }

func (s *widgetSource) Put(ctx context.Context, key string, n int) (core.ResourceVersion, error) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.dbinformer.io/v1",
		"kind":       "Widget",
		"metadata":   map[string]any{"name": key},
		"spec":       map[string]any{"n": int64(n)},
	}}
	out, err := s.widgets.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *unstructured.Unstructured
		if cur, err = s.widgets.Get(ctx, key, metav1.GetOptions{}); err != nil {
			return 0, err
		}
		u.SetResourceVersion(cur.GetResourceVersion())
		out, err = s.widgets.Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		return 0, err
	}
	return core.ParseResourceVersion(out.GetResourceVersion())
}

// Delete reads the delete's version from a watch on the one object, as
// configMaps.delete does.
func (s *widgetSource) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	byName := "metadata.name=" + key
	l, err := s.widgets.List(ctx, metav1.ListOptions{FieldSelector: byName})
	if err != nil {
		return 0, err
	}
	w, err := s.widgets.Watch(ctx, metav1.ListOptions{FieldSelector: byName, ResourceVersion: l.GetResourceVersion()})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	if err := s.widgets.Delete(ctx, key, metav1.DeleteOptions{}); err != nil {
		return 0, err
	}
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, fmt.Errorf("watch on widget %s/%s ended before its delete arrived", s.ns, key)
			}
			switch ev.Type {
			case watch.Deleted:
				return core.ParseResourceVersion(ev.Object.(*unstructured.Unstructured).GetResourceVersion())
			case watch.Error:
				return 0, apierrors.FromObject(ev.Object)
			}
		}
	}
}

func (s *widgetSource) Version(u *unstructured.Unstructured) int {
	n, ok, err := unstructured.NestedInt64(u.Object, "spec", "n")
	if !ok || err != nil {
		s.t.Errorf("widget %s/%s has no spec.n (%v)", u.GetNamespace(), u.GetName(), err)
	}
	return int(n)
}

func (s *widgetSource) Expire(ctx context.Context) error {
	s.kube.Expire(s.t)
	return nil
}

func (s *widgetSource) PutUnwatched(ctx context.Context) (core.ResourceVersion, error) {
	cm, err := s.unwatched.put(ctx, "unwatched-"+randomSuffix(s.t), 1, nil)
	if err != nil {
		return 0, err
	}
	return core.ParseResourceVersion(cm.ResourceVersion)
}

var (
	_ conformance.KeyMapper = (*kubeSource)(nil)
	_ conformance.KeyMapper = (*widgetSource)(nil)
)
