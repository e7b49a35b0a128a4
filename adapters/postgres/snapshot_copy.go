package pginformer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/rowplan"
	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Reading a table for List: COPY (SELECT ...) TO STDOUT in binary format,
// parsed as it arrives and decoded straight into T (plan.go). Columns whose
// binary form would not decode to the same value as pgoutput's text are
// sent as text by the server (format('%s', c) calls the type's output
// function, as pgoutput does), but for numeric, whose text rowplan makes
// from its binary form at less cost than the server's format()
// (rowplan.AsText). Next to the table's columns the statement
// asks for what TOAST memory needs (toast.go).

// snapColumn is one live column as the List's snapshot sees it.
type snapColumn struct {
	name    string
	oid     uint32
	attlen  int16
	storage byte
}

// copyLayout is the statement one List reads with, and how to read its rows.
type copyLayout struct {
	rel      *wal.Relation // the selected table columns, in statement order
	formats  []int16       // per column of rel
	exprs    []string      // select list: rel's columns, then the TOAST flags
	keyCols  []int         // per primary key column: position in rel
	keyInt   []int         // per primary key column: byte size of a binary integer, 0 for text bytes
	keep     []bool        // per column of rel: its values may have to be kept (TOAST memory)
	flag     []int         // per column of rel: position of the field holding its "may be external" bit, -1 none
	flagBit  []uint8       // per column of rel with a flag: its bit in that field (a binary int8)
	stripVer []bool        // per column of rel: binary jsonb, whose text follows a version byte
}

// layout plans the statement for the table's columns cols (omitted and
// generated ones already left out) on a server of the given
// server_version_num, which decides how the statement asks whether a value
// is stored out of line (outOfLine). Without toast (an audit, which keeps
// no values) it asks for none of that.
func (t *Table[T]) layout(cols []snapColumn, version int, toast bool) (*copyLayout, *rowPlan, error) {
	st := t.st
	isKey := map[string]bool{}
	for _, k := range st.pk {
		isKey[k] = true
	}
	l := &copyLayout{rel: &wal.Relation{}}
	sel, fields, err := t.selectColumns(l, cols, isKey)
	if err != nil {
		return nil, nil, err
	}
	for i, c := range sel {
		kind := toastKind(c.oid, c.attlen, c.storage)
		keep := toast && fields[i].used && !st.full && kind != toastNever
		l.addColumn(c, &fields[i], keep, isKey[c.name])
	}
	if err := l.placeKeys(st.pk, sel, fields); err != nil {
		return nil, nil, err
	}
	l.addToastFlags(sel, version)
	rp, err := t.m.plan(l.rel)
	if err != nil {
		return nil, nil, err
	}
	return l, rp, nil
}

// selectColumns picks the columns the List reads, into l.rel: those
// decoded into T and the primary key's, and not the others, which would
// cost the server their output for nothing. It returns them with what is
// known of each one's destination.
func (t *Table[T]) selectColumns(l *copyLayout, cols []snapColumn, isKey map[string]bool) ([]snapColumn, []fieldInfo, error) {
	all := &wal.Relation{}
	for _, c := range cols {
		all.Names = append(all.Names, c.name)
		all.OIDs = append(all.OIDs, c.oid)
	}
	p, err := t.m.plan(all)
	if err != nil {
		return nil, nil, err
	}
	t.m.forget(all)
	var sel []snapColumn
	var fields []fieldInfo
	for i, c := range cols {
		if !p.used[i] && !isKey[c.name] {
			continue // read neither into T nor for the key
		}
		sel = append(sel, c)
		l.rel.Names = append(l.rel.Names, c.name)
		l.rel.OIDs = append(l.rel.OIDs, c.oid)
		fi := fieldInfo{used: p.used[i]}
		if t.m.typ != nil && p.fields[i] != nil {
			fi.typ = t.m.typ.FieldByIndex(p.fields[i]).Type
		}
		fields = append(fields, fi)
	}
	return sel, fields, nil
}

