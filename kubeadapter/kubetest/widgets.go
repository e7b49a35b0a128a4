package kubetest

import (
	"context"
	"testing"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/internal/testkit/servers"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
)

// WidgetGVR is the custom resource WidgetCRD installs.
var WidgetGVR = schema.GroupVersionResource{Group: "test.dbinformer.io", Version: "v1", Resource: "widgets"}

// WidgetCRD installs the namespaced custom resource widgets.test.dbinformer.io
// (integers spec.size and spec.n) unless it exists, waits until the
// apiserver serves it, and returns WidgetGVR.
func WidgetCRD(tb testing.TB, kube *servers.Kube) schema.GroupVersionResource {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ext, err := apiextclient.NewForConfig(kube.Config())
	if err != nil {
		tb.Fatal(err)
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	crd := &apiextv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: WidgetGVR.Resource + "." + WidgetGVR.Group},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: WidgetGVR.Group,
			Scope: apiextv1.NamespaceScoped,
			Names: apiextv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextv1.CustomResourceDefinitionVersion{{
				Name: WidgetGVR.Version, Served: true, Storage: true,
				Schema: &apiextv1.CustomResourceValidation{OpenAPIV3Schema: &apiextv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextv1.JSONSchemaProps{"size": {Type: "integer"}, "n": {Type: "integer"}}},
					},
				}},
			}},
		},
	}
	for {
		// A definition being deleted (Widgets.Drop) must be gone before it
		// can be created again.
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = crds.Create(ctx, crd, metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				continue
			}
		}
		if err != nil {
			tb.Fatalf("kubetest: create CRD %s: %v", crd.Name, err)
		}
		if got.DeletionTimestamp == nil {
			break
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("kubetest: CRD %s still being deleted", crd.Name)
		case <-time.After(100 * time.Millisecond):
		}
	}
	dyn, err := dynamic.NewForConfig(kube.Config())
	if err != nil {
		tb.Fatal(err)
	}
	for {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			tb.Fatalf("kubetest: read CRD: %v", err)
		}
		established := false
		for _, c := range got.Status.Conditions {
			established = established || (c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue)
		}
		// Established can come a moment before the handler serves the
		// resource; a list proves it is served.
		if established {
			if _, err := dyn.Resource(WidgetGVR).List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
				return WidgetGVR
			}
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("kubetest: CRD %s never became established and served", crd.Name)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// NewWidget returns a Widget object with the given name and spec fields.
func NewWidget(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": WidgetGVR.GroupVersion().String(),
		"kind":       "Widget",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

// Widgets is a conformance.Harness over custom resources (WidgetCRD) in one
// fresh namespace, read as unstructured through the dynamic client.
// Objects carry their version in spec.n. It also implements
// conformance.Expirer, Unwatched, KeyMapper, Truth, Faults and Dropper.
type Widgets struct {
	*base
	widgets dynamic.ResourceInterface // direct
	res     *kubeinformer.Resource[*unstructured.Unstructured]
}

// NewWidgets installs WidgetCRD if needed, creates a namespace and returns
// a harness over its widgets, whose Resource reaches the apiserver through
// a proxy closed when the test ends.
func NewWidgets(tb testing.TB, kube *servers.Kube, opts Options) *Widgets {
	tb.Helper()
	gvr := WidgetCRD(tb, kube)
	b, cfg := newBase(tb, kube, "widgets")
	viaProxy, err := dynamic.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	direct, err := dynamic.NewForConfig(kube.Config())
	if err != nil {
		tb.Fatal(err)
	}
	res, err := kubeinformer.NewDynamic(context.Background(), viaProxy, gvr, b.ns, kubeinformer.Options{
		PageSize: opts.PageSize,
		Logger:   opts.Logger,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return &Widgets{base: b, widgets: direct.Resource(gvr).Namespace(b.ns), res: res}
}

// ListerWatcher is the Resource under test.
func (h *Widgets) ListerWatcher() driver.ListerWatcher[*unstructured.Unstructured] { return h.res }

// Resource is the Resource under test, with its concrete type.
func (h *Widgets) Resource() *kubeinformer.Resource[*unstructured.Unstructured] { return h.res }

// Client is the dynamic client of the harness's widgets, talking to the
// apiserver directly.
func (h *Widgets) Client() dynamic.ResourceInterface { return h.widgets }

// Put creates or updates the widget key with spec.n = n.
func (h *Widgets) Put(ctx context.Context, key string, n int64) (core.ResourceVersion, error) {
	u := NewWidget(key, map[string]any{"n": n})
	out, err := h.widgets.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *unstructured.Unstructured
		if cur, err = h.widgets.Get(ctx, key, metav1.GetOptions{}); err != nil {
			return 0, err
		}
		u.SetResourceVersion(cur.GetResourceVersion())
		out, err = h.widgets.Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		return 0, err
	}
	return driver.ParseResourceVersion(out.GetResourceVersion())
}

// Delete deletes the widget key and returns the delete's version.
func (h *Widgets) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	return DeleteAt(ctx, key,
		func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
			return h.widgets.List(ctx, lo)
		},
		h.widgets.Watch,
		func(ctx context.Context, name string, do metav1.DeleteOptions) error {
			return h.widgets.Delete(ctx, name, do)
		})
}

// Version reads spec.n; an object without one fails the test and reads as
// -1.
func (h *Widgets) Version(u *unstructured.Unstructured) int64 {
	n, ok, err := unstructured.NestedInt64(u.Object, "spec", "n")
	if !ok || err != nil {
		h.tb.Errorf("kubetest: widget %s/%s has no spec.n (%v)", u.GetNamespace(), u.GetName(), err)
		return -1
	}
	return n
}

// Drop deletes the widgets' CustomResourceDefinition, which deletes every
// widget and ends the resource's watches; the apiserver then answers 404
// for it (conformance.Dropper). The next NewWidgets or WidgetCRD waits for
// the delete to finish and installs it again.
func (h *Widgets) Drop(ctx context.Context) error {
	ext, err := apiextclient.NewForConfig(h.kube.Config())
	if err != nil {
		return err
	}
	return ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, WidgetGVR.Resource+"."+WidgetGVR.Group, metav1.DeleteOptions{})
}

// Truth lists the namespace's widgets directly: name -> version.
func (h *Widgets) Truth(ctx context.Context) (map[string]int64, error) {
	l, err := h.widgets.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(l.Items))
	for i := range l.Items {
		out[l.Items[i].GetName()] = h.Version(&l.Items[i])
	}
	return out, nil
}
