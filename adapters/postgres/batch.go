package pginformer

import (
	"github.com/dbinformer/dbinformer/core"
	"github.com/jackc/pglogrepl"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
)

// batch is one transaction's changes to one table. The first watch that
// reaches it decodes it against the table's known keys and values (in
// version order) and keeps the events in place of the changes, so that a
// later Watch from an older version replays exactly what was delivered.
type batch struct {
	rv        core.ResourceVersion // commit end LSN
	commitLSN core.ResourceVersion // commit record start: the server resends from here
	changes   []wal.Change
	size      int // len(changes), kept after decoding for the history count

	// Set once, under the table's knownMu.
	decoded bool
	events  any // []driver.Event[T] of the Table that decoded it
	failed  int // events with Err
	// truncated: the transaction truncated the table. Its events are not
	// delivered: a watch reaching it ends with driver.ErrExpired and the
	// consumer lists again (what else the table held is not known here).
	truncated bool
	// relist, when not empty, says why the transaction cannot be
	// delivered without a new List (an update that moved a row to a new
	// primary key beside an unchanged TOASTed value this table did not
	// keep): a watch reaching it ends with driver.ErrExpired.
	relist string
}

// lsn writes a version as Postgres writes an LSN: 0/28BD3A10.
func lsn(rv core.ResourceVersion) string { return pglogrepl.LSN(rv).String() }
