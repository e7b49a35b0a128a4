//go:build reliability_port

// Built only with -tags reliability_port until this file is ported to the
// push-style watch and the renamed adapter API (see WAVE2-PLAN.md): the
// adapter helper rewrites it onto reliability.Register and its adapter's
// <x>test harness.

package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
	"github.com/dbinformer/dbinformer/kubeadapter"
)

const (
	kubeNS    = "reliability"
	kubeLabel = "dbinformer-reliability=yes"
)

// Kube drives a real kube-apiserver: the objects are ConfigMaps whose data
// "v" holds the version. Restart restarts the apiserver; Expire compacts
// its etcd and restarts it (harness.Kube.Expire), so watches get 410 Gone.
type Kube struct {
	srv    *harness.Kube
	px     *proxy.Proxy
	direct kubernetes.Interface
	lw     *kubeadapter.ListerWatcher[*corev1.ConfigMap]
}

var _ Adapter[*corev1.ConfigMap] = (*Kube)(nil)

func (k *Kube) Name() string { return "kube" }

func (k *Kube) Start(t testing.TB, _ *rand.Rand) string {
	k.srv = harness.StartKube(t)
	k.direct = k.srv.Client(t)
	u, err := url.Parse(k.srv.Config().Host)
	if err != nil {
		t.Fatal(err)
	}
	if k.px, err = proxy.New(u.Host); err != nil {
		t.Fatal(err)
	}
	cfg := k.srv.Config()
	cfg.Host = "https://" + k.px.Addr()
	viaPx, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := k.direct.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.lw = kubeadapter.New[*corev1.ConfigMap](viaPx.CoreV1().ConfigMaps(kubeNS), kubeadapter.Config{LabelSelector: kubeLabel})
	return "kube-apiserver + embedded etcd"
}

func (k *Kube) ListerWatcher() core.ListerWatcher[*corev1.ConfigMap] { return k.lw }

func (k *Kube) Put(ctx context.Context, key string, ver int64) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: key, Namespace: kubeNS, Labels: map[string]string{"dbinformer-reliability": "yes"}},
		Data:       map[string]string{"v": strconv.FormatInt(ver, 10)},
	}
	// ConfigMaps allow an update without a resourceVersion: the workload is
	// the only writer.
	_, err := k.direct.CoreV1().ConfigMaps(kubeNS).Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = k.direct.CoreV1().ConfigMaps(kubeNS).Create(ctx, cm, metav1.CreateOptions{})
	}
	return err
}

func (k *Kube) Delete(ctx context.Context, key string) error {
	err := k.direct.CoreV1().ConfigMaps(kubeNS).Delete(ctx, key, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (k *Kube) Truth(ctx context.Context) (map[string]int64, error) {
	l, err := k.direct.CoreV1().ConfigMaps(kubeNS).List(ctx, metav1.ListOptions{LabelSelector: kubeLabel})
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for i := range l.Items {
		out[kubeadapter.Key(&l.Items[i])] = k.Version(&l.Items[i])
	}
	return out, nil
}

func (k *Kube) Head(ctx context.Context) (core.ResourceVersion, error) {
	// A consistent list's version is the newest the apiserver has.
	l, err := k.direct.CoreV1().ConfigMaps(kubeNS).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	return core.ParseResourceVersion(l.ResourceVersion)
}

func (k *Kube) Version(cm *corev1.ConfigMap) int64 {
	v, err := strconv.ParseInt(cm.Data["v"], 10, 64)
	if err != nil {
		panic(fmt.Sprintf("configmap %s/%s without a version: %q", cm.Namespace, cm.Name, cm.Data["v"]))
	}
	return v
}

func (k *Kube) Faults() []Fault { return []Fault{Cut, Pause, Restart, Expire} }

func (k *Kube) Inject(t testing.TB, ctx context.Context, f Fault) (func(), bool) {
	switch f {
	case Cut:
		k.px.Cut()
		return nil, false
	case Pause:
		k.px.Pause()
		k.px.Cut()
		return k.px.Resume, true
	case Restart:
		k.srv.Stop()
		return func() { k.srv.Restart(t) }, false
	case Expire:
		k.px.Pause()
		k.px.Cut()
		return func() {
			k.srv.Expire(t)
			k.px.Resume()
		}, true
	}
	t.Fatalf("kube: no fault %q", f)
	return nil, false
}

func (k *Kube) Heal(t testing.TB) { k.px.Resume() }

func (k *Kube) Stop(t testing.TB) {
	if k.px != nil {
		_ = k.px.Close()
	}
	if k.srv != nil {
		k.srv.Stop()
		k.srv.Etcd.Close()
	}
}
