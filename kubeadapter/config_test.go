package kubeinformer_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dbinformer/dbinformer/integration/harness"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
)

// LoadConfig finds the cluster as kubectl does: an explicit file first,
// then $KUBECONFIG, then ~/.kube/config; with none of them (and outside a
// pod) its error names every place it looked.
func TestLoadConfig(t *testing.T) {
	kube := harness.StartKube(t)
	reaches := func(t *testing.T, path string) {
		t.Helper()
		cfg, err := kubeinformer.LoadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != kube.Config().Host {
			t.Fatalf("LoadConfig(%q) found host %s, want the test cluster's %s", path, cfg.Host, kube.Config().Host)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("the config LoadConfig(%q) found does not reach the cluster: %v", path, err)
		}
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a pod
	t.Setenv("KUBECONFIG", "")

	t.Run("explicit path", func(t *testing.T) { reaches(t, kube.Kubeconfig()) })
	t.Run("NewClientset", func(t *testing.T) {
		cs, err := kubeinformer.NewClientset(kube.Kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("NewClientset's clientset does not reach the cluster: %v", err)
		}
		if _, err := kubeinformer.NewClientset(filepath.Join(home, "nope.yaml")); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
			t.Fatalf("NewClientset of a missing file: %v, want an error naming it", err)
		}
	})
	t.Run("$KUBECONFIG", func(t *testing.T) {
		t.Setenv("KUBECONFIG", filepath.Join(home, "missing")+string(os.PathListSeparator)+kube.Kubeconfig())
		reaches(t, "")
	})
	t.Run("~/.kube/config", func(t *testing.T) {
		data, err := os.ReadFile(kube.Kubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(home, ".kube", "config")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(file)
		reaches(t, "")
	})
	t.Run("none", func(t *testing.T) {
		_, err := kubeinformer.LoadConfig("")
		if err == nil || !strings.Contains(err.Error(), "no Kubernetes config found") || !strings.Contains(err.Error(), "$KUBECONFIG") {
			t.Fatalf("LoadConfig with no config anywhere: %v, want an error naming where it looked", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		missing := filepath.Join(home, "nope.yaml")
		_, err := kubeinformer.LoadConfig(missing)
		if err == nil || !strings.Contains(err.Error(), missing) {
			t.Fatalf("LoadConfig(%q): %v, want an error naming the file", missing, err)
		}
	})
}
