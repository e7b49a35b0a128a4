// Command kubecontroller is a small Kubernetes controller built on
// dbinformer's core instead of client-go's informers: it watches the
// ConfigMaps and Pods of a namespace (or of all namespaces) through
// kubeinformer, feeds their keys into a rate-limited WorkQueue, and prints
// what each reconcile sees in the cache. Ctrl-C (SIGINT) or SIGTERM stops it
// cleanly: the queue drains, workers finish, informers stop.
//
//	go run ./examples/kubecontroller --kubeconfig ~/.kube/config --namespace default
//
// Without --kubeconfig it uses $KUBECONFIG or ~/.kube/config, and inside a
// pod the in-cluster service account. The identity needs list and watch on
// configmaps and pods.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/workqueue"
	kubeinformer "github.com/dbinformer/dbinformer/kubeadapter"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "kubecontroller:", err)
		os.Exit(1)
	}
}

// item is one unit of work: which kind of object, and its key.
type item struct {
	kind string // "configmap" or "pod"
	key  string // namespace/name
}

// run parses args, runs the controller until ctx is done and returns nil
// after a clean stop.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kubecontroller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster config)")
	namespace := fs.String("namespace", "", "namespace to watch (default: all namespaces)")
	selector := fs.String("selector", "", "label selector for both resources")
	workers := fs.Int("workers", 2, "reconcile workers")
	syncTimeout := fs.Duration("sync-timeout", 2*time.Minute, "give up if the caches have not filled by then (0: wait forever)")
	verbose := fs.Bool("v", false, "log informer internals")
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	cfg, err := loadConfig(*kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	opts := kubeinformer.Options{Namespace: *namespace, LabelSelector: *selector, Logger: log}
	cmSource, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, cs.CoreV1().ConfigMaps(*namespace), opts)
	if err != nil {
		return err
	}
	podSource, err := kubeinformer.NewResource[*corev1.Pod](ctx, cs.CoreV1().Pods(*namespace), opts)
	if err != nil {
		return err
	}
	configMaps := core.NewSharedIndexInformer[*corev1.ConfigMap](cmSource,
		core.InformerOptions[*corev1.ConfigMap]{Name: "configmaps", Logger: log})
	pods := core.NewSharedIndexInformer[*corev1.Pod](podSource,
		core.InformerOptions[*corev1.Pod]{Name: "pods", Logger: log})

	queue := workqueue.New(workqueue.Options[item]{Name: "kubecontroller"})
	defer queue.ShutDown()
	if err := enqueueChanges(configMaps, queue, "configmap"); err != nil {
		return err
	}
	if err := enqueueChanges(pods, queue, "pod"); err != nil {
		return err
	}

	infCtx, stopInformers := context.WithCancel(context.Background())
	var informers sync.WaitGroup
	for _, runInformer := range []func(context.Context) error{configMaps.Run, pods.Run} {
		informers.Add(1)
		go func() {
			defer informers.Done()
			if err := runInformer(infCtx); err != nil {
				log.Error("informer stopped", "err", err)
			}
		}()
	}
	defer func() {
		stopInformers()
		informers.Wait()
	}()
	if err := core.WaitForCacheSyncTimeout(ctx, *syncTimeout, configMaps, pods); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted before the caches filled
		}
		return err
	}

	out := &lockedWriter{w: stdout}
	fmt.Fprintf(out, "kubecontroller: caches synced (%d configmaps, %d pods); watching %s\n",
		configMaps.Lister().Len(), pods.Lister().Len(), describeScope(*namespace))

	r := reconciler{configMaps: configMaps.Lister(), pods: pods.Lister(), out: out}
	var wg sync.WaitGroup
	for range max(*workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				it, shutdown := queue.Get()
				if shutdown {
					return
				}
				if err := r.reconcile(it); err != nil {
					log.Warn("reconcile failed; retrying", "kind", it.kind, "key", it.key, "err", err)
					queue.AddRateLimited(it)
				} else {
					queue.Forget(it)
				}
				queue.Done(it)
			}
		}()
	}

	<-ctx.Done()
	// Stop taking new work, let the workers finish what they hold.
	queue.ShutDown()
	wg.Wait()
	fmt.Fprintln(out, "kubecontroller: stopped")
	return nil
}

// loadConfig follows kubectl's rules: an explicit file, else $KUBECONFIG or
// ~/.kube/config, else the in-cluster service account.
func loadConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "dbinformer-kubecontroller"
	return cfg, nil
}

func describeScope(ns string) string {
	if ns == "" {
		return "all namespaces"
	}
	return "namespace " + ns
}

// enqueueChanges puts the key of every change of inf into queue.
func enqueueChanges[T any](inf *core.SharedIndexInformer[T], queue *workqueue.Queue[item], kind string) error {
	add := func(key string) { queue.Add(item{kind: kind, key: key}) }
	_, err := inf.AddEventHandler(core.ResourceEventHandlerFuncs[T]{
		AddFunc:    func(key string, _ T, _ bool) { add(key) },
		UpdateFunc: func(key string, _, _ T) { add(key) },
		DeleteFunc: func(key string, _ T, _ bool) { add(key) },
	})
	return err
}

// reconciler reads the cache, never the API: a reconcile sees the latest
// state the informer holds for the key, whatever changes led there.
type reconciler struct {
	configMaps core.Lister[*corev1.ConfigMap]
	pods       core.Lister[*corev1.Pod]
	out        io.Writer
}

func (r reconciler) reconcile(it item) error {
	switch it.kind {
	case "configmap":
		cm, ok := r.configMaps.Get(it.key)
		if !ok {
			fmt.Fprintf(r.out, "reconciled configmap %s: deleted\n", it.key)
			return nil
		}
		keys := make([]string, 0, len(cm.Data)+len(cm.BinaryData))
		for k := range cm.Data {
			keys = append(keys, k)
		}
		for k := range cm.BinaryData {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(r.out, "reconciled configmap %s: version %s, keys [%s]\n", it.key, cm.ResourceVersion, strings.Join(keys, " "))
	case "pod":
		pod, ok := r.pods.Get(it.key)
		if !ok {
			fmt.Fprintf(r.out, "reconciled pod %s: deleted\n", it.key)
			return nil
		}
		fmt.Fprintf(r.out, "reconciled pod %s: version %s, phase %s, %d containers\n", it.key, pod.ResourceVersion, pod.Status.Phase, len(pod.Spec.Containers))
	default:
		return errors.New("unknown kind " + it.kind)
	}
	return nil
}

// lockedWriter serialises the workers' lines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
