// Package rowplan compiles a row layout into pgtype scan plans that
// decode each column's bytes straight into the field of a struct (or into
// a value of a map[string]any row), and says which columns may be read in
// binary. It knows nothing of tables, streams or a Source: the package
// boundary keeps it so.
package rowplan

import (
	"encoding/json"
	"fmt"
	"math/big"
	"math/bits"
	"reflect"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5/pgtype"
)

// Compiled scan plans: a row layout is compiled once, per wire format of
// each column, into pgtype scan plans that decode a column's bytes straight
// into the field of T (or into a value of a map[string]any row), with no
// intermediate map, []any or copy of the row.
//
// Entry point for both paths (List reads binary COPY, the stream reads
// pgoutput's text): compile a plan for a layout and the formats its
// columns come in, then for each row call DecodeColumn for every column,
// giving the column's bytes (nil for NULL) and a pointer to the object:
//
//	sp := rowplan.Compile(typ, layout, formats, tm) // once per layout; not for concurrent use
//	for c := range row { err = sp.DecodeColumn(obj, nil, c, row[c]) }

// colScan decodes one column.
type colScan struct {
	name   string
	oid    uint32
	format int16
	// Struct rows: the field's type and offset in T, and pgtype's plan for
	// a pointer to that type.
	field  reflect.Type
	offset uintptr
	plan   pgtype.ScanPlan
	// Map rows: the column's codec (nil: unknown type, kept as text).
	typ *pgtype.Type
	// direct: a text-like column into a plain string field, whose value
	// is its bytes in either format, or a json or jsonb column into a
	// []byte (json.RawMessage) with pgx's codec, whose value is a copy of
	// its text (bytes set; jsonb's binary form has a version byte first,
	// skip); decodeFields copies such values of a row into one
	// allocation.
	direct bool
	bytes  bool
	skip   int
	// fast: a binary integer or timestamptz into a field of its very Go
	// type with pgx's codec, which decodeFields decodes itself (fastKind).
	fast fastKind
	// asText: an AsText column in binary, decoded as its text.
	asText bool
}

// Plan decodes the rows of one layout. It holds its own pgtype.Map
// (not safe for concurrent use): one Plan per goroutine.
type Plan struct {
	tm    *pgtype.Map
	isMap bool
	cols  []*colScan // per row position; nil: not decoded
	// direct lists the positions of the direct columns.
	direct []int
	// text is where an asText column's text is written, reused.
	text []byte
}

// Layout is a row layout mapped onto T: per column its name, type oid,
// whether it is decoded (Used) and, for a struct T, the index path of its
// field (nil: unmapped).
type Layout struct {
	Names  []string
	OIDs   []uint32
	Used   []bool
	Fields [][]int
}

// Compile builds the scan plan of a layout of rows of typ (nil:
// map[string]any rows) for columns arriving in formats (one per column;
// pgtype.TextFormatCode or BinaryFormatCode).
func Compile(typ reflect.Type, l Layout, formats []int16, tm *pgtype.Map) *Plan {
	sp := &Plan{tm: tm, isMap: typ == nil, cols: make([]*colScan, len(l.Names))}
	for c := range l.Names {
		if !l.Used[c] {
			continue
		}
		cs := &colScan{name: l.Names[c], oid: l.OIDs[c], format: formats[c]}
		// The format the column's plan decodes.
		format := cs.format
		if cs.asText = format == pgtype.BinaryFormatCode && AsText(cs.oid); cs.asText {
			format = pgtype.TextFormatCode
		}
		if typ == nil {
			cs.typ, _ = tm.TypeForOID(cs.oid)
		} else {
			t := typ
			for _, i := range l.Fields[c] {
				f := t.Field(i)
				cs.offset += f.Offset
				t = f.Type
			}
			if t == rawMessageType && (cs.oid == pgtype.JSONOID || cs.oid == pgtype.JSONBOID) {
				// pgx unmarshals into a json.RawMessage, which only
				// validates what the server sent as valid JSON and copies
				// it: copy it as a []byte, the same value (a tenth of the
				// CPU in the 1M-row List's profile).
				t = bytesType
			}
			cs.field = t
			cs.plan = tm.PlanScan(cs.oid, format, reflect.New(t).Interface())
			if t == numericType && cs.oid == pgtype.NumericOID && format == pgtype.TextFormatCode {
				cs.plan = numericText{slow: cs.plan}
			}
			cs.fast = fastFor(tm, cs.oid, format, t)
			if cs.asText {
				cs.plan = asText{text: cs.plan, buf: &sp.text}
				if t == numericType {
					cs.plan = numericBinary{text: cs.plan}
				}
			}
			if t == stringType && TextLike(cs.oid) || t == bytesType && pgxJSON(tm, cs.oid) {
				cs.direct, cs.bytes = true, t == bytesType
				if cs.oid == pgtype.JSONBOID && format == pgtype.BinaryFormatCode {
					cs.skip = 1
				}
				sp.direct = append(sp.direct, c)
			}
		}
		sp.cols[c] = cs
	}
	return sp
}