// addColumn adds selected column c to the statement: in binary when its
// binary form decodes to the same value as pgoutput's text (and TOAST
// memory, which keeps text, and the key, which is text or an integer,
// allow it), else as the text of its output function. It sets fi.keyInt
// for a key column read as a binary integer.
//
// A column whose type rowplan decodes from binary as its text (AsText:
// numeric) comes in binary whatever its destination, unless it is a key's.
func (l *copyLayout) addColumn(c snapColumn, fi *fieldInfo, keep, isKey bool) {
	asText := fi.used && rowplan.AsText(c.oid)
	binaryOK := !fi.used || asText || rowplan.BinarySafe(c.oid, fi.typ)
	if keep && !asText && !rowplan.TextLike(c.oid) && c.oid != pgtype.JSONBOID {
		binaryOK = false // TOAST memory keeps text
	}
	keyInt := 0
	if isKey {
		switch c.oid {
		case pgtype.Int2OID:
			keyInt = 2
		case pgtype.Int4OID:
			keyInt = 4
		case pgtype.Int8OID:
			keyInt = 8
		default:
			if !rowplan.TextLike(c.oid) {
				binaryOK = false // keys are the text of the key columns
			}
		}
		if !binaryOK {
			keyInt = 0
		}
	}
	ident := pgx.Identifier{c.name}.Sanitize()
	format := int16(pgtype.BinaryFormatCode)
	expr := ident
	if !binaryOK {
		format = pgtype.TextFormatCode
		expr = "CASE WHEN " + ident + " IS NULL THEN NULL ELSE format('%s', " + ident + ") END"
	}
	l.formats = append(l.formats, format)
	l.exprs = append(l.exprs, expr)
	l.keep = append(l.keep, keep)
	l.stripVer = append(l.stripVer, format == pgtype.BinaryFormatCode && c.oid == pgtype.JSONBOID)
	l.flag = append(l.flag, -1)
	l.flagBit = append(l.flagBit, 0)
	fi.keyInt = keyInt
}

