package pginformer

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/dbinformer/dbinformer/core"
)

// Querier is what CommitToken reads with: a *pgx.Conn, a *pgxpool.Pool, a
// pgx.Tx begun after the commit.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// XLOG page headers (access/xlog_internal.h, 64-bit builds): an insert
// position at the start of a page points past its header.
const (
	shortPageHeader = 24 // SizeOfXLogShortPHD
	longPageHeader  = 40 // SizeOfXLogLongPHD, on a segment's first page
)

// CommitToken returns the version to WaitFor after a commit, so that an
// informer of any table of the server (or a relay downstream of one) has
// applied the commit when WaitFor returns. Call it once the COMMIT has
// returned, on any connection to the same primary (not inside the
// transaction: the commit is not in the WAL yet).
//
// It is the WAL insert position (pg_current_wal_insert_lsn()), which is
// right under every synchronous_commit setting: a commit's record is
// inserted before COMMIT returns, whether or not it was written or
// flushed. pg_current_wal_lsn() is the write position instead, which
// under synchronous_commit = off (or local while the WAL writer lags) can
// lie before the commit that just returned: waiting for it returns before
// the write is applied. An insert position just past a page header (the
// previous record filled the page to its end) is taken back to the page's
// start, which no later record needs to reach: the informer's version
// gets there once the WAL up to the commit is streamed, without waiting
// for unrelated WAL to fill the next page.
func CommitToken(ctx context.Context, q Querier) (core.ResourceVersion, error) {
	var lsn pglogrepl.LSN
	var page, segment uint64
	err := q.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn(),
		current_setting('wal_block_size')::bigint, pg_size_bytes(current_setting('wal_segment_size'))`).Scan(&lsn, &page, &segment)
	if err != nil {
		return 0, fmt.Errorf("postgres: read the commit token (pg_current_wal_insert_lsn()): %w", err)
	}
	insert := uint64(lsn)
	switch {
	case segment > 0 && insert%segment == longPageHeader:
		insert -= longPageHeader
	case page > 0 && insert%page == shortPageHeader:
		insert -= shortPageHeader
	}
	return core.ResourceVersion(insert), nil
}
