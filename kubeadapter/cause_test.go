package kubeinformer_test

import (
	"context"
	"strings"
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

// runUnsynced runs an informer over lw without waiting for its sync, until
// the test ends, retrying quickly; it returns the informer and the errors
// it reports.
func runUnsynced(t *testing.T, lw driver.ListerWatcher[*corev1.ConfigMap]) (*core.SharedIndexInformer[*corev1.ConfigMap], *informertest.Errors) {
	t.Helper()
	return informertest.Start(t, lw, core.InformerOptions[*corev1.ConfigMap]{
		MinWatchTimeout: time.Hour,
		Backoff:         core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
	})
}

// An apiserver that is stopped while the informer makes its first sync:
// client-go does not retry a refused connection, so the List fails at once
// and its cause (connection refused) is named by the sync status, the
// error handler and WaitForCacheSyncTimeout; once the apiserver is back,
// the informer syncs.
func TestApiserverDownNamesCause(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	ns := kubetest.CreateNamespace(t, cs, "down")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := kubetest.PutConfigMap(ctx, cs, ns, "alpha", 1, nil); err != nil {
		t.Fatal(err)
	}
	res, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, cs.CoreV1().ConfigMaps(ns), kubeinformer.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	kube.Stop()
	inf, errs := runUnsynced(t, res)
	informertest.SaysWhy(t, inf, errs, "connection refused", "")
	kube.Restart(t)
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatalf("after the apiserver is back: %v", err)
	}
	if _, ok := inf.Indexer().Get(ns + "/alpha"); !ok {
		t.Errorf("the synced cache lacks %s/alpha", ns)
	}

	// The watch too: stopped again, the apiserver's refusal is what the
	// sync status says about the watch.
	kube.Stop()
	informertest.Eventually(t, "the sync status to name the watch's connection refused", func() bool {
		st := inf.SyncStatus()
		return st.WatchFailures.Count > 0 && strings.Contains(st.String(), "connection refused")
	})
	if errs.Find(func(err error) bool {
		return strings.Contains(err.Error(), "watch from version") && strings.Contains(err.Error(), "connection refused")
	}) == nil {
		t.Errorf("the error handler got %v, none naming the watch's connection refused", errs.All())
	}
	t.Logf("sync status: %s", inf.SyncStatus())
	kube.Restart(t)
	cm, err := kubetest.PutConfigMap(ctx, cs, ns, "bravo", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	informertest.WaitFor(t, inf, rv(t, cm.ResourceVersion))
}

// A client whose bearer token the apiserver does not know: the List fails
// with 401 Unauthorized, which is named by the sync status, the error
// handler and WaitForCacheSyncTimeout; the token never is. (The test
// apiserver authorizes every authenticated user, so a 403 cannot be
// provoked here; it takes the same path.)
func TestUnauthorizedNamesCause(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	ns := kubetest.CreateNamespace(t, cs, "unauthorized")
	const token = "wrong-s3cret-token"
	cfg := kube.Config()
	cfg.BearerToken = token
	bad, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := kubeinformer.NewResource[*corev1.ConfigMap](context.Background(), bad.CoreV1().ConfigMaps(ns), kubeinformer.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	inf, errs := runUnsynced(t, res)
	informertest.SaysWhy(t, inf, errs, "the apiserver does not accept the client's credentials (401", token)
}

// A path to the apiserver that ends every connection at once (a proxy
// that accepts and closes): client-go retries such GETs (EOF) on its own
// for about ten seconds and then returns the last error, which the sync
// status, the error handler and WaitForCacheSyncTimeout name; once the path
// is back, the informer syncs.
func TestApiserverPathCutNamesCause(t *testing.T) {
	kube := harness.StartKube(t)
	h := kubetest.NewConfigMaps(t, kube, kubetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := h.Put(ctx, "alpha", 1); err != nil {
		t.Fatal(err)
	}
	viaProxy, err := kubernetes.NewForConfig(h.ProxiedConfig())
	if err != nil {
		t.Fatal(err)
	}
	res, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, viaProxy.CoreV1().ConfigMaps(h.Namespace()), kubeinformer.Options{Namespace: h.Namespace()})
	if err != nil {
		t.Fatal(err)
	}
	h.Proxy().Pause()
	h.Proxy().Cut()
	inf, errs := runUnsynced(t, res)
	informertest.SaysWhy(t, inf, errs, "EOF", "")
	h.Proxy().Resume()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatalf("after the path is back: %v", err)
	}

	// The watch too: its reopen is retried by client-go until the watch
	// gives it up (5s), and the error then carries what the retries met.
	h.Proxy().Pause()
	h.Proxy().Cut()
	informertest.Eventually(t, "the sync status to name the watch's EOF", func() bool {
		st := inf.SyncStatus()
		return st.WatchFailures.Count > 0 && strings.Contains(st.WatchFailures.Last.Error(), "EOF")
	})
	t.Logf("sync status: %s", inf.SyncStatus())
	h.Proxy().Resume()
	r, err := h.Put(ctx, "bravo", 2)
	if err != nil {
		t.Fatal(err)
	}
	informertest.WaitFor(t, inf, r)
}
