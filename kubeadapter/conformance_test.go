package kubeadapter_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/kubeadapter"
)

// TestConformance runs the core conformance suite for ConfigMaps, each case
// in a fresh namespace of one real kube-apiserver, with two objects per
// List page so that every list with more than two objects goes through
// continue tokens.
func TestConformance(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	unwatchedNS := createNamespace(t, cs, "conformance-unwatched")
	conformance.Run(t, conformance.Capabilities{
		DeletesCarryObject:  true,
		DistinguishesUpdate: true,
		ExactWriteRV:        true,
		// A restart of the apiserver (Expire) and a loaded machine can make
		// single steps slow.
		Timeout: time.Minute,
	}, func(t *testing.T) conformance.Source[*corev1.ConfigMap] {
		ns := createNamespace(t, cs, "conformance")
		return &kubeSource{
			kube:      kube,
			t:         t,
			cms:       configMaps{cs: cs, ns: ns},
			unwatched: configMaps{cs: cs, ns: unwatchedNS},
			lw:        kubeadapter.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(ns), kubeadapter.Config{PageSize: 2}),
		}
	})
}

// TestConformanceDynamic runs the suite again on the unstructured path: a
// custom resource created at test time, through the dynamic client.
func TestConformanceDynamic(t *testing.T) {
	kube := harness.StartKube(t)
	cs := kube.Client(t)
	gvr := createWidgetCRD(t, kube)
	dyn, err := dynamic.NewForConfig(kube.Config())
	if err != nil {
		t.Fatal(err)
	}
	unwatchedNS := createNamespace(t, cs, "conformance-unwatched")
	conformance.Run(t, conformance.Capabilities{
		DeletesCarryObject:  true,
		DistinguishesUpdate: true,
		ExactWriteRV:        true,
		Timeout:             time.Minute,
	}, func(t *testing.T) conformance.Source[*unstructured.Unstructured] {
		ns := createNamespace(t, cs, "conformance")
		return &widgetSource{
			kube:      kube,
			t:         t,
			ns:        ns,
			widgets:   dyn.Resource(gvr).Namespace(ns),
			unwatched: configMaps{cs: cs, ns: unwatchedNS},
			lw:        kubeadapter.NewDynamic(dyn, gvr, ns, kubeadapter.Config{PageSize: 2}),
		}
	})
}
