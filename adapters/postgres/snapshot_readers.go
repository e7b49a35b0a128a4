package pginformer

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// The connections of a List's parallel snapshot readers (see
// snapshot_read.go): each imports the List's exported snapshot, and takes
// a reader slot (Options.SnapshotReaders) while it reads. Moved out of
// snapshot_read.go, which reads through them.

// snapReader is one connection inside the snapshot.
type snapReader struct {
	conn  *pgx.Conn
	tx    pgx.Tx
	extra bool // holds a reader slot of its own (not the List's)
}

// close ends the reader's transaction and connection, and gives back the
// reader slot it holds of its own.
func (r *snapReader) close(s *Source) {
	r.tx.Rollback(context.Background())
	r.conn.Close(context.Background())
	if r.extra {
		<-s.readers
	}
}

// errSnapshotGone is importSnapshot's error once the snapshot was released
// (snapshot.release): it can be imported no more.
var errSnapshotGone = errors.New("the exported snapshot is no longer importable")

// importSnapshot opens a connection and imports sn into a read-only
// REPEATABLE READ transaction.
func (s *Source) importSnapshot(ctx context.Context, sn *snapshot) (*snapReader, error) {
	sn.mu.RLock()
	defer sn.mu.RUnlock()
	if sn.gone {
		return nil, errSnapshotGone
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err == nil {
		_, err = tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(sn.name))
	}
	if err != nil {
		conn.Close(context.Background())
		return nil, s.wrap("import the slot's snapshot", err)
	}
	return &snapReader{conn: conn, tx: tx}, nil
}

// takeReader waits for a reader slot (Options.SnapshotReaders) for a
// List's first reader; the caller gives it back with <-s.readers. Slots are
// given back without setupMu.
func (s *Source) takeReader(ctx context.Context) error {
	select {
	case s.readers <- struct{}{}:
		return nil
	case <-ctx.Done():
		if s.readCtx.Err() != nil {
			return errClosed
		}
		return ctx.Err()
	}
}

// snapReaders are the readers of one List: the first, and more on demand.
type snapReaders struct {
	s     *Source
	sn    *snapshot
	first *snapReader
}

// more returns another reader if a reader slot is free and the snapshot can
// still be imported, else nil.
func (r *snapReaders) more(ctx context.Context) *snapReader {
	select {
	case r.s.readers <- struct{}{}:
	default:
		return nil
	}
	rd, err := r.s.importSnapshot(ctx, r.sn)
	if err != nil {
		<-r.s.readers
		if !errors.Is(err, errSnapshotGone) {
			r.s.log.Debug("no extra snapshot reader", "err", err)
		}
		return nil
	}
	rd.extra = true
	return rd
}
