// Command kubecontroller reconciles the ConfigMaps and Pods of a namespace (or of
// all) with package controller, printing what each reconcile sees. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/dbinformer/dbinformer/controller"
	"github.com/dbinformer/dbinformer/core"
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

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kubecontroller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
	ns := fs.String("namespace", "", "namespace to watch (default: all namespaces)")
	selector := fs.String("selector", "", "label selector for both resources")
	workers := fs.Int("workers", 2, "reconcile workers per kind")
	syncTimeout := fs.Duration("sync-timeout", 2*time.Minute, "give up if the caches have not filled by then (0: wait forever)")
	verbose := fs.Bool("v", false, "log informer internals")
	status := fs.String("status", "", "serve /healthz, /readyz, /metrics and /debug/informers/ on this address (default: off)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: map[bool]slog.Level{true: slog.LevelDebug}[*verbose]}))
	cs, err := kubeinformer.NewClientset(*kubeconfig)
	if err != nil {
		return err
	}
	mgr, opts := controller.NewManager(controller.ManagerOptions{Name: "kubecontroller", Addr: *status, SyncTimeout: *syncTimeout, Logger: log}),
		kubeinformer.Options{Namespace: *ns, LabelSelector: *selector, Logger: log}
	if err := errors.Join(watch(ctx, mgr, "configmap", *workers, cs.CoreV1().ConfigMaps(*ns), opts, stdout, func(cm *corev1.ConfigMap) string {
		return fmt.Sprint("keys ", slices.Sorted(func(y func(string) bool) { maps.Keys(cm.Data)(y); maps.Keys(cm.BinaryData)(y) }))
	}), watch(ctx, mgr, "pod", *workers, cs.CoreV1().Pods(*ns), opts, stdout, func(p *corev1.Pod) string {
		return fmt.Sprintf("phase %s, %d containers", p.Status.Phase, len(p.Spec.Containers))
	})); err != nil {
		return err
	}
	defer fmt.Fprintln(stdout, "kubecontroller: stopped")
	return mgr.Run(ctx)
}

// watch runs a controller of kind that prints what the cache holds.
func watch[T kubeinformer.Object, L runtime.Object](ctx context.Context, mgr *controller.Manager, kind string, workers int,
	client kubeinformer.Client[L], opts kubeinformer.Options, out io.Writer, describe func(T) string) error {
	src, err := kubeinformer.NewResource[T](ctx, client, opts)
	if err != nil {
		return err
	}
	inf := controller.Informer(mgr, kind+"s", src, core.InformerOptions[T]{Logger: opts.Logger})
	_, err = controller.For(mgr, inf, controller.Func[string](func(_ context.Context, key string) (controller.Result, error) {
		if obj, ok := inf.Lister().Get(key); ok {
			fmt.Fprintf(out, "reconciled %s %s: version %s, %s\n", kind, key, obj.GetResourceVersion(), describe(obj))
		} else {
			fmt.Fprintf(out, "reconciled %s %s: deleted\n", kind, key)
		}
		return controller.Result{}, nil
	}), controller.Options[string]{Workers: workers})
	return err
}
