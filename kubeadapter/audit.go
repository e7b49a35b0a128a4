package kubeinformer

import (
	"context"
	"fmt"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// AuditList implements driver.AuditLister with List: a consistent paginated
// list (the first page read from etcd at the current resourceVersion C,
// the later pages pinned to C by their continue tokens), so at least any
// version the informer has seen, with the label and field selectors and
// the residue filter applied as for List. List keeps no state for
// watches. A snapshot that etcd compacts before the last page ends it
// with an error matching driver.ErrExpired, as for List.
func (r *Resource[T]) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	rv, err := r.List(ctx, sink)
	if err != nil {
		return 0, err
	}
	if rv < atLeast {
		return 0, fmt.Errorf("%s: audit list at resourceVersion %d, older than the cache's %d", r.source, rv, atLeast)
	}
	return rv, nil
}
