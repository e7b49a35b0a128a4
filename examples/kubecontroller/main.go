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
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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
	"github.com/dbinformer/dbinformer/statuspage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "kubecontroller:", err)
		os.Exit(1)
	}
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
	status := fs.String("status", "", "serve the status page (/debug/informers/), /readyz and /livez on this address, e.g. 127.0.0.1:8080 (default: off)")
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
	page := statuspage.New(statuspage.Options{Title: "kubecontroller"})
	configMaps := core.NewSharedIndexInformer[*corev1.ConfigMap](cmSource,
		core.InformerOptions[*corev1.ConfigMap]{Name: "configmaps", Logger: log,
			Metrics: page, ErrorHandler: page.ErrorHandlerLogger("configmaps", nil, log)})
	pods := core.NewSharedIndexInformer[*corev1.Pod](podSource,
		core.InformerOptions[*corev1.Pod]{Name: "pods", Logger: log,
			Metrics: page, ErrorHandler: page.ErrorHandlerLogger("pods", nil, log)})
	page.Add(configMaps)
	page.Add(pods)

	if *status != "" {
		ln, err := net.Listen("tcp", *status)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/debug/informers/", page) // status page, ?format=json, readyz, livez
		mux.Handle("GET /readyz", page.ReadyHandler())
		mux.Handle("GET /livez", page.LiveHandler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		fmt.Fprintf(stderr, "status page: http://%s/debug/informers/\n", ln.Addr())
	}
	// One queue of keys per kind, fed by the stock handler: a worker reads
	// the current state back from the cache.
	cmQueue := workqueue.New(workqueue.Options[string]{Name: "configmaps", MetricsProvider: page})
	podQueue := workqueue.New(workqueue.Options[string]{Name: "pods", MetricsProvider: page})
	defer cmQueue.ShutDown()
	defer podQueue.ShutDown()
	if _, err := configMaps.AddEventHandler(workqueue.EnqueueKeys[*corev1.ConfigMap](cmQueue)); err != nil {
		return err
	}
	if _, err := pods.AddEventHandler(workqueue.EnqueueKeys[*corev1.Pod](podQueue)); err != nil {
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
	for _, c := range []struct {
		kind      string
		queue     *workqueue.Queue[string]
		reconcile func(key string) error
	}{{"configmap", cmQueue, r.configMap}, {"pod", podQueue, r.pod}} {
		for range max(*workers, 1) {
			wg.Go(func() {
				for {
					key, shutdown := c.queue.Get()
					if shutdown {
						return
					}
					if err := c.reconcile(key); err != nil {
						log.Warn("reconcile failed; retrying", "kind", c.kind, "key", key, "err", err)
						c.queue.AddRateLimited(key)
					} else {
						c.queue.Forget(key)
					}
					c.queue.Done(key)
				}
			})
		}
	}

	<-ctx.Done()
	// Stop taking new work, let the workers finish what they hold.
	cmQueue.ShutDown()
	podQueue.ShutDown()
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

// reconciler reads the cache, never the API: a reconcile sees the latest
// state the informer holds for the key, whatever changes led there.
type reconciler struct {
	configMaps core.Lister[*corev1.ConfigMap]
	pods       core.Lister[*corev1.Pod]
	out        io.Writer
}

// configMap reconciles one ConfigMap key.
func (r reconciler) configMap(key string) error {
	cm, ok := r.configMaps.Get(key)
	if !ok {
		fmt.Fprintf(r.out, "reconciled configmap %s: deleted\n", key)
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
	fmt.Fprintf(r.out, "reconciled configmap %s: version %s, keys [%s]\n", key, cm.ResourceVersion, strings.Join(keys, " "))
	return nil
}

// pod reconciles one Pod key.
func (r reconciler) pod(key string) error {
	pod, ok := r.pods.Get(key)
	if !ok {
		fmt.Fprintf(r.out, "reconciled pod %s: deleted\n", key)
		return nil
	}
	fmt.Fprintf(r.out, "reconciled pod %s: version %s, phase %s, %d containers\n", key, pod.ResourceVersion, pod.Status.Phase, len(pod.Spec.Containers))
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
