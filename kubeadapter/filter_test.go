package kubeinformer_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// filteredConfigMaps is a namespace of ConfigMaps watched through a filter:
// a label condition pushed down as a label selector (tier=a, which Put
// writes for even versions: the apiserver reports a ConfigMap whose label
// changes out of the selector as deleted, with its new state) and a name
// prefix evaluated in the adapter (the in. names).
type filteredConfigMaps struct{ *kubetest.ConfigMaps }

func (filteredConfigMaps) Matches(key string, n int64) bool {
	return strings.HasPrefix(key, "in.") && n%2 == 0
}

// TestWhereEnterLeave runs the filter conformance case: ConfigMaps entering
// and leaving under concurrent writers, and across a relist.
func TestWhereEnterLeave(t *testing.T) {
	kube := harness.StartKube(t)
	conformance.RunFiltered(t, caps, func(t *testing.T) conformance.Harness[*corev1.ConfigMap] {
		f := filter.MustNew[*corev1.ConfigMap](filter.And(filter.Eq("metadata.labels.tier", "a"), filter.Prefix("metadata.name", "in.")))
		h := kubetest.NewConfigMaps(t, kube, kubetest.Options{
			Where: f,
			Labels: func(n int64) map[string]string {
				return map[string]string{"tier": map[bool]string{true: "a", false: "b"}[n%2 == 0]}
			},
		})
		if l, fs := h.Resource().Selectors(); l != "tier=a" || fs != "" {
			t.Fatalf("selectors %q %q, want the label condition pushed down", l, fs)
		}
		return filteredConfigMaps{h}
	})
}

func TestWhereRefused(t *testing.T) {
	ctx := context.Background()
	res, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, configMapsStandIn{}, kubeinformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = res.Where(filter.MustNew[*corev1.ConfigMap](filter.Server(filter.Prefix("metadata.labels.tier", "a"))))
	if err == nil || !strings.Contains(err.Error(), `cannot evaluate metadata.labels.tier PREFIX "a"`) {
		t.Errorf("a Server prefix on a label: %v", err)
	}
	r2, err := res.Where(filter.MustNew[*corev1.ConfigMap](filter.And(
		filter.In("metadata.labels.tier", "a", "b"), filter.Eq("metadata.name", "x"), filter.Eq("data.k", "v"))))
	if err != nil {
		t.Fatal(err)
	}
	if l, fs := r2.Selectors(); l != "tier in (a,b)" || fs != "metadata.name=x" {
		t.Errorf("selectors %q %q", l, fs)
	}
}
