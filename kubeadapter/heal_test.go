package kubeinformer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// failedLists reports each List of the wrapped client that fails.
type failedLists struct {
	kubeinformer.Client[*corev1.ConfigMapList]
	failed chan error
}

func (f failedLists) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	l, err := f.Client.List(ctx, opts)
	if err != nil {
		select {
		case f.failed <- err:
		default:
		}
	}
	return l, err
}

// TestWaitHealed (driver.HealWaiter): against a reachable apiserver
// WaitHealed has nothing to signal (an error, not driver.ErrWatchStopped); while the path to it is down it probes and does not
// return; once the path is back it returns nil; a cancelled wait is
// driver.ErrWatchStopped.
func TestWaitHealed(t *testing.T) {
	kube := harness.StartKube(t)
	h := kubetest.NewConfigMaps(t, kube, kubetest.Options{})
	viaProxy, err := kubernetes.NewForConfig(h.ProxiedConfig())
	if err != nil {
		t.Fatal(err)
	}
	client := failedLists{Client: viaProxy.CoreV1().ConfigMaps(h.Namespace()), failed: make(chan error, 1)}
	res, err := kubeinformer.NewResource[*corev1.ConfigMap](context.Background(), client, kubeinformer.Options{Namespace: h.Namespace(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := res.WaitHealed(ctx); err == nil || errors.Is(err, driver.ErrWatchStopped) {
		t.Fatalf("WaitHealed on a reachable apiserver returned %v, want an error saying it was not down", err)
	}

	h.Proxy().Pause()
	h.Proxy().Cut()
	done := make(chan error, 1)
	go func() { done <- res.WaitHealed(ctx) }()
	for range 2 { // two probes failed: WaitHealed saw the outage
		select {
		case err := <-client.failed:
			t.Logf("probe failed: %v", err)
		case err := <-done:
			t.Fatalf("WaitHealed returned %v while the apiserver was unreachable", err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("WaitHealed returned %v while the apiserver was unreachable", err)
	default:
	}
	h.Proxy().Resume()
	if err := <-done; err != nil {
		t.Fatalf("WaitHealed returned %v after the path came back, want nil", err)
	}

	h.Proxy().Pause()
	h.Proxy().Cut()
	defer h.Proxy().Resume()
	wctx, stop := context.WithCancel(ctx)
	go func() { done <- res.WaitHealed(wctx) }()
	<-client.failed
	stop()
	if err := <-done; !errors.Is(err, driver.ErrWatchStopped) {
		t.Fatalf("cancelled WaitHealed returned %v, want core.ErrWatchStopped", err)
	}
}
