package reliability

import (
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// kube: a real kube-apiserver (and the etcd behind it) per run; the
// objects are the ConfigMaps of one namespace, watched through the
// harness's proxy. Restart restarts the apiserver; Expire compacts its etcd
// and restarts it (harness.Kube.Expire), so watches get 410 Gone.
func init() {
	Register("kube", func(t testing.TB, _ *rand.Rand) (conformance.Harness[*corev1.ConfigMap], string) {
		return kubetest.NewConfigMaps(t, harness.StartKube(t), kubetest.Options{}), "kube-apiserver + etcd, ConfigMaps of one namespace"
	})
}
