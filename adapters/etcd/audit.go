package etcdinformer

import (
	"context"
	"fmt"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// AuditList implements driver.AuditLister: List's paginated range, every
// page pinned to the first page's revision C, which is linearizable (read
// through the leader) and therefore at least any revision the informer
// has seen. List keeps no state for watches, so it serves the audit as it
// is; the residue of Options.Where is applied as in List. A compaction
// past C between two pages ends it with an error matching
// driver.ErrExpired.
func (p *Prefix[T]) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	rv, err := p.List(ctx, sink)
	if err != nil {
		return 0, err
	}
	if rv < atLeast {
		return 0, fmt.Errorf("%s: audit list at revision %d, older than the cache's %d", p.source, rv, atLeast)
	}
	return rv, nil
}
