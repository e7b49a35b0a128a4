package kubeinformer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/filter"
)

// Object is what a Resource produces: a Kubernetes object with metadata,
// such as *corev1.ConfigMap or *unstructured.Unstructured.
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

// Options tunes a Resource. The zero value lists and watches everything the
// client can see, 500 objects per page.
type Options struct {
	// LabelSelector and FieldSelector restrict the watched set, with the
	// syntax of metav1.ListOptions; they are passed to every List and Watch.
	LabelSelector string
	FieldSelector string
	// PageSize is the Limit of each List page. 0 means 500; negative is an
	// error.
	PageSize int64
	// Namespace is the namespace the client is scoped to, for NewResource,
	// whose typed client does not tell it: it names the source in errors
	// and logs ("... in namespace x"), and every object the server sends
	// must be in it (one that is not fails the List or Watch with an error
	// matching driver.ErrPermanent: the client and the options disagree). It
	// never changes what is watched; the client does that. Empty means
	// unknown (all namespaces, a cluster-scoped resource, or not said).
	// NewDynamic sets it from its namespace argument.
	Namespace string
	// Source names the watched set in errors and logs. Empty means one is
	// derived from the object type (or, for NewDynamic, the resource) and
	// Namespace.
	Source string
	// Logger receives debug logs about watch restarts and progress
	// requests. nil discards them.
	Logger *slog.Logger
	// ProgressInterval is how often an open watch is expected to show a
	// sign of life (driver.ProgressIntervaler): after each interval without
	// events the informer asks it for a bookmark (see Watch; it costs a
	// one-object list, and a short watch when the version moved), and a
	// watch that answers none for driver.StuckIntervals intervals is
	// reopened. Zero means DefaultProgressInterval; negative turns
	// stuck-watch detection off.
	ProgressInterval time.Duration
}

// DefaultProgressInterval is Options.ProgressInterval when zero.
const DefaultProgressInterval = 10 * time.Second

// Resource is a driver.ListerWatcher over one Kubernetes resource, in one
// namespace or all. Keys are "namespace/name", or "name" for cluster-scoped
// objects, exactly as client-go's cache.MetaNamespaceKeyFunc makes them.
// Versions are metadata.resourceVersion parsed as an unsigned decimal
// number. A Resource holds no connection of its own (the client does) and
// needs no Close; it is safe for concurrent use.
type Resource[T Object] struct {
	list   func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch  func(context.Context, metav1.ListOptions) (watch.Interface, error)
	opts   Options
	source string
	log    *slog.Logger
	// residue is the part of a Where filter evaluated here; nil:
	// unfiltered.
	residue *filter.Filter[T]
}

var (
	_ driver.ListerWatcher[*unstructured.Unstructured] = (*Resource[*unstructured.Unstructured])(nil)
	_ driver.HeadReader                                = (*Resource[*unstructured.Unstructured])(nil)
	_ driver.ProgressReporter                          = (*Resource[*unstructured.Unstructured])(nil)
	_ driver.HealWaiter                                = (*Resource[*unstructured.Unstructured])(nil)
	_ driver.ProgressIntervaler                        = (*Resource[*unstructured.Unstructured])(nil)
)