// MaxShared is the longest value DecodeFields puts in a row's shared
// allocation: a string (or json.RawMessage) a program keeps after its
// object is gone keeps the others of its row alive, and that must stay
// small.
const MaxShared = 256

// DecodeFields decodes a row of fields (one per column of the layout;
// nil: NULL) into obj as DecodeColumn would, column after column, but with
// the values of the direct columns up to MaxShared bytes long in one
// allocation: a List of a table with three short text columns made three
// allocations a row for them, a sixth of its CPU.
func (sp *Plan) DecodeFields(obj unsafe.Pointer, row map[string]any, fields [][]byte) error {
	var shared []byte
	if len(sp.direct) > 1 {
		n := 0
		for _, c := range sp.direct {
			if l := len(fields[c]); l <= MaxShared {
				n += l
			}
		}
		shared = make([]byte, 0, n)
	}
	for c, data := range fields {
		cs := sp.cols[c]
		if cs == nil {
			continue
		}
		if cs.direct && data != nil && len(data) <= MaxShared && shared != nil &&
			(cs.skip == 0 || len(data) > 0 && data[0] == 1) { // else pgx's error
			data = data[cs.skip:]
			at := len(shared)
			shared = append(shared, data...)
			switch {
			case cs.bytes:
				// A copy, as pgx's plan makes: never nil.
				*(*[]byte)(unsafe.Add(obj, cs.offset)) = shared[at:len(shared):len(shared)]
			case len(data) == 0:
				*(*string)(unsafe.Add(obj, cs.offset)) = ""
			default:
				*(*string)(unsafe.Add(obj, cs.offset)) = unsafe.String(unsafe.SliceData(shared[at:]), len(data))
			}
			continue
		}
		if cs.fast != 0 && cs.fast.decode(unsafe.Add(obj, cs.offset), data) {
			continue
		}
		if err := sp.DecodeColumn(obj, row, c, data); err != nil {
			return err
		}
	}
	return nil
}

// DecodeColumn decodes column c's bytes (nil: NULL) into obj: a *T for a
// struct T, or a map[string]any row. It does not retain data.
func (sp *Plan) DecodeColumn(obj unsafe.Pointer, row map[string]any, c int, data []byte) error {
	cs := sp.cols[c]
	if cs == nil {
		return nil
	}
	if sp.isMap {
		if data == nil {
			row[cs.name] = nil
			return nil
		}
		format := cs.format
		if cs.asText {
			txt, err := AppendNumericText(sp.text[:0], data)
			if err != nil {
				return fmt.Errorf("column %q: %w", cs.name, err)
			}
			data, format, sp.text = txt, pgtype.TextFormatCode, txt
		}
		if cs.typ == nil {
			row[cs.name] = string(data)
			return nil
		}
		v, err := cs.typ.Codec.DecodeValue(sp.tm, cs.oid, format, data)
		if err != nil {
			return fmt.Errorf("column %q: %w", cs.name, err)
		}
		row[cs.name] = v
		return nil
	}
	// A pointer-shaped interface: no allocation.
	target := reflect.NewAt(cs.field, unsafe.Add(obj, cs.offset)).Interface()
	if err := cs.plan.Scan(data, target); err != nil {
		return fmt.Errorf("column %q: %w", cs.name, err)
	}
	return nil
}

// pgxJSON reports whether tm decodes oid, json or jsonb, with pgx's own
// codec, which scans a value into a []byte as a copy of its text.
func pgxJSON(tm *pgtype.Map, oid uint32) bool {
	if oid != pgtype.JSONOID && oid != pgtype.JSONBOID {
		return false
	}
	typ, ok := tm.TypeForOID(oid)
	if !ok {
		return false
	}
	switch typ.Codec.(type) {
	case *pgtype.JSONCodec, *pgtype.JSONBCodec:
		return true
	}
	return false
}

var (
	timeType   = reflect.TypeFor[time.Time]()
	stringType = reflect.TypeFor[string]()
	bytesType  = reflect.TypeFor[[]byte]()
	// rawMessageType is json.RawMessage.
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	numericType    = reflect.TypeFor[pgtype.Numeric]()
)

