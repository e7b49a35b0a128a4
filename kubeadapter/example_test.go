package kubeinformer_test

import (
	"context"
	"fmt"
	"log"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/kubeadapter"
)

// Run dbinformer's informer over the ConfigMaps of one namespace, then read
// your own write through the cache.
func Example() {
	cfg, err := clientcmd.BuildConfigFromFlags("", clientcmd.RecommendedHomeFile)
	if err != nil {
		log.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	lw := kubeadapter.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps("default"), kubeadapter.Config{
		LabelSelector: "app=demo",
	})
	inf := core.NewSharedIndexInformer[*corev1.ConfigMap](lw, core.InformerOptions[*corev1.ConfigMap]{Name: "configmaps"})
	inf.AddEventHandler(core.ResourceEventHandlerFuncs[*corev1.ConfigMap]{
		UpdateFunc: func(key string, _, cm *corev1.ConfigMap) { fmt.Println("updated", key, cm.ResourceVersion) },
	})
	go inf.Run(ctx)
	if err := inf.WaitForCacheSync(ctx); err != nil {
		log.Fatal(err)
	}

	cm, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Labels: map[string]string{"app": "demo"}},
	}, metav1.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	rv, err := core.ParseResourceVersion(cm.ResourceVersion)
	if err != nil {
		log.Fatal(err)
	}
	if err := inf.WaitFor(ctx, rv); err != nil { // read your write
		log.Fatal(err)
	}
	cached, _ := inf.Lister().Get("default/demo")
	fmt.Println(cached.ResourceVersion == cm.ResourceVersion)
}
