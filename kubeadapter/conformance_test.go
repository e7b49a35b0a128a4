package kubeinformer_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/kubeadapter/kubetest"
)

// caps: deletes carry the last object, Added and Modified are told apart,
// and the version a write returns is the one its event carries. A restart
// of the apiserver (Expire) and a loaded machine can make single steps
// slow.
var caps = conformance.Capabilities{
	DeletesCarryObject:  true,
	DistinguishesUpdate: true,
	ExactWriteRV:        true,
	Timeout:             time.Minute,
}

// TestConformance runs the core conformance suite for ConfigMaps, each case
// in a fresh namespace of one real kube-apiserver, with two objects per
// List page so that every list with more than two objects goes through
// continue tokens.
func TestConformance(t *testing.T) {
	kube := harness.StartKube(t)
	conformance.Run(t, caps, func(t *testing.T) conformance.Harness[*corev1.ConfigMap] {
		return kubetest.NewConfigMaps(t, kube, kubetest.Options{PageSize: 2})
	})
}

// TestConformanceDynamic runs the suite again on the unstructured path: a
// custom resource created at test time, through the dynamic client. Its
// harness can also remove the resource (conformance.Dropper).
func TestConformanceDynamic(t *testing.T) {
	kube := harness.StartKube(t)
	conformance.Run(t, caps, func(t *testing.T) conformance.Harness[*unstructured.Unstructured] {
		return kubetest.NewWidgets(t, kube, kubetest.Options{PageSize: 2})
	})
}
