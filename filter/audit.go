package filter

import (
	"context"
	"fmt"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// AuditList implements driver.AuditLister through the filter: the audit of
// a filtered informer compares the cache with the matching objects only.
// Without it driver.Capability would find, through Unwrap, the unfiltered
// source's AuditList, and every object the filter hides would count as
// missing from the cache.
func (w *wrapped[T]) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	al, ok := driver.Capability[driver.AuditLister[T]](w.lw)
	if !ok {
		return 0, fmt.Errorf("filter %s: %w", w.f, core.ErrAuditUnsupported)
	}
	emit := sink.Emit
	sink.Emit = func(ev driver.Event[T]) error {
		if !w.f.Keep(&ev) {
			return nil
		}
		return emit(ev)
	}
	return al.AuditList(ctx, atLeast, sink)
}
