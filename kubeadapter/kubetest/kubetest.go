// Package kubetest is kubeinformer's test kit: conformance.Harness
// implementations over a real kube-apiserver started by internal/testkit/servers,
// which the adapter's conformance tests, the reliability suite
// (integration/reliability) and benchmarks all use, so the glue between a
// test and the apiserver is written once.
//
// Most tests need only NewConfigMaps:
//
//	kube := servers.StartKube(t)
//	conformance.Run(t, caps, func(t *testing.T) conformance.Harness[*corev1.ConfigMap] {
//		return kubetest.NewConfigMaps(t, kube, kubetest.Options{})
//	})
//
// NewWidgets is the same over a custom resource read through the dynamic
// client, and can also remove the resource (conformance.Dropper).
//
// Each harness watches one fresh namespace through its own TCP proxy
// (internal/testkit/proxy), so that Faults can cut the informer off while writes,
// made with a direct client, go on. Harnesses on one Kube share its
// apiserver: Expire and the Restart fault restart it for all of them.
package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/internal/testkit/proxy"
	"github.com/dbinformer/dbinformer/internal/testkit/servers"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
)

// VersionKey is the ConfigMap data key that holds the version a harness
// wrote (conformance.Harness.Version reads it back).
const VersionKey = "n"

// Options tunes a harness's Resource.
type Options struct {
	// PageSize is the Resource's List page size; 0 means kubeinformer's
	// default. Small pages make every List go through continue tokens.
	PageSize int64
	// Logger receives the Resource's debug logs; nil discards them.
	Logger *slog.Logger
	// Where is the ConfigMaps Resource's partial-sync filter
	// (Resource.Where); Truth then reports only what it matches.
	Where *filter.Filter[*corev1.ConfigMap]
	// Labels, when set, gives the labels Put writes with version n, so
	// that a label condition of Where can move a key in and out.
	Labels func(n int64) map[string]string
}

// RandomSuffix returns 8 random hex digits, for names unique to a test.
func RandomSuffix(tb testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// CreateNamespace creates a namespace named prefix-<random> and returns its
// name. It is not deleted: no namespace controller runs in the test
// apiserver to finish a delete, and the apiserver goes away with the test.
func CreateNamespace(tb testing.TB, cs kubernetes.Interface, prefix string) string {
	tb.Helper()
	name := prefix + "-" + RandomSuffix(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("kubetest: create namespace %s: %v", name, err)
	}
	return name
}

// PutConfigMap creates or updates the ConfigMap ns/name with data
// {VersionKey: n} and the given labels, without reading it first
// (ConfigMaps allow unconditional updates), and returns what the server
// stored.
func PutConfigMap(ctx context.Context, cs kubernetes.Interface, ns, name string, n int64, labels map[string]string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Data:       map[string]string{VersionKey: strconv.FormatInt(n, 10)},
	}
	api := cs.CoreV1().ConfigMaps(ns)
	out, err := api.Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		out, err = api.Update(ctx, cm, metav1.UpdateOptions{})
	}
	return out, err
}

// DeleteConfigMap deletes the ConfigMap ns/name and returns the
// resourceVersion of the delete (see DeleteAt). A ConfigMap that does not
// exist is no error: the version returned is then one at which it is
// absent.
func DeleteConfigMap(ctx context.Context, cs kubernetes.Interface, ns, name string) (core.ResourceVersion, error) {
	api := cs.CoreV1().ConfigMaps(ns)
	return DeleteAt(ctx, name,
		func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) { return api.List(ctx, lo) },
		api.Watch,
		func(ctx context.Context, name string, do metav1.DeleteOptions) error {
			return api.Delete(ctx, name, do)
		})
}

// DeleteAt deletes the object name through the given calls of one
// resource and returns the resourceVersion of the delete. The API answers a
// delete with the object as it was (or a Status), not with the delete's
// version, so DeleteAt reads it from a watch on that one object, opened
// before the delete from the version of a fresh list (the object's own
// version may be older than what the apiserver's watch cache still holds).
// The delete is conditional on the listed version: a concurrent writer of
// the same object makes it fail with a conflict. An object that does not
// exist is no error; the list's version is returned.
func DeleteAt(ctx context.Context, name string,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
	del func(context.Context, string, metav1.DeleteOptions) error,
) (core.ResourceVersion, error) {
	byName := "metadata.name=" + name
	l, err := list(ctx, metav1.ListOptions{FieldSelector: byName})
	if err != nil {
		return 0, err
	}
	lm, err := meta.ListAccessor(l)
	if err != nil {
		return 0, err
	}
	listRV, err := driver.ParseResourceVersion(lm.GetResourceVersion())
	if err != nil {
		return 0, err
	}
	items, err := meta.ExtractList(l)
	if err != nil {
		return 0, err
	}
	if len(items) == 0 {
		return listRV, nil
	}
	cur, err := meta.Accessor(items[0])
	if err != nil {
		return 0, err
	}
	curRV := cur.GetResourceVersion()
	w, err := watchFn(ctx, metav1.ListOptions{FieldSelector: byName, ResourceVersion: lm.GetResourceVersion()})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	if err := del(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &curRV}}); err != nil {
		return 0, err
	}
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, fmt.Errorf("kubetest: the watch on %q ended before its delete arrived", name)
			}
			switch ev.Type {
			case watch.Deleted:
				m, err := meta.Accessor(ev.Object)
				if err != nil {
					return 0, err
				}
				return driver.ParseResourceVersion(m.GetResourceVersion())
			case watch.Error:
				return 0, apierrors.FromObject(ev.Object)
			}
		}
	}
}