// placeKeys finds each primary key column pk among the selected columns,
// in key order, so that key can build a listed row's key from its fields.
func (l *copyLayout) placeKeys(pk []string, sel []snapColumn, fields []fieldInfo) error {
	for _, k := range pk {
		found := false
		for i, c := range sel {
			if c.name == k {
				l.keyCols = append(l.keyCols, i)
				l.keyInt = append(l.keyInt, fields[i].keyInt)
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("primary key column %q is not among the table's columns", k)
		}
	}
	return nil
}

// addToastFlags adds, after the columns, the fields that say which kept
// values are stored out of line (TOAST memory needs to know; see
// outOfLine for how a server of the given version is asked).
func (l *copyLayout) addToastFlags(sel []snapColumn, version int) {
	// The flags of up to 63 columns share one int8 field: a field of
	// its own each (a bool) cost Postgres a send call and the List a
	// field per column and row, a fifth of the server's CPU for a List of
	// a table with three text columns.
	var bits []string
	for i, c := range sel {
		if !l.keep[i] {
			continue
		}
		if len(bits) == flagsPerField {
			l.exprs = append(l.exprs, strings.Join(bits, " | "))
			bits = bits[:0]
		}
		l.flag[i], l.flagBit[i] = len(l.exprs), uint8(len(bits))
		bits = append(bits, "CASE WHEN "+outOfLine(pgx.Identifier{c.name}.Sanitize(), c.oid, version)+
			" THEN "+strconv.FormatUint(1<<len(bits), 10)+"::int8 ELSE 0::int8 END")
	}
	if len(bits) > 0 {
		l.exprs = append(l.exprs, strings.Join(bits, " | "))
	}
}

// fieldInfo is what layout knows of a selected column's destination.
type fieldInfo struct {
	used   bool         // decoded into T
	typ    reflect.Type // the struct field's type; nil for map rows or unmapped
	keyInt int          // see copyLayout.keyInt
}

// key encodes a listed row's key as encodeKey does the stream's text.
func (l *copyLayout) key(fields [][]byte) (string, error) {
	var num [20]byte
	part := func(i int) ([]byte, error) {
		c := l.keyCols[i]
		v := fields[c]
		if v == nil {
			return nil, fmt.Errorf("primary key column %q is NULL", l.rel.Names[c])
		}
		switch l.keyInt[i] {
		case 2:
			if len(v) != 2 {
				return nil, fmt.Errorf("primary key column %q: %d bytes for an int2", l.rel.Names[c], len(v))
			}
			return strconv.AppendInt(num[:0], int64(int16(binary.BigEndian.Uint16(v))), 10), nil
		case 4:
			if len(v) != 4 {
				return nil, fmt.Errorf("primary key column %q: %d bytes for an int4", l.rel.Names[c], len(v))
			}
			return strconv.AppendInt(num[:0], int64(int32(binary.BigEndian.Uint32(v))), 10), nil
		case 8:
			if len(v) != 8 {
				return nil, fmt.Errorf("primary key column %q: %d bytes for an int8", l.rel.Names[c], len(v))
			}
			return strconv.AppendInt(num[:0], int64(binary.BigEndian.Uint64(v)), 10), nil
		}
		return v, nil
	}
	if len(l.keyCols) == 1 {
		v, err := part(0)
		if err != nil {
			return "", err
		}
		if len(v) == 0 {
			return "", errEmptyKey
		}
		return string(v), nil
	}
	var b strings.Builder
	for i := range l.keyCols {
		v, err := part(i)
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteByte('/')
		}
		for _, ch := range v {
			if ch == '\\' || ch == '/' {
				b.WriteByte('\\')
			}
			b.WriteByte(ch)
		}
	}
	return b.String(), nil
}

// copySignature starts every binary COPY stream.
var copySignature = []byte("PGCOPY\n\377\r\n\x00")

// copyParser is the io.Writer a binary COPY is read into: it cuts the
// stream into rows (whatever the CopyData boundaries) and hands each row's
// fields to row, valid only during the call (nil: NULL).
type copyParser struct {
	ncols  int
	row    func(fields [][]byte) error
	buf    []byte
	header bool
	done   bool
	fields [][]byte
	rows   int64
}

func (cp *copyParser) Write(p []byte) (int, error) {
	data := p
	if len(cp.buf) > 0 {
		cp.buf = append(cp.buf, p...)
		data = cp.buf
	}
	n, err := cp.parse(data)
	if err != nil {
		return 0, err
	}
	rest := data[n:]
	cp.buf = append(cp.buf[:0], rest...)
	return len(p), nil
}

var errCopyFormat = errors.New("malformed binary COPY stream")

// parse consumes the complete rows at the start of data and returns how
// many bytes it used.
func (cp *copyParser) parse(data []byte) (int, error) {
	off := 0
	if !cp.header {
		if len(data) < len(copySignature)+8 {
			return 0, nil
		}
		if !bytes.Equal(data[:len(copySignature)], copySignature) {
			return 0, errCopyFormat
		}
		ext := int(binary.BigEndian.Uint32(data[len(copySignature)+4:]))
		off = len(copySignature) + 8 + ext
		if len(data) < off {
			return 0, nil
		}
		cp.header = true
	}
	for !cp.done {
		start := off
		if len(data)-off < 2 {
			return start, nil
		}
		n := int(int16(binary.BigEndian.Uint16(data[off:])))
		off += 2
		if n == -1 {
			cp.done = true
			return off, nil
		}
		if n != cp.ncols {
			return 0, fmt.Errorf("%w: a row of %d fields, want %d", errCopyFormat, n, cp.ncols)
		}
		cp.fields = cp.fields[:0]
		for range n {
			if len(data)-off < 4 {
				return start, nil
			}
			size := int(int32(binary.BigEndian.Uint32(data[off:])))
			off += 4
			if size < 0 {
				cp.fields = append(cp.fields, nil)
				continue
			}
			if len(data)-off < size {
				return start, nil
			}
			cp.fields = append(cp.fields, data[off:off+size:off+size])
			off += size
		}
		cp.rows++
		if err := cp.row(cp.fields); err != nil {
			return 0, err
		}
	}
	return off, nil
}

