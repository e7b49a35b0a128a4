package kubeinformer_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
)

// configMapsStandIn stands in for clientset.CoreV1().ConfigMaps("default"),
// so that the example runs without a cluster: the server it pretends to be
// lists two ConfigMaps at version 10, then reports an update of one at
// version 11.
type configMapsStandIn struct{}

func (configMapsStandIn) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	return &corev1.ConfigMapList{
		ListMeta: metav1.ListMeta{ResourceVersion: "10"},
		Items: []corev1.ConfigMap{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a", ResourceVersion: "9"}, Data: map[string]string{"greeting": "hi"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b", ResourceVersion: "10"}},
		},
	}, nil
}

func (configMapsStandIn) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w := watch.NewFakeWithChanSize(1, false)
	if opts.ResourceVersion == "10" {
		w.Modify(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a", ResourceVersion: "11"}, Data: map[string]string{"greeting": "hello"}})
	}
	return w, nil
}

// An informer over the ConfigMaps of one namespace: list, watch, read your
// write from the cache. With a cluster, pass
// clientset.CoreV1().ConfigMaps("default") instead of the stand-in.
func ExampleNewResource() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cms, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, configMapsStandIn{}, kubeinformer.Options{Namespace: "default"})
	if err != nil {
		log.Fatal(err)
	}
	inf := core.NewSharedIndexInformer(cms, core.InformerOptions[*corev1.ConfigMap]{Name: "configmaps"})
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := core.WaitForCacheSyncTimeout(ctx, time.Minute, inf); err != nil {
		log.Fatal(err)
	}
	var keys []string
	for _, cm := range inf.Lister().List(nil) {
		keys = append(keys, kubeinformer.Key(cm))
	}
	slices.Sort(keys)
	fmt.Println("cached:", keys)

	// The version of a write, as its response carries it.
	if err := inf.WaitFor(ctx, 11); err != nil {
		log.Fatal(err)
	}
	a, _ := inf.Lister().Get("default/a")
	fmt.Println("default/a:", a.Data["greeting"], "at version", a.ResourceVersion)
	// Output:
	// cached: [default/a default/b]
	// default/a: hello at version 11
}

// A custom resource, read as unstructured through the dynamic client. It
// needs a cluster (here from ~/.kube/config) with the resource installed.
func ExampleNewDynamic() {
	cfg, err := clientcmd.BuildConfigFromFlags("", clientcmd.RecommendedHomeFile)
	if err != nil {
		log.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	widgets, err := kubeinformer.NewDynamic(ctx, dyn, gvr, "default", kubeinformer.Options{LabelSelector: "app=demo"})
	if err != nil {
		log.Fatal(err)
	}
	inf := core.NewSharedIndexInformer(widgets, core.InformerOptions[*unstructured.Unstructured]{Name: "widgets"})
	go func() {
		// A removed CustomResourceDefinition stops the informer with an
		// error matching driver.ErrPermanent.
		if err := inf.Run(ctx); err != nil {
			log.Print(err)
		}
	}()
	if err := core.WaitForCacheSyncTimeout(ctx, time.Minute, inf); err != nil {
		log.Fatal(err)
	}
	for _, w := range inf.Lister().List(nil) {
		fmt.Println(w.GetNamespace(), w.GetName(), w.GetResourceVersion())
	}
}

// Read your own write against a real cluster: the version an API call
// returns is what WaitFor waits for.
func Example_readYourWrites() {
	cfg, err := clientcmd.BuildConfigFromFlags("", clientcmd.RecommendedHomeFile)
	if err != nil {
		log.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cms, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, cs.CoreV1().ConfigMaps("default"),
		kubeinformer.Options{Namespace: "default", LabelSelector: "app=demo"})
	if err != nil {
		log.Fatal(err)
	}
	inf := core.NewSharedIndexInformer(cms, core.InformerOptions[*corev1.ConfigMap]{Name: "configmaps"})
	go inf.Run(ctx)
	if err := core.WaitForCacheSyncTimeout(ctx, time.Minute, inf); err != nil {
		log.Fatal(err)
	}

	cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Labels: map[string]string{"app": "demo"}},
	}, metav1.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	rv, err := driver.ParseResourceVersion(cm.ResourceVersion)
	if err != nil {
		log.Fatal(err)
	}
	if err := inf.WaitFor(ctx, rv); err != nil {
		log.Fatal(err)
	}
	cached, _ := inf.Lister().Get("default/demo")
	fmt.Println(cached.ResourceVersion == cm.ResourceVersion)
}