// base is what both harnesses share: the apiserver, a fresh namespace, a
// direct client for writes and truth, a proxied config for the Resource.
type base struct {
	tb     testing.TB
	kube   *servers.Kube
	ns     string
	direct kubernetes.Interface
	px     *proxy.Proxy
	cfg    *rest.Config // through px

	unwatchedOnce sync.Once
	unwatchedNS   string
}

func newBase(tb testing.TB, kube *servers.Kube, prefix string) (*base, *rest.Config) {
	tb.Helper()
	b := &base{tb: tb, kube: kube, direct: kube.Client(tb)}
	b.ns = CreateNamespace(tb, b.direct, prefix)
	u, err := url.Parse(kube.Config().Host)
	if err != nil {
		tb.Fatal(err)
	}
	if b.px, err = proxy.New(u.Host); err != nil {
		tb.Fatalf("kubetest: proxy: %v", err)
	}
	tb.Cleanup(func() { _ = b.px.Close() })
	b.cfg = kube.Config()
	b.cfg.Host = "https://" + b.px.Addr()
	return b, b.ProxiedConfig()
}

// ProxiedConfig returns a client config that reaches the apiserver through
// the harness's proxy, for a test that builds a Resource of its own over a
// client it wraps.
func (b *base) ProxiedConfig() *rest.Config { return rest.CopyConfig(b.cfg) }

// Namespace is the harness's namespace: the watched set, and where Put
// writes.
func (b *base) Namespace() string { return b.ns }

// Kube is the apiserver the harness writes to.
func (b *base) Kube() *servers.Kube { return b.kube }

// Direct is a client that talks to the apiserver directly, not through the
// proxy.
func (b *base) Direct() kubernetes.Interface { return b.direct }

// Proxy is the proxy between the Resource and the apiserver.
func (b *base) Proxy() *proxy.Proxy { return b.px }

// EventKey returns "namespace/name" for the name given to Put
// (conformance.KeyMapper).
func (b *base) EventKey(key string) string { return b.ns + "/" + key }

// Expire compacts the apiserver's etcd at its head and restarts the
// apiserver, so that neither etcd nor the new watch cache can serve an
// older version (conformance.Expirer).
func (b *base) Expire(ctx context.Context) error {
	b.kube.Expire(b.tb)
	return nil
}

// PutUnwatched writes a ConfigMap in another namespace
// (conformance.Unwatched).
func (b *base) PutUnwatched(ctx context.Context) (core.ResourceVersion, error) {
	b.unwatchedOnce.Do(func() { b.unwatchedNS = CreateNamespace(b.tb, b.direct, b.ns+"-unwatched") })
	cm, err := PutConfigMap(ctx, b.direct, b.unwatchedNS, "unwatched-"+RandomSuffix(b.tb), 1, nil)
	if err != nil {
		return 0, err
	}
	return driver.ParseResourceVersion(cm.ResourceVersion)
}

// Head reads the apiserver's current version with a consistent one-object
// list (conformance.Truth).
func (b *base) Head(ctx context.Context) (core.ResourceVersion, error) {
	l, err := b.direct.CoreV1().ConfigMaps(b.ns).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	return driver.ParseResourceVersion(l.ResourceVersion)
}

// Faults lists the faults Inject supports (conformance.Faults).
func (b *base) Faults() []conformance.Fault {
	return []conformance.Fault{conformance.Cut, conformance.Pause, conformance.Restart, conformance.Expire, conformance.Freeze}
}

// Inject starts fault f (conformance.Faults):
//   - Cut: every connection through the proxy is closed; the client
//     reconnects at once.
//   - Pause: connections are cut and refused until end; writes go on.
//   - Restart: the apiserver stops; end starts it again (no writes meanwhile).
//   - Expire: connections are cut and refused while writes go on; end
//     compacts etcd, restarts the apiserver and lets connections through,
//     so that the Resource's next watch gets 410 Gone.
//   - Freeze: every byte between the Resource and the apiserver is held,
//     connections stay open, writes go on; end forwards what was held.
func (b *base) Inject(t testing.TB, ctx context.Context, f conformance.Fault) (end func(), writable bool) {
	switch f {
	case conformance.Cut:
		b.px.Cut()
		return nil, false
	case conformance.Pause:
		b.px.Pause()
		b.px.Cut()
		return b.px.Resume, true
	case conformance.Restart:
		b.kube.Stop()
		return func() { b.kube.Restart(t) }, false
	case conformance.Expire:
		b.px.Pause()
		b.px.Cut()
		return func() {
			b.kube.Expire(t)
			b.px.Resume()
		}, true
	case conformance.Freeze:
		b.px.Freeze()
		return b.px.Thaw, true
	}
	t.Fatalf("kubetest: no fault %q", f)
	return nil, false
}

