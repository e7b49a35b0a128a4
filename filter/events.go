package filter

import (
	"context"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// What an adapter does with its residue (see Split), so that handlers see
// enter/leave semantics with the core's existing rules: the informer drops
// a delete for a key it does not hold, fills in a delete without object
// from its cache (the last state that matched), and turns a change of a key
// it does not hold into an add.

// Keep reports whether a listed event stays in the list: it does when it
// matches f, and when it carries a decode error (the informer reports it).
// A nil f keeps everything.
func (f *Filter[T]) Keep(ev *driver.Event[T]) bool {
	if f == nil || ev.Err != nil || !ev.HasObject {
		return true
	}
	return f.Match(ev.Key, ev.Object)
}

// Rewrite turns one watch event of a filtered source into what the
// informer must see. An Added or Modified object that does not match f
// becomes a Deleted without object: if the informer held the key, the
// object left the filter and handlers get a delete carrying its last
// matching state (the cached one); if not, the delete is dropped. Every
// Deleted loses its object for the same reason: what the source says
// about a deleted row may not match (a Kubernetes object deleted because
// its labels left the selector), the cached state does. Events with Err
// and Bookmarks pass unchanged, and so does everything when f is nil (an
// unfiltered source).
func (f *Filter[T]) Rewrite(ev *driver.Event[T]) {
	if f == nil || ev.Err != nil {
		return
	}
	var zero T
	switch ev.Type {
	case driver.Added, driver.Modified:
		if ev.HasObject && !f.Match(ev.Key, ev.Object) {
			ev.Type, ev.Object, ev.HasObject = driver.Deleted, zero, false
		}
	case driver.Deleted:
		ev.Object, ev.HasObject = zero, false
	}
}

// RewriteBatch is Rewrite for each event of batch.
func (f *Filter[T]) RewriteBatch(batch []driver.Event[T]) {
	if f == nil {
		return
	}
	for i := range batch {
		f.Rewrite(&batch[i])
	}
}

// Wrap returns a ListerWatcher that evaluates f on this side for any
// ListerWatcher: its List keeps only matching objects, its Watch rewrites
// events (Rewrite). Adapters that push part of a filter down take it in
// their options instead; Wrap is for sources that cannot, such as one of
// your own. The result's Unwrap returns lw, so every optional capability
// of lw (progress, head, heal wait, stuck-watch interval, codec, restore,
// durable acknowledgement) is still found through driver.Capability.
func Wrap[T any](lw driver.ListerWatcher[T], f *Filter[T]) driver.ListerWatcher[T] {
	return &wrapped[T]{lw: lw, f: f}
}

type wrapped[T any] struct {
	lw driver.ListerWatcher[T]
	f  *Filter[T]
}

// Unwrap returns the filtered ListerWatcher, for driver.Capability.
func (w *wrapped[T]) Unwrap() driver.ListerWatcher[T] { return w.lw }

func (w *wrapped[T]) List(ctx context.Context, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	emit := sink.Emit
	sink.Emit = func(ev driver.Event[T]) error {
		if !w.f.Keep(&ev) {
			return nil
		}
		return emit(ev)
	}
	return w.lw.List(ctx, sink)
}

func (w *wrapped[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	// The filter reads each event's object, which one that carries an
	// Event.Fill holds only in part: the source must send whole objects.
	opts.Fills = false
	emit := opts.Emit
	opts.Emit = func(batch []driver.Event[T]) error {
		w.f.RewriteBatch(batch)
		return emit(batch)
	}
	return w.lw.Watch(ctx, from, opts)
}