// flagsPerField is how many columns' "may be external" bits share a
// field: an int8's, less its sign bit.
const flagsPerField = 63

// mayBeExternal reports whether column c's value in fields may be stored
// out of line, by its bit in the layout's flags.
func (l *copyLayout) mayBeExternal(fields [][]byte, c int) bool {
	f := l.flag[c]
	if f < 0 || fields[c] == nil || len(fields[f]) != 8 {
		return false
	}
	return binary.BigEndian.Uint64(fields[f])>>l.flagBit[c]&1 == 1
}

// anyFlag reports whether a column's value in fields may be stored out of
// line: for most rows none may, and one look at the flags' fields (after
// the columns') spares asking column by column.
func (l *copyLayout) anyFlag(fields [][]byte) bool {
	for _, f := range fields[len(l.rel.Names):] {
		if len(f) == 8 && binary.BigEndian.Uint64(f) != 0 {
			return true
		}
	}
	return false
}

// outOfLine is a SQL condition that is true for a value of the column
// (ident, of type oid) that may be stored out of line, the only kind
// pgoutput sends as unchanged ('u'), and false for one that cannot be:
//   - Postgres 17 tells exactly (pg_column_toast_chunk_id);
//   - Postgres 14-16: an uncompressed inline value's pg_column_size is its
//     data plus its 1- or 4-byte header, an out-of-line one's (the TOAST
//     pointer's extsize) its data alone. The data's length comes from
//     octet_length where the type has one that reads the stored header
//     (text, varchar, bpchar, bytea); for any other type, from the value
//     put in a one-column record: 24 bytes of tuple header, then the value
//     detoasted with the header an inline value of that length would have
//     on disk, so an inline value measures the record less 24 and an
//     out-of-line one less. A compressed value (pg_column_compression) may
//     be either and counts as out of line. For the octet_length types one
//     comparison says all of it: the toaster keeps a compressed value only
//     when it is more than 2 bytes shorter than the data, so pg_column_size
//     is at most octet_length exactly for the compressed and the out of
//     line (two calls a value where the CASE made four);
//   - before, only a value stored in more than maxInline bytes can be out
//     of line (the toaster moves only values longer than a TOAST pointer).
//
// TestOutOfLineMatchesTheHeap holds the rule of the server the tests run
// on against the heap's own bytes (pageinspect).
func outOfLine(ident string, oid uint32, version int) string {
	size := "pg_column_size(" + ident + ")"
	switch {
	case version >= 170000:
		return "pg_column_toast_chunk_id(" + ident + ") IS NOT NULL"
	case version >= 140000:
		if octetLength(oid) {
			return "COALESCE(" + size + " <= octet_length(" + ident + "), false)"
		}
		data := size + " < pg_column_size(ROW(" + ident + ")) - 24"
		// CASE, not OR: the record is made only for a value that can
		// still be either (it detoasts an out-of-line one).
		return "CASE WHEN " + ident + " IS NULL OR " + size + " <= " + strconv.Itoa(maxInline) + " THEN false" +
			" WHEN pg_column_compression(" + ident + ") IS NOT NULL THEN true ELSE " + data + " END"
	}
	return "COALESCE(" + size + " > " + strconv.Itoa(maxInline) + ", false)"
}

// octetLength: the type's octet_length reports the stored length from the
// value's header (toast_raw_datum_size), without detoasting it.
func octetLength(oid uint32) bool {
	switch oid {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.ByteaOID:
		return true
	}
	return false
}
