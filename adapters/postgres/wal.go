package pginformer

import (
	"github.com/dbinformer/dbinformer/core"
	"github.com/jackc/pglogrepl"
)

// Decoded WAL: what the stream hands to the tables. No I/O here.

type changeKind uint8

const (
	changeInsert changeKind = iota + 1
	changeUpdate
	changeDelete
	changeTruncate
)

// rawValue is one column as the server printed it (text format), from
// either path: 'n' NULL, 't' text, 'u' unchanged TOASTed value (stream only).
type rawValue struct {
	kind byte
	data []byte
}

// change is one row change of one transaction, as pgoutput sent it.
type change struct {
	kind     changeKind
	rel      *relation
	new, old []rawValue
	oldKind  uint8 // 'K' key only, 'O' old tuple (REPLICA IDENTITY FULL)
}

// batch is one transaction's changes to one table. The first watch that
// reaches it decodes it against the table's known keys and values (in
// version order) and keeps the events in place of the changes, so that a
// later Watch from an older version replays exactly what was delivered.
type batch struct {
	rv        core.ResourceVersion // commit end LSN
	commitLSN core.ResourceVersion // commit record start: the server resends from here
	changes   []change
	size      int // len(changes), kept after decoding for the history count

	// Set once, under the table's knownMu.
	decoded bool
	events  any // []core.Event[T] of the Table that decoded it
	failed  int // events with Err
}

// relation is a column layout: from a Relation message, or from the columns
// of the snapshot query.
type relation struct {
	names []string
	oids  []uint32
}

func newRelation(m *pglogrepl.RelationMessage) *relation {
	r := &relation{}
	for _, c := range m.Columns {
		r.names = append(r.names, c.Name)
		r.oids = append(r.oids, c.DataType)
	}
	return r
}

func tupleOf(t *pglogrepl.TupleData) []rawValue {
	if t == nil {
		return nil
	}
	out := make([]rawValue, len(t.Columns))
	for i, c := range t.Columns {
		out[i] = rawValue{kind: c.DataType, data: c.Data}
	}
	return out
}

// lsn writes a version as Postgres writes an LSN: 0/28BD3A10.
func lsn(rv core.ResourceVersion) string { return pglogrepl.LSN(rv).String() }
