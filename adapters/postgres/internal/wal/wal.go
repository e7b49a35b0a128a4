// Package wal holds the decoded WAL: what pginformer's replication stream
// hands to its tables (row changes as pgoutput sent them, column layouts)
// and the parser of pgoutput's row messages. No I/O and no state of a
// Source here: the package boundary keeps it so.
package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// Kind is what a Change does.
type Kind uint8

const (
	Insert Kind = iota + 1
	Update
	Delete
	Truncate
)

// Value is one column as the server printed it (text format), from
// either path: 'n' NULL, 't' text, 'u' unchanged TOASTed value (stream only).
type Value struct {
	Kind byte
	Data []byte
}

// Change is one row change of one transaction, as pgoutput sent it.
type Change struct {
	Kind     Kind
	Rel      *Relation
	New, Old []Value
	OldKind  uint8 // 'K' key only, 'O' old tuple (REPLICA IDENTITY FULL)
}

// Relation is a column layout: from a Relation message, or from the columns
// of the snapshot query.
type Relation struct {
	Names []string
	OIDs  []uint32
	// Mods are the columns' type modifiers (atttypmod: a varchar's
	// width, a numeric's precision and scale; -1 for none), from a
	// Relation message only.
	Mods []int32
}

// NewRelation is the layout of a Relation message.
func NewRelation(m *pglogrepl.RelationMessage) *Relation {
	r := &Relation{}
	for _, c := range m.Columns {
		r.Names = append(r.Names, c.Name)
		r.OIDs = append(r.OIDs, c.DataType)
		r.Mods = append(r.Mods, c.TypeModifier)
	}
	return r
}

// Arena hands out the []Value of streamed rows from shared chunks,
// so that a row costs no allocation of its own for them. A chunk is freed
// once every change cut from it is decoded (batch.changes is dropped then).
type Arena struct{ free []Value }

func (a *Arena) take(n int) []Value {
	if len(a.free) < n {
		a.free = make([]Value, max(n, 1024))
	}
	v := a.free[:n:n]
	a.free = a.free[n:]
	return v
}

// ParseChange decodes a pgoutput (proto_version 1) Insert, Update or
// Delete message into c, returning its relation's id. The message's bytes
// are copied once (the receive buffer is reused by the next message) and
// every value slices that copy; the []Value come from a. pglogrepl's
// parser allocates two objects per column, the copy byte by byte.
func ParseChange(data []byte, a *Arena) (uint32, Change, error) {
	var c Change
	if len(data) < 6 {
		return 0, c, fmt.Errorf("pgoutput row change of %d bytes is truncated", len(data))
	}
	id := binary.BigEndian.Uint32(data[1:5])
	buf := bytes.Clone(data[5:])
	var err error
	switch data[0] {
	case 'I':
		c.Kind = Insert
		if buf[0] != 'N' {
			return id, c, fmt.Errorf("pgoutput insert: tuple marker %q, want 'N'", buf[0])
		}
		c.New, _, err = parseTuple(buf[1:], a)
	case 'U':
		c.Kind = Update
		if buf[0] == 'K' || buf[0] == 'O' {
			c.OldKind = buf[0]
			var n int
			if c.Old, n, err = parseTuple(buf[1:], a); err != nil {
				break
			}
			buf = buf[1+n:]
		}
		if len(buf) == 0 || buf[0] != 'N' {
			return id, c, errors.New("pgoutput update: no new tuple ('N')")
		}
		c.New, _, err = parseTuple(buf[1:], a)
	case 'D':
		c.Kind = Delete
		if buf[0] != 'K' && buf[0] != 'O' {
			return id, c, fmt.Errorf("pgoutput delete: tuple marker %q, want 'K' or 'O'", buf[0])
		}
		c.OldKind = buf[0]
		c.Old, _, err = parseTuple(buf[1:], a)
	default:
		return id, c, fmt.Errorf("pgoutput message %q is not a row change", data[0])
	}
	return id, c, err
}

// parseTuple decodes a TupleData, returning its values and its length.
func parseTuple(b []byte, a *Arena) ([]Value, int, error) {
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
			vals[i] = Value{Kind: kind}
		case 't':
			if off+4 > len(b) {
				return nil, 0, fmt.Errorf("pgoutput tuple truncated at column %d of %d", i+1, n)
			}
			l := int(binary.BigEndian.Uint32(b[off:]))
			off += 4
			if l < 0 || off+l > len(b) {
				return nil, 0, fmt.Errorf("pgoutput tuple: column %d of %d claims %d bytes, %d left", i+1, n, l, len(b)-off)
			}
			vals[i] = Value{Kind: 't', Data: b[off : off+l : off+l]}
			off += l
		default:
			return nil, 0, fmt.Errorf("pgoutput tuple: column %d of %d has value kind %q (only text, null and unchanged TOAST are requested)", i+1, n, kind)
		}
	}
	return vals, off, nil
}
