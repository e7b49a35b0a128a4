package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// Mapper turns a change of an object of an informer into the keys to
// reconcile, calling enqueue for each (none to ignore the change). It is
// called with the new object and, for an update, with the old one too, so
// that a change of owner reconciles both owners; for a delete, with the
// last known state. It runs on the informer's handler goroutine: keep it
// to cache reads.
type Mapper[T any, K comparable] func(key string, obj T, enqueue func(K))

// ObjectKey maps an object to its own key: the controller reconciles the
// objects of the informer it watches (controller-runtime's
// EnqueueRequestForObject).
func ObjectKey[T any]() Mapper[T, string] {
	return func(key string, _ T, enqueue func(string)) { enqueue(key) }
}

// Owner maps an object to the key in one of its fields (an order's
// customer id → the customer): a controller of customers watches orders
// through it. The zero value of K means "no owner" and enqueues nothing.
func Owner[T any, K comparable](owner func(T) K) Mapper[T, K] {
	return func(_ string, obj T, enqueue func(K)) {
		var zero K
		if k := owner(obj); k != zero {
			enqueue(k)
		}
	}
}

// IndexKeys maps an object to the keys of target's objects whose index
// holds value(obj): a controller of orders watches customers through
// IndexKeys(orders.Lister(), "customer", customerID), so that a change of
// customer c7 reconciles every order of c7 — read from the orders cache's
// index, not by a query. It panics if target has no index named index
// (a programming error every change would repeat), so declare the index
// before.
func IndexKeys[T, O any](target core.Lister[O], index string, value func(key string, obj T) string) Mapper[T, string] {
	if _, err := target.IndexKeys(index, ""); err != nil {
		panic(fmt.Sprintf("controller.IndexKeys: %v: declare the index in the informer's Indexers first", err))
	}
	return func(key string, obj T, enqueue func(string)) {
		keys, err := target.IndexKeys(index, value(key, obj))
		if err != nil {
			return // checked above; indexes are never removed
		}
		for _, k := range keys {
			enqueue(k)
		}
	}
}

// Change is one change of an informer's cache, as predicates see it.
type Change[T any] struct {
	Type driver.EventType // driver.Added, driver.Modified or driver.Deleted
	Key  string
	// Old is the state before an update, or the last state of a deleted
	// object; New the state after an add or an update.
	Old, New T
	// InitialList is true for the adds of the informer's first list (and
	// of the replay a watch added later receives).
	InitialList bool
}

// Predicate decides whether a change is a reason to reconcile. Every
// predicate of a watch must agree. Resyncs (WatchOptions.Resync) do not
// go through predicates: they are the controller's own reason.
type Predicate[T any] func(Change[T]) bool

// FieldChanged passes adds and deletes, and updates where field differs
// between the old and the new object: a controller that reacts to a spec
// and writes a status skips the updates of its own writes.
func FieldChanged[T any, F comparable](field func(T) F) Predicate[T] {
	return func(c Change[T]) bool {
		return c.Type != driver.Modified || field(c.Old) != field(c.New)
	}
}

// WatchOptions configures one Watch.
type WatchOptions[T any] struct {
	// Predicates filter the changes; all must pass. None: every change.
	Predicates []Predicate[T]
	// Resync > 0 enqueues, every Resync while the controller runs, the
	// keys of every object in the cache, through the mapper: a periodic
	// re-reconcile that repairs drift outside the cache's view.
	Resync time.Duration
	// MaxPending bounds the changes waiting for the watch's handler (see
	// core.HandlerOptions.MaxPending); 0 is unbounded. The handler only
	// adds keys to the queue, so it is rarely behind.
	MaxPending int
}

// watch is what the controller needs of a Watch, whatever T.
type watch interface {
	waitSynced(ctx context.Context) error
	resyncPeriod() time.Duration
	resync()
	remove()
}

// Watch connects inf to c: every change that passes the predicates is
// mapped to keys, which are enqueued. The informer's current objects are
// replayed at once (so a watch added after the informer synced still sees
// every object), and Run waits for that replay before starting workers.
// Watch may be called before or after the informer starts, and before the
// controller runs — the usual order.
func Watch[T any, K comparable](c *Controller[K], inf *core.SharedIndexInformer[T], m Mapper[T, K], opts WatchOptions[T]) error {
	if m == nil {
		return fmt.Errorf("controller %q: Watch of informer %q needs a Mapper (ObjectKey for the object's own key)", c.name, inf.Name())
	}
	w := &typedWatch[T, K]{inf: inf, m: m, opts: opts, enqueue: c.q.Add}
	reg, err := inf.AddEventHandlerWithOptions(w, core.HandlerOptions{
		Name: "controller/" + c.name, MaxPending: opts.MaxPending, ResyncPeriod: -1,
	})
	if err != nil {
		return fmt.Errorf("controller %q: watch informer %q: %w", c.name, inf.Name(), err)
	}
	w.reg = reg
	c.mu.Lock()
	c.watches = append(c.watches, w)
	c.mu.Unlock()
	return nil
}

type typedWatch[T any, K comparable] struct {
	inf     *core.SharedIndexInformer[T]
	reg     *core.Registration[T]
	m       Mapper[T, K]
	opts    WatchOptions[T]
	enqueue func(K)
}

func (w *typedWatch[T, K]) pass(c Change[T]) bool {
	for _, p := range w.opts.Predicates {
		if !p(c) {
			return false
		}
	}
	return true
}

func (w *typedWatch[T, K]) OnAdd(key string, obj T, initial bool) {
	if len(w.opts.Predicates) > 0 && !w.pass(Change[T]{Type: driver.Added, Key: key, New: obj, InitialList: initial}) {
		return
	}
	w.m(key, obj, w.enqueue)
}

func (w *typedWatch[T, K]) OnUpdate(key string, old, obj T) {
	if len(w.opts.Predicates) > 0 && !w.pass(Change[T]{Type: driver.Modified, Key: key, Old: old, New: obj}) {
		return
	}
	w.m(key, old, w.enqueue)
	w.m(key, obj, w.enqueue)
}

func (w *typedWatch[T, K]) OnDelete(key string, obj T, _ bool) {
	if len(w.opts.Predicates) > 0 && !w.pass(Change[T]{Type: driver.Deleted, Key: key, Old: obj}) {
		return
	}
	w.m(key, obj, w.enqueue)
}

func (w *typedWatch[T, K]) waitSynced(ctx context.Context) error {
	return w.reg.WaitForCacheSync(ctx)
}

func (w *typedWatch[T, K]) resyncPeriod() time.Duration { return w.opts.Resync }

func (w *typedWatch[T, K]) resync() {
	// Keys are collected first: the mapper may read other caches, which
	// must not happen under this cache's read lock.
	type kv struct {
		key string
		obj T
	}
	var all []kv
	w.inf.Indexer().Range(func(key string, obj T) bool {
		all = append(all, kv{key, obj})
		return true
	})
	for _, e := range all {
		w.m(e.key, e.obj, w.enqueue)
	}
}

func (w *typedWatch[T, K]) remove() { _ = w.inf.RemoveEventHandler(w.reg) }
