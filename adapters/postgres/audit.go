package pginformer

import (
	"context"
	"errors"
	"fmt"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

var _ driver.AuditLister[map[string]any] = (*Table[map[string]any])(nil)

// AuditList implements driver.AuditLister: the table as of one LSN C, read
// inside the exported snapshot of a short-lived temporary slot of its own
// (named dbinformer_audit_…), as a late List reads, and C is that slot's
// consistent point. A slot created now has its consistent point after
// every commit the server has made, so C is at least any version the
// informer has seen (on a primary; C below atLeast is refused).
//
// The rows are those List would emit: the same columns, decoding and key,
// and a partial sync's (TableOptions.Where) same WHERE and residue filter,
// so that the audit compares exactly what the cache may hold. A row that
// does not decode is emitted with Err whatever TableOptions.SkipUndecodable
// says. It reads through one COPY on one connection of its own, outside
// Options.SnapshotReaders (a paced audit never holds up a List), parsed as
// it arrives: a sink that blocks in Emit blocks the read, and the server
// waits on the socket, so neither side buffers more than a socket's worth.
// It parks nothing: the table's known keys and TOAST values, the stream
// and the session are left alone.
//
// While it reads, the audit holds a replication slot and a walsender
// (max_replication_slots, max_wal_senders) and a snapshot that, as any
// long read does, keeps vacuum from removing rows deleted since; a
// paced audit of a large table holds them for its pace's time (and a
// statement_timeout of the role shorter than that ends it). The slot
// is dropped before AuditList returns, also on an error or a cancelled
// ctx. A snapshot lost with its connection ends it with an error
// matching driver.ErrExpired.
func (t *Table[T]) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	s := t.src
	sink = t.filtered(sink)
	// Close cancels the read.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	unwatch := context.AfterFunc(s.readCtx, stop)
	defer unwatch()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, errClosed
	}
	// A sink's error ends the read (and its connection) as it is; any
	// other error that closed the reader's connection lost the snapshot.
	var sinkErr error
	emit := sink.Emit
	sink.Emit = func(ev driver.Event[T]) error {
		err := emit(ev)
		if err != nil && sinkErr == nil {
			sinkErr = err
		}
		return err
	}
	rv, err := s.helperSnapshot(ctx, "dbinformer_audit_", func(r *snapReaders, rv core.ResourceVersion) error {
		err := t.read(ctx, r, rv, readAudit, sink)
		if err != nil && sinkErr == nil && ctx.Err() == nil && r.first.conn.IsClosed() {
			return snapshotLost{err}
		}
		return err
	})
	switch {
	case err == nil:
	case s.readCtx.Err() != nil:
		return 0, errClosed
	case sinkErr != nil || ctx.Err() != nil:
		return 0, err
	case snapshotInvalid(err) || errors.As(err, new(snapshotLost)):
		return 0, fmt.Errorf("%s: audit: the snapshot went away with its connection: %w (%w)", t.st.sourceName(), err, driver.ErrExpired)
	default:
		return 0, fmt.Errorf("%s: audit: %w", t.st.sourceName(), err)
	}
	if rv < atLeast {
		return 0, fmt.Errorf("%s: audit snapshot at %s, older than the cache's %s", t.st.sourceName(), lsn(rv), lsn(atLeast))
	}
	return rv, nil
}

// snapshotLost marks a read whose connection (and snapshot) ended.
type snapshotLost struct{ err error }

func (e snapshotLost) Error() string { return e.err.Error() }
func (e snapshotLost) Unwrap() error { return e.err }