// NewResource returns a Resource over a typed client-go resource interface.
// Name the object type; the list type is inferred:
//
//	cms, err := kubeinformer.NewResource[*corev1.ConfigMap](ctx, clientset.CoreV1().ConfigMaps("default"),
//		kubeinformer.Options{Namespace: "default"})
//
// Namespace scope comes from the client (ConfigMaps("") watches all
// namespaces); set Options.Namespace to the same namespace so that errors
// and logs name it. NewResource does no I/O: it only checks opts. ctx is
// not kept.
func NewResource[T Object, L runtime.Object](ctx context.Context, client Client[L], opts Options) (*Resource[T], error) {
	if client == nil {
		return nil, errors.New("kubeinformer: NewResource: nil client")
	}
	if opts.Source == "" {
		var zero T
		opts.Source = "kubernetes " + typeName(reflect.TypeOf(zero))
		if opts.Namespace != "" {
			opts.Source += " in namespace " + opts.Namespace
		}
	}
	if opts.PageSize < 0 {
		return nil, fmt.Errorf("kubeinformer: %s: PageSize %d is negative", opts.Source, opts.PageSize)
	}
	if opts.PageSize == 0 {
		opts.PageSize = 500
	}
	if opts.ProgressInterval == 0 {
		opts.ProgressInterval = DefaultProgressInterval
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Resource[T]{
		list: func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
			l, err := client.List(ctx, lo)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		watch:  client.Watch,
		opts:   opts,
		source: opts.Source,
		log:    log.With("source", opts.Source),
	}, nil
}

// NewDynamic returns a Resource over any resource, custom resources
// included, read as *unstructured.Unstructured through the dynamic client.
// namespace "" means all namespaces (or a cluster-scoped resource);
// opts.Namespace, if set, must equal it. NewDynamic does no I/O: a resource
// the server does not serve shows up at the first List, as an error
// matching driver.ErrPermanent.
func NewDynamic(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, namespace string, opts Options) (*Resource[*unstructured.Unstructured], error) {
	if client == nil {
		return nil, errors.New("kubeinformer: NewDynamic: nil client")
	}
	if gvr.Resource == "" || gvr.Version == "" {
		return nil, fmt.Errorf("kubeinformer: NewDynamic: %q names no resource (want version and resource, and the group unless it is the core group)", gvr.String())
	}
	if opts.Namespace != "" && opts.Namespace != namespace {
		return nil, fmt.Errorf("kubeinformer: NewDynamic: Options.Namespace %q differs from the namespace argument %q", opts.Namespace, namespace)
	}
	opts.Namespace = namespace
	if opts.Source == "" {
		opts.Source = "kubernetes " + gvr.String()
		if namespace != "" {
			opts.Source += " in namespace " + namespace
		}
	}
	var ri dynamic.ResourceInterface = client.Resource(gvr)
	if namespace != "" {
		ri = client.Resource(gvr).Namespace(namespace)
	}
	return NewResource[*unstructured.Unstructured](ctx, ri, opts)
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

// ProgressInterval implements driver.ProgressIntervaler with
// Options.ProgressInterval (DefaultProgressInterval when zero, 0 when
// negative).
func (r *Resource[T]) ProgressInterval() time.Duration { return max(r.opts.ProgressInterval, 0) }

// ReportsProgress reports true: a watch answers every request on
// driver.WatchOptions.Progress with a bookmark from the server (see Watch).
func (r *Resource[T]) ReportsProgress() bool { return true }

// List reads every object page by page. The first page is a consistent
// read at the server's current version; every later page is pinned to that
// version by its continue token, so the pages form one snapshot. If the
// snapshot expires between pages (etcd compacted it), List fails with an
// error matching driver.ErrExpired and the caller lists again from scratch.
// A resource the server does not serve (a CRD that is not installed, or was
// removed) fails with an error matching driver.ErrPermanent.
func (r *Resource[T]) List(ctx context.Context, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	lo := metav1.ListOptions{
		LabelSelector: r.opts.LabelSelector,
		FieldSelector: r.opts.FieldSelector,
		Limit:         r.opts.PageSize,
	}
	var listRV core.ResourceVersion
	for page := 1; ; page++ {
		obj, err := r.list(ctx, lo)
		if err != nil {
			if lo.Continue != "" && isExpired(err) {
				return 0, fmt.Errorf("%s: list page %d: the snapshot at version %d expired before the list finished: %w: %w", r.source, page, listRV, driver.ErrExpired, err)
			}
			return 0, r.apiError(fmt.Sprintf("list page %d", page), err)
		}
		lm, err := meta.ListAccessor(obj)
		if err != nil {
			return 0, fmt.Errorf("%s: list page %d: %T is not a list: %w", r.source, page, obj, err)
		}
		rv, err := driver.ParseResourceVersion(lm.GetResourceVersion())
		if err != nil {
			return 0, fmt.Errorf("%s: list page %d: %w", r.source, page, err)
		}
		if page == 1 {
			if rv == 0 {
				return 0, fmt.Errorf("%s: list: the server returned no resourceVersion", r.source)
			}
			listRV = rv
			if sink.Estimate != nil {
				n := int64(meta.LenList(obj))
				if rem := lm.GetRemainingItemCount(); rem != nil {
					n += *rem
				}
				sink.Estimate(n)
			}
		} else if rv != listRV {
			return 0, fmt.Errorf("%s: list page %d is at version %d, the first page at %d: the pages are not one snapshot", r.source, page, rv, listRV)
		}
		// WithAlloc: each cached object gets its own copy instead of
		// pinning the whole page's array for as long as any item lives.
		err = meta.EachListItemWithAlloc(obj, func(o runtime.Object) error {
			ev, err := r.event(driver.Added, o)
			if err != nil {
				return err
			}
			if !r.residue.Keep(&ev) {
				return nil
			}
			return sink.Emit(ev)
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
// one-object list of this resource (which also brings the apiserver's watch
// cache up to that version).
func (r *Resource[T]) Head(ctx context.Context) (core.ResourceVersion, error) {
	obj, err := r.list(ctx, metav1.ListOptions{
		LabelSelector: r.opts.LabelSelector,
		FieldSelector: r.opts.FieldSelector,
		Limit:         1,
	})
	if err != nil {
		return 0, r.apiError("read head version", err)
	}
	lm, err := meta.ListAccessor(obj)
	if err != nil {
		return 0, fmt.Errorf("%s: read head version: %T is not a list: %w", r.source, obj, err)
	}
	rv, err := driver.ParseResourceVersion(lm.GetResourceVersion())
	if err != nil {
		return 0, fmt.Errorf("%s: read head version: %w", r.source, err)
	}
	return rv, nil
}

// selected reads, page by page and bounded by progressHeadTimeout, the
// key and version of every object the selectors match, as of lo's
// ResourceVersion and ResourceVersionMatch, and the version the list was
// read at. It is what a watch compares to tell that nothing it watches
// changed (see watcher.verify).
func (r *Resource[T]) selected(ctx context.Context, lo metav1.ListOptions) (map[string]core.ResourceVersion, core.ResourceVersion, error) {
	ctx, cancel := context.WithTimeout(ctx, progressHeadTimeout)
	defer cancel()
	lo.LabelSelector, lo.FieldSelector, lo.Limit = r.opts.LabelSelector, r.opts.FieldSelector, r.opts.PageSize
	what := fmt.Sprintf("list the selected objects at version %s (%s)", lo.ResourceVersion, lo.ResourceVersionMatch)
	out := map[string]core.ResourceVersion{}
	var at core.ResourceVersion
	for {
		obj, err := r.list(ctx, lo)
		if err != nil {
			return nil, 0, r.apiError(what, err)
		}
		lm, err := meta.ListAccessor(obj)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %s: %T is not a list: %w", r.source, what, obj, err)
		}
		if at, err = driver.ParseResourceVersion(lm.GetResourceVersion()); err != nil {
			return nil, 0, fmt.Errorf("%s: %s: %w", r.source, what, err)
		}
		err = meta.EachListItem(obj, func(o runtime.Object) error {
			m, err := meta.Accessor(o)
			if err != nil {
				return fmt.Errorf("%s: %s: a %T without object metadata: %w", r.source, what, o, err)
			}
			rv, err := driver.ParseResourceVersion(m.GetResourceVersion())
			if err != nil {
				return fmt.Errorf("%s: %s: object %q: %w", r.source, what, Key(m), err)
			}
			out[Key(m)] = rv
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
		if lo.Continue = lm.GetContinue(); lo.Continue == "" {
			return out, at, nil
		}
		// Later pages are pinned by the token.
		lo.ResourceVersion, lo.ResourceVersionMatch = "", ""
	}
}

// event turns one object from the server into an Event. An object of the
// wrong type becomes an Event with a DecodeError; a resourceVersion that is
// not a number fails the whole call, since no later version could be
// ordered against it; an object outside Options.Namespace is a permanent
// misconfiguration.
func (r *Resource[T]) event(typ driver.EventType, o runtime.Object) (driver.Event[T], error) {
	m, err := meta.Accessor(o)
	if err != nil {
		return driver.Event[T]{}, fmt.Errorf("%s: the server sent a %T without object metadata: %w", r.source, o, err)
	}
	key := Key(m)
	if r.opts.Namespace != "" && m.GetNamespace() != r.opts.Namespace {
		return driver.Event[T]{}, driver.Permanent(fmt.Errorf("%s: object %q is not in namespace %q: the client watches another namespace than Options.Namespace says", r.source, key, r.opts.Namespace))
	}
	rv, err := driver.ParseResourceVersion(m.GetResourceVersion())
	if err != nil {
		return driver.Event[T]{}, fmt.Errorf("%s: object %q: %w", r.source, key, err)
	}
	if rv == 0 {
		return driver.Event[T]{}, fmt.Errorf("%s: object %q has no resourceVersion", r.source, key)
	}
	t, ok := o.(T)
	if !ok {
		var zero T
		return driver.Event[T]{Type: typ, Key: key, RV: rv, Err: &driver.DecodeError{
			Source: r.source, Key: key, RV: rv,
			Err: fmt.Errorf("the server sent a %T, want %T", o, zero),
		}}, nil
	}
	return driver.Event[T]{Type: typ, Key: key, Object: t, HasObject: true, RV: rv}, nil
}

// apiError names the source, maps the errors that mean "this version is
// gone" to driver.ErrExpired, and "this resource is not served" to
// driver.ErrPermanent.
func (r *Resource[T]) apiError(what string, err error) error {
	switch {
	case isExpired(err):
		return fmt.Errorf("%s: %s: %w: %w", r.source, what, driver.ErrExpired, err)
	case isNotServed(err):
		return driver.Permanent(fmt.Errorf("%s: %s: the server does not serve this resource (is its CustomResourceDefinition installed?): %w", r.source, what, err))
	case apierrors.IsUnauthorized(err):
		// The apiserver says only "Unauthorized". Retried: credentials
		// are rotated (exec plugins, projected tokens).
		return fmt.Errorf("%s: %s: the apiserver does not accept the client's credentials (401: an expired, revoked or wrong token or client certificate): %w", r.source, what, err)
	case apierrors.IsForbidden(err):
		// The message names the user, verb and resource. Retried: a
		// role may be granted later.
		return fmt.Errorf("%s: %s: the client's user may not do this (403: grant it list and watch on the resource with RBAC): %w", r.source, what, err)
	}
	return fmt.Errorf("%s: %s: %w", r.source, what, err)
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

// isNotServed reports a 404 on a list or watch of a collection: the
// resource type does not exist (a CustomResourceDefinition removed or never
// installed, a version no longer served). A list or watch in a namespace
// that does not exist is not a 404 (it is empty), and while an apiserver
// starts, custom resources answer 503, not 404, until their definitions
// are loaded.
func isNotServed(err error) bool {
	return apierrors.IsNotFound(err)
}
