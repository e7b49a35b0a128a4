package kubeinformer

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/homedir"
)

// LoadConfig finds the cluster the way kubectl does, which is what a user
// running a controller from a terminal expects (controller-runtime's
// GetConfig does the same): the kubeconfig file at path when path is not
// empty; else the files listed in $KUBECONFIG; else ~/.kube/config; else,
// inside a pod, the pod's service account. The current context of the
// file decides cluster and user.
//
// clientcmd.BuildConfigFromFlags, the usual one-liner, skips $KUBECONFIG,
// so a controller built on it talks to another cluster than kubectl does.
// The config's Timeout is left at zero (see "Timeouts" in the package
// documentation).
func LoadConfig(path string) (*rest.Config, error) {
	// The home file is found now, not when the process started (as
	// clientcmd.RecommendedHomeFile is): a program that sets $HOME, or a
	// test, gets the file it means.
	home := filepath.Join(homedir.HomeDir(), clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)
	precedence := []string{home}
	if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		precedence = filepath.SplitList(env)
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path, Precedence: precedence}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	switch {
	case clientcmd.IsEmptyConfig(err):
		return nil, fmt.Errorf("kubeinformer: no Kubernetes config found: pass a kubeconfig file, set $KUBECONFIG, create %s, or run inside a pod: %w", home, err)
	case err != nil && path != "":
		return nil, fmt.Errorf("kubeinformer: load the kubeconfig %s: %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("kubeinformer: load the Kubernetes config: %w", err)
	}
	return cfg, nil
}

// NewClientset is LoadConfig(path) made into the typed clientset whose
// resource clients (cs.CoreV1().ConfigMaps(ns), ...) NewResource takes.
func NewClientset(path string) (*kubernetes.Clientset, error) {
	cfg, err := LoadConfig(path)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeinformer: a client for %s: %w", cfg.Host, err)
	}
	return cs, nil
}
