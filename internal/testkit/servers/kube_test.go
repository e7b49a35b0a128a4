package servers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestKubeSmoke(t *testing.T) {
	k := StartKube(t)
	cs := k.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	created, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke"},
		Data:       map[string]string{"hello": "world"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create configmap: %v", err)
	}
	list, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list configmaps: %v", err)
	}
	var found bool
	for _, cm := range list.Items {
		if cm.Name == "smoke" {
			found = cm.Data["hello"] == "world" && cm.ResourceVersion == created.ResourceVersion
		}
	}
	if !found {
		t.Fatalf("configmap default/smoke (version %s) not in the list at version %s: %d items", created.ResourceVersion, list.ResourceVersion, len(list.Items))
	}
}
