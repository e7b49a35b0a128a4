package kubeadapter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/dbinformer/dbinformer/core"
)

// Object is what a ListerWatcher produces: a Kubernetes object with
// metadata, such as *corev1.ConfigMap or *unstructured.Unstructured.
type Object interface {
	runtime.Object
	metav1.Object
}

// Client is the List/Watch shape shared by every typed client-go resource
// interface (clientset.CoreV1().ConfigMaps(ns), .Pods(ns), generated clients
// of CRDs) and by the dynamic client (dynamic.ResourceInterface). L is the
// list type, such as *corev1.ConfigMapList.
type Client[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Config tunes a ListerWatcher. The zero value lists and watches everything
// the client can see, 500 objects per page.
type Config struct {
	// LabelSelector and FieldSelector restrict the watched set, with the
	// syntax of metav1.ListOptions; they are passed to every List and Watch.
	LabelSelector string
	FieldSelector string
	// PageSize is the Limit of each List page. 0 means 500.
	PageSize int64
	// Source names the watched set in errors and logs. Empty means one is
	// derived from the object type (and the resource, for NewDynamic).
	Source string
	// Logger receives debug logs about watch restarts. nil discards them.
	Logger *slog.Logger
}

// ListerWatcher is a core.ListerWatcher over one Kubernetes resource. Keys
// are "namespace/name", or "name" for cluster-scoped objects, exactly as
// client-go's cache.MetaNamespaceKeyFunc makes them. Versions are
// metadata.resourceVersion parsed as an unsigned decimal number.
type ListerWatcher[T Object] struct {
	list   func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch  func(context.Context, metav1.ListOptions) (watch.Interface, error)
	cfg    Config
	source string
	log    *slog.Logger
}

var (
	_ core.ListerWatcher[*unstructured.Unstructured] = (*ListerWatcher[*unstructured.Unstructured])(nil)
	_ core.HeadReader                                = (*ListerWatcher[*unstructured.Unstructured])(nil)
	_ core.ProgressRequester                         = (*watcher[*unstructured.Unstructured])(nil)
)

// New returns a ListerWatcher over a typed client-go resource interface.
// Name the object type; the list type is inferred:
//
//	lw := kubeadapter.New[*corev1.ConfigMap](clientset.CoreV1().ConfigMaps("default"), kubeadapter.Config{})
//
// Namespace scope comes from the client (ConfigMaps("") watches all
// namespaces).
func New[T Object, L runtime.Object](client Client[L], cfg Config) *ListerWatcher[T] {
	if cfg.Source == "" {
		var zero T
		cfg.Source = "kubernetes " + typeName(reflect.TypeOf(zero))
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 500
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ListerWatcher[T]{
		list: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			l, err := client.List(ctx, opts)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		watch:  client.Watch,
		cfg:    cfg,
		source: cfg.Source,
		log:    log.With("source", cfg.Source),
	}
}

// NewDynamic returns a ListerWatcher over any resource, including custom
// resources, through the dynamic client. namespace "" means all namespaces
// (or a cluster-scoped resource).
func NewDynamic(client dynamic.Interface, gvr schema.GroupVersionResource, namespace string, cfg Config) *ListerWatcher[*unstructured.Unstructured] {
	if cfg.Source == "" {
		cfg.Source = "kubernetes " + gvr.String()
		if namespace != "" {
			cfg.Source += " in namespace " + namespace
		}
	}
	var ri dynamic.ResourceInterface = client.Resource(gvr)
	if namespace != "" {
		ri = client.Resource(gvr).Namespace(namespace)
	}
	return New[*unstructured.Unstructured](ri, cfg)
}

func typeName(t reflect.Type) string {
	if t == nil {
		return "objects"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if p := t.PkgPath(); p != "" {
		return p + "." + t.Name()
	}
	return t.String()
}

// Key returns the cache key of a Kubernetes object: "namespace/name", or
// "name" when the object has no namespace.
func Key(obj metav1.Object) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

// List reads every object page by page. The first page is a consistent
// read at the server's current version; every later page is pinned to that
// version by its continue token, so the pages form one snapshot. If the
// snapshot expires between pages (etcd compacted it), List fails with an
// error matching core.ErrExpired and the caller lists again from scratch.
func (lw *ListerWatcher[T]) List(ctx context.Context, opts core.ListOptions[T]) (core.ResourceVersion, error) {
	lo := metav1.ListOptions{
		LabelSelector: lw.cfg.LabelSelector,
		FieldSelector: lw.cfg.FieldSelector,
		Limit:         lw.cfg.PageSize,
	}
	var listRV core.ResourceVersion
	for page := 1; ; page++ {
		obj, err := lw.list(ctx, lo)
		if err != nil {
			if lo.Continue != "" && isExpired(err) {
				return 0, fmt.Errorf("%s: list page %d: the snapshot at version %d expired before the list finished: %w: %w", lw.source, page, listRV, core.ErrExpired, err)
			}
			return 0, lw.apiError(fmt.Sprintf("list page %d", page), err)
		}
		lm, err := meta.ListAccessor(obj)
		if err != nil {
			return 0, fmt.Errorf("%s: list page %d: %T is not a list: %w", lw.source, page, obj, err)
		}
		rv, err := core.ParseResourceVersion(lm.GetResourceVersion())
		if err != nil {
			return 0, fmt.Errorf("%s: list page %d: %w", lw.source, page, err)
		}
		if page == 1 {
			if rv == 0 {
				return 0, fmt.Errorf("%s: list: the server returned no resourceVersion", lw.source)
			}
			listRV = rv
			if opts.Estimate != nil {
				n := int64(meta.LenList(obj))
				if rem := lm.GetRemainingItemCount(); rem != nil {
					n += *rem
				}
				opts.Estimate(n)
			}
		} else if rv != listRV {
			return 0, fmt.Errorf("%s: list page %d is at version %d, the first page at %d: the pages are not one snapshot", lw.source, page, rv, listRV)
		}
		// WithAlloc: each cached object gets its own copy instead of
		// pinning the whole page's array for as long as any item lives.
		err = meta.EachListItemWithAlloc(obj, func(o runtime.Object) error {
			ev, err := lw.event(core.Added, o)
			if err != nil {
				return err
			}
			return opts.Emit(ev)
		})
		if err != nil {
			return 0, err
		}
		if lo.Continue = lm.GetContinue(); lo.Continue == "" {
			return listRV, nil
		}
	}
}

// Head returns the server's current resourceVersion, read with a consistent
// one-object list of this resource.
func (lw *ListerWatcher[T]) Head(ctx context.Context) (core.ResourceVersion, error) {
	obj, err := lw.list(ctx, metav1.ListOptions{
		LabelSelector: lw.cfg.LabelSelector,
		FieldSelector: lw.cfg.FieldSelector,
		Limit:         1,
	})
	if err != nil {
		return 0, lw.apiError("read head version", err)
	}
	lm, err := meta.ListAccessor(obj)
	if err != nil {
		return 0, fmt.Errorf("%s: read head version: %T is not a list: %w", lw.source, obj, err)
	}
	rv, err := core.ParseResourceVersion(lm.GetResourceVersion())
	if err != nil {
		return 0, fmt.Errorf("%s: read head version: %w", lw.source, err)
	}
	return rv, nil
}

// event turns one object from the server into an Event. An object of the
// wrong type becomes an Event with a DecodeError; a resourceVersion that is
// not a number fails the whole call, since no later version could be
// ordered against it.
func (lw *ListerWatcher[T]) event(typ core.EventType, o runtime.Object) (core.Event[T], error) {
	m, err := meta.Accessor(o)
	if err != nil {
		return core.Event[T]{}, fmt.Errorf("%s: the server sent a %T without object metadata: %w", lw.source, o, err)
	}
	key := Key(m)
	rv, err := core.ParseResourceVersion(m.GetResourceVersion())
	if err != nil {
		return core.Event[T]{}, fmt.Errorf("%s: object %q: %w", lw.source, key, err)
	}
	if rv == 0 {
		return core.Event[T]{}, fmt.Errorf("%s: object %q has no resourceVersion", lw.source, key)
	}
	t, ok := o.(T)
	if !ok {
		var zero T
		return core.Event[T]{Type: typ, Key: key, RV: rv, Err: &core.DecodeError{
			Source: lw.source, Key: key, RV: rv,
			Err: fmt.Errorf("the server sent a %T, want %T", o, zero),
		}}, nil
	}
	return core.Event[T]{Type: typ, Key: key, Object: t, HasObject: true, RV: rv}, nil
}

// apiError names the source and maps the errors that mean "this version is
// gone" to core.ErrExpired.
func (lw *ListerWatcher[T]) apiError(what string, err error) error {
	if isExpired(err) {
		return fmt.Errorf("%s: %s: %w: %w", lw.source, what, core.ErrExpired, err)
	}
	return fmt.Errorf("%s: %s: %w", lw.source, what, err)
}

// isExpired reports the apiserver's ways of saying that a version cannot
// be served: 410 Gone / Expired (compacted, or older than the watch cache)
// and "too large resource version" (the server has not seen it, e.g. after
// etcd was restored), which client-go's reflector also answers by listing
// again.
func isExpired(err error) bool {
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) ||
		apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		return true
	}
	var st apierrors.APIStatus
	return errors.As(err, &st) && st.Status().Code == http.StatusGone
}
