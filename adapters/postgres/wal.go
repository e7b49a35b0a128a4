package pginformer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

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
	// truncated: the transaction truncated the table. Its events are not
	// delivered: a watch reaching it ends with core.ErrExpired and the
	// consumer lists again (what else the table held is not known here).
	truncated bool
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

// valueArena hands out the []rawValue of streamed rows from shared chunks,
// so that a row costs no allocation of its own for them. A chunk is freed
// once every change cut from it is decoded (batch.changes is dropped then).
type valueArena struct{ free []rawValue }

func (a *valueArena) take(n int) []rawValue {
	if len(a.free) < n {
		a.free = make([]rawValue, max(n, 1024))
	}
	v := a.free[:n:n]
	a.free = a.free[n:]
	return v
}

// parseChange decodes a pgoutput (proto_version 1) Insert, Update or
// Delete message into c, returning its relation's id. The message's bytes
// are copied once (the receive buffer is reused by the next message) and
// every value slices that copy; the []rawValue come from a. pglogrepl's
// parser allocates two objects per column, the copy byte by byte.
func parseChange(data []byte, a *valueArena) (uint32, change, error) {
	var c change
	if len(data) < 6 {
		return 0, c, fmt.Errorf("pgoutput row change of %d bytes is truncated", len(data))
	}
	id := binary.BigEndian.Uint32(data[1:5])
	buf := bytes.Clone(data[5:])
	var err error
	switch data[0] {
	case 'I':
		c.kind = changeInsert
		if buf[0] != 'N' {
			return id, c, fmt.Errorf("pgoutput insert: tuple marker %q, want 'N'", buf[0])
		}
		c.new, _, err = parseTuple(buf[1:], a)
	case 'U':
		c.kind = changeUpdate
		if buf[0] == 'K' || buf[0] == 'O' {
			c.oldKind = buf[0]
			var n int
			if c.old, n, err = parseTuple(buf[1:], a); err != nil {
				break
			}
			buf = buf[1+n:]
		}
		if len(buf) == 0 || buf[0] != 'N' {
			return id, c, errors.New("pgoutput update: no new tuple ('N')")
		}
		c.new, _, err = parseTuple(buf[1:], a)
	case 'D':
		c.kind = changeDelete
		if buf[0] != 'K' && buf[0] != 'O' {
			return id, c, fmt.Errorf("pgoutput delete: tuple marker %q, want 'K' or 'O'", buf[0])
		}
		c.oldKind = buf[0]
		c.old, _, err = parseTuple(buf[1:], a)
	default:
		return id, c, fmt.Errorf("pgoutput message %q is not a row change", data[0])
	}
	return id, c, err
}

// parseTuple decodes a TupleData, returning its values and its length.
func parseTuple(b []byte, a *valueArena) ([]rawValue, int, error) {
	if len(b) < 2 {
		return nil, 0, errors.New("pgoutput tuple truncated before its column count")
	}
	n := int(binary.BigEndian.Uint16(b))
	vals := a.take(n)
	off := 2
	for i := range vals {
		if off >= len(b) {
			return nil, 0, fmt.Errorf("pgoutput tuple truncated at column %d of %d", i+1, n)
		}
		kind := b[off]
		off++
		switch kind {
		case 'n', 'u':
			vals[i] = rawValue{kind: kind}
		case 't':
			if off+4 > len(b) {
				return nil, 0, fmt.Errorf("pgoutput tuple truncated at column %d of %d", i+1, n)
			}
			l := int(binary.BigEndian.Uint32(b[off:]))
			off += 4
			if l < 0 || off+l > len(b) {
				return nil, 0, fmt.Errorf("pgoutput tuple: column %d of %d claims %d bytes, %d left", i+1, n, l, len(b)-off)
			}
			vals[i] = rawValue{kind: 't', data: b[off : off+l : off+l]}
			off += l
		default:
			return nil, 0, fmt.Errorf("pgoutput tuple: column %d of %d has value kind %q (only text, null and unchanged TOAST are requested)", i+1, n, kind)
		}
	}
	return vals, off, nil
}

// lsn writes a version as Postgres writes an LSN: 0/28BD3A10.
func lsn(rv core.ResourceVersion) string { return pglogrepl.LSN(rv).String() }