// BinarySafe tells whether a column of type oid decodes into a field of
// type field (nil: a map[string]any value) to the same Go value from
// Postgres's binary format as from its text format (what pgoutput sends).
// Only then may List read it in binary: a listed object and the same row
// from the stream must be equal. Everything else is read as text.
func BinarySafe(oid uint32, field reflect.Type) bool {
	for field != nil && field.Kind() == reflect.Pointer {
		field = field.Elem()
	}
	kind := reflect.Invalid
	if field != nil {
		kind = field.Kind()
	}
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		switch kind {
		case reflect.Invalid, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			return true
		}
		return field == reflect.TypeFor[pgtype.Int2]() || field == reflect.TypeFor[pgtype.Int4]() || field == reflect.TypeFor[pgtype.Int8]()
	case pgtype.Float4OID, pgtype.Float8OID:
		return kind == reflect.Invalid || kind == reflect.Float32 || kind == reflect.Float64
	case pgtype.BoolOID:
		return kind == reflect.Invalid || kind == reflect.Bool
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID:
		// The binary form is the text itself.
		return kind == reflect.Invalid || kind == reflect.String || field == bytesType || field == reflect.TypeFor[pgtype.Text]()
	case pgtype.JSONOID, pgtype.JSONBOID:
		// json's binary form is its text; jsonb's is a version byte and the
		// same text as jsonb_out. Either is then unmarshalled alike.
		return true
	case pgtype.UUIDOID:
		return kind == reflect.Invalid || kind == reflect.String || field == reflect.TypeFor[[16]byte]() || field == reflect.TypeFor[pgtype.UUID]()
	case pgtype.ByteaOID:
		return kind == reflect.Invalid || field == bytesType
	case pgtype.DateOID, pgtype.TimestampOID, pgtype.TimestamptzOID:
		// pgx builds both in time.Local (timestamptz) or UTC alike.
		return kind == reflect.Invalid || field == timeType
	}
	return false
}

// TextLike are the types whose binary form is their text form: the value
// can serve both as text (TOAST memory, keys) and binary.
func TextLike(oid uint32) bool {
	switch oid {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID, pgtype.JSONOID:
		return true
	}
	return false
}

// numericText scans numeric's text form into a pgtype.Numeric to the value
// pgx's own plan (slow) makes, without big.Int's string parser when the
// digits fit an int64: that parser was half of a List's decoding CPU on a
// table with one numeric column. Anything but plain digits, one inner
// point and a leading minus goes to slow.
type numericText struct{ slow pgtype.ScanPlan }

func (p numericText) Scan(src []byte, dst any) error {
	if n, ok := dst.(*pgtype.Numeric); ok && parseSmallNumeric(src, n) {
		return nil
	}
	return p.slow.Scan(src, dst)
}

// parseSmallNumeric sets n as pgx's parseNumericString would from text of
// at most 18 digits and reports whether it could: the digits without the
// point make Int, Exp is minus the digits after the point or, without a
// point, the trailing zeros taken off Int (one digit always stays).
func parseSmallNumeric(src []byte, n *pgtype.Numeric) bool {
	s := src
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) == 0 || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	var v int64
	digits, point := 0, -1
	for i, c := range s {
		switch {
		case c >= '0' && c <= '9':
			if digits == 18 {
				return false
			}
			v = v*10 + int64(c-'0')
			digits++
		case c == '.' && point < 0:
			point = i
		default:
			return false
		}
	}
	var exp int32
	if point >= 0 {
		exp = -int32(len(s) - point - 1)
	} else {
		for ; digits > 1 && v%10 == 0; digits-- {
			v /= 10
			exp++
		}
	}
	if neg {
		v = -v
	}
	*n = pgtype.Numeric{Int: smallInt(v), Exp: exp, Valid: true}
	return true
}

// wordInt is a big.Int and the one word of its value, in one allocation.
type wordInt struct {
	n big.Int
	w [1]big.Word
}

// smallInt returns v as a new big.Int equal, field for field, to what
// SetInt64 makes (zero without a word), in one allocation where SetInt64
// makes two (the Int, then its word): a numeric a row.
func smallInt(v int64) *big.Int {
	if v == 0 || bits.UintSize < 64 {
		return new(big.Int).SetInt64(v)
	}
	u := uint64(v)
	if v < 0 {
		u = -u
	}
	wi := &wordInt{w: [1]big.Word{big.Word(u)}}
	wi.n.SetBits(wi.w[:])
	if v < 0 {
		wi.n.Neg(&wi.n)
	}
	return &wi.n
}

// Len is the number of columns of the plan's layout.
func (sp *Plan) Len() int { return len(sp.cols) }