// Heal ends any outage: the apiserver runs and the proxy forwards again
// (conformance.Faults).
func (b *base) Heal(t testing.TB) {
	if !b.kube.Running() {
		b.kube.Restart(t)
	}
	b.px.Resume()
}

// ConfigMaps is a conformance.Harness over the ConfigMaps of one fresh
// namespace. Objects carry their version in data[VersionKey]. It also
// implements conformance.Expirer, Unwatched, KeyMapper, Truth and Faults.
type ConfigMaps struct {
	*base
	res    *kubeinformer.Resource[*corev1.ConfigMap]
	where  *filter.Filter[*corev1.ConfigMap]
	labels func(n int64) map[string]string
}

// NewConfigMaps creates a namespace on kube and returns a harness over its
// ConfigMaps, whose Resource reaches the apiserver through a proxy closed
// when the test ends.
func NewConfigMaps(tb testing.TB, kube *servers.Kube, opts Options) *ConfigMaps {
	tb.Helper()
	b, cfg := newBase(tb, kube, "configmaps")
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	res, err := kubeinformer.NewResource[*corev1.ConfigMap](context.Background(), cs.CoreV1().ConfigMaps(b.ns), kubeinformer.Options{
		Namespace: b.ns,
		PageSize:  opts.PageSize,
		Logger:    opts.Logger,
	})
	if err != nil {
		tb.Fatal(err)
	}
	if opts.Where != nil {
		if res, err = res.Where(opts.Where); err != nil {
			tb.Fatal(err)
		}
	}
	return &ConfigMaps{base: b, res: res, where: opts.Where, labels: opts.Labels}
}

// ListerWatcher is the Resource under test.
func (h *ConfigMaps) ListerWatcher() driver.ListerWatcher[*corev1.ConfigMap] { return h.res }

// Resource is the Resource under test, with its concrete type.
func (h *ConfigMaps) Resource() *kubeinformer.Resource[*corev1.ConfigMap] { return h.res }

// Put creates or updates the ConfigMap key with version n.
func (h *ConfigMaps) Put(ctx context.Context, key string, n int64) (core.ResourceVersion, error) {
	var labels map[string]string
	if h.labels != nil {
		labels = h.labels(n)
	}
	cm, err := PutConfigMap(ctx, h.direct, h.ns, key, n, labels)
	if err != nil {
		return 0, err
	}
	return driver.ParseResourceVersion(cm.ResourceVersion)
}

// Delete deletes the ConfigMap key and returns the delete's version.
func (h *ConfigMaps) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	return DeleteConfigMap(ctx, h.direct, h.ns, key)
}

// Version reads data[VersionKey]; an object without one fails the test and
// reads as -1.
func (h *ConfigMaps) Version(cm *corev1.ConfigMap) int64 {
	n, err := strconv.ParseInt(cm.Data[VersionKey], 10, 64)
	if err != nil {
		h.tb.Errorf("kubetest: ConfigMap %s/%s has no version in data[%q]: %v", cm.Namespace, cm.Name, VersionKey, err)
		return -1
	}
	return n
}

// Truth lists the namespace directly: name -> version, of the ConfigMaps
// Options.Where matches.
func (h *ConfigMaps) Truth(ctx context.Context) (map[string]int64, error) {
	l, err := h.direct.CoreV1().ConfigMaps(h.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(l.Items))
	for i := range l.Items {
		cm := &l.Items[i]
		if h.where != nil && !h.where.Match(h.EventKey(cm.Name), cm) {
			continue
		}
		out[cm.Name] = h.Version(cm)
	}
	return out, nil
}

var (
	_ conformance.Harness[*corev1.ConfigMap] = (*ConfigMaps)(nil)
	_ conformance.Expirer                    = (*ConfigMaps)(nil)
	_ conformance.Unwatched                  = (*ConfigMaps)(nil)
	_ conformance.KeyMapper                  = (*ConfigMaps)(nil)
	_ conformance.Truth                      = (*ConfigMaps)(nil)
	_ conformance.Faults                     = (*ConfigMaps)(nil)

	_ conformance.Harness[*unstructured.Unstructured] = (*Widgets)(nil)
	_ conformance.Expirer                             = (*Widgets)(nil)
	_ conformance.Unwatched                           = (*Widgets)(nil)
	_ conformance.KeyMapper                           = (*Widgets)(nil)
	_ conformance.Truth                               = (*Widgets)(nil)
	_ conformance.Faults                              = (*Widgets)(nil)
	_ conformance.Dropper                             = (*Widgets)(nil)
)
