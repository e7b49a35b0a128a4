package kubeinformer_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// The audit finds and heals every lie an informertest.Lossy tells, and
// reports no difference while writers race it, on a real kube-apiserver,
// with List pages of two objects (continue tokens pinned to one version).
func TestAuditConformance(t *testing.T) {
	kube := harness.StartKube(t)
	conformance.RunAudit(t, caps, func(t *testing.T) conformance.Harness[*corev1.ConfigMap] {
		return kubetest.NewConfigMaps(t, kube, kubetest.Options{PageSize: 2})
	})
}

// The same on the unstructured path (a custom resource, the dynamic
// client): objects compared as maps.
func TestAuditDynamic(t *testing.T) {
	kube := harness.StartKube(t)
	conformance.RunAudit(t, caps, func(t *testing.T) conformance.Harness[*unstructured.Unstructured] {
		return kubetest.NewWidgets(t, kube, kubetest.Options{PageSize: 2})
	})
}

// A partial sync (a label selector pushed down, a name prefix evaluated
// here) audits only what its filter selects.
func TestAuditFiltered(t *testing.T) {
	kube := harness.StartKube(t)
	conformance.RunAudit(t, caps, func(t *testing.T) conformance.Harness[*corev1.ConfigMap] {
		f := filter.MustNew[*corev1.ConfigMap](filter.And(filter.Eq("metadata.labels.tier", "a"), filter.Prefix("metadata.name", "in.")))
		return filteredConfigMaps{kubetest.NewConfigMaps(t, kube, kubetest.Options{
			Where: f,
			Labels: func(n int64) map[string]string {
				return map[string]string{"tier": map[bool]string{true: "a", false: "b"}[n%2 == 0]}
			},
		})}
	})
}
