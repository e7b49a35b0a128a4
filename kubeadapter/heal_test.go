package kubeinformer_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// probes reports the outcome of each one-object List (Head, and so each
// heal probe) of the wrapped client.
type probes struct {
	kubeinformer.Client[*corev1.ConfigMapList]
	results chan error
}

func (p probes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	l, err := p.Client.List(ctx, opts)
	if opts.Limit == 1 {
		select {
		case p.results <- err:
		case <-ctx.Done():
		}
	}
	return l, err
}

func nothing(core.Event[*corev1.ConfigMap]) error { return nil }

// TestHealed: the channel of core.HealNotifier is closed when the apiserver
// answers after failing a probe, not while it fails, and not when it never
// failed (a List then stops the probing); no probe outlives the test
// (goleak in TestMain).
func TestHealed(t *testing.T) {
	kube := harness.StartKube(t)
	h := kubetest.NewConfigMaps(t, kube, kubetest.Options{})
	viaProxy, err := kubernetes.NewForConfig(h.ProxiedConfig())
	if err != nil {
		t.Fatal(err)
	}
	client := probes{Client: viaProxy.CoreV1().ConfigMaps(h.Namespace()), results: make(chan error)}
	res, err := kubeinformer.NewResource[*corev1.ConfigMap](context.Background(), client, kubeinformer.Options{Namespace: h.Namespace(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Reachable: the first probe answers; nothing to signal.
	healed := res.Healed()
	if err := <-client.results; err != nil {
		t.Fatalf("probe of a reachable apiserver: %v", err)
	}
	if _, err := res.List(ctx, core.ListSink[*corev1.ConfigMap]{Emit: nothing}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-healed:
		t.Fatal("Healed closed its channel although the apiserver never failed a probe")
	default:
	}

	// Unreachable, then back.
	h.Proxy().Pause()
	h.Proxy().Cut()
	healed = res.Healed()
	if again := res.Healed(); again != healed {
		t.Fatal("a second Healed during a probe returned another channel")
	}
	for range 2 {
		if err := <-client.results; err == nil {
			t.Fatal("a probe succeeded through a paused proxy")
		} else {
			t.Logf("probe failed: %v", err)
		}
	}
	select {
	case <-healed:
		t.Fatal("Healed closed its channel while the apiserver was unreachable")
	default:
	}
	h.Proxy().Resume()
	for err := range client.results {
		if err == nil {
			break
		}
	}
	select {
	case <-healed:
	case <-ctx.Done():
		t.Fatal("Healed did not close its channel after a probe succeeded")
	}

	// Unreachable, and the caller stops waiting: the next List stops the
	// probe (and, the path being down, fails).
	h.Proxy().Pause()
	h.Proxy().Cut()
	defer h.Proxy().Resume()
	healed = res.Healed()
	<-client.results
	lctx, lcancel := context.WithCancel(ctx)
	lcancel()
	_, _ = res.List(lctx, core.ListSink[*corev1.ConfigMap]{Emit: nothing})
	select {
	case <-healed:
		t.Fatal("Healed closed its channel while the apiserver was unreachable")
	default:
	}
}
