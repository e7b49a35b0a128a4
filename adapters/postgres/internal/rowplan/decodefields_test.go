package rowplan

import (
	"encoding/binary"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestDecodeFieldsAsDecodeColumn: a row decoded by DecodeFields, its short
// text and json values in one shared allocation, equals the row decoded
// column by column by pgx's plans, for empty, NULL, long and short values
// and a jsonb of an unknown version (pgx's error, naming the column).
func TestDecodeFieldsAsDecodeColumn(t *testing.T) {
	type row struct {
		S  string          `db:"s"`
		J  json.RawMessage `db:"j"`
		JB json.RawMessage `db:"jb"`
		B  []byte          `db:"b"`
	}
	l := Layout{
		Names:  []string{"s", "j", "jb", "b"},
		OIDs:   []uint32{pgtype.TextOID, pgtype.JSONOID, pgtype.JSONBOID, pgtype.JSONBOID},
		Used:   []bool{true, true, true, true},
		Fields: [][]int{{0}, {1}, {2}, {3}},
	}
	formats := []int16{pgtype.BinaryFormatCode, pgtype.BinaryFormatCode, pgtype.BinaryFormatCode, pgtype.BinaryFormatCode}
	sp := Compile(reflect.TypeFor[row](), l, formats, pgtype.NewMap())
	long := `{"k": "` + strings.Repeat("x", MaxShared) + `"}`
	for _, fields := range [][][]byte{
		{[]byte("a"), []byte(`{"a": 1}`), []byte("\x01[1, 2]"), []byte("\x01null")},
		{[]byte(""), []byte(""), []byte("\x01"), nil},
		{nil, nil, nil, []byte("\x01" + long)},
		{[]byte(long), []byte(long), []byte("\x01" + long), []byte("\x01{}")},
		{[]byte("a"), []byte("{}"), []byte("\x02{}"), []byte("\x01{}")},
		{[]byte("a"), []byte("{}"), []byte(""), []byte("\x01{}")},
	} {
		sameAsColumns[row](t, sp, fields)
	}
}

// TestDecodeFieldsFast: binary integers and timestamptz that DecodeFields
// decodes itself come out as pgx's plans make them, and what it leaves to
// them (NULL, wrong lengths, the infinities, times outside 1900-2200)
// keeps their values and errors.
func TestDecodeFieldsFast(t *testing.T) {
	type row struct {
		A int16     `db:"a"`
		B int32     `db:"b"`
		C int64     `db:"c"`
		T time.Time `db:"t"`
		D int64     `db:"d"` // an int4 into an int64: pgx's plan
	}
	l := Layout{
		Names:  []string{"a", "b", "c", "t", "d"},
		OIDs:   []uint32{pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.TimestamptzOID, pgtype.Int4OID},
		Used:   []bool{true, true, true, true, true},
		Fields: [][]int{{0}, {1}, {2}, {3}, {4}},
	}
	bin := int16(pgtype.BinaryFormatCode)
	sp := Compile(reflect.TypeFor[row](), l, []int16{bin, bin, bin, bin, bin}, pgtype.NewMap())
	for c, want := range []fastKind{fastInt16, fastInt32, fastInt64, fastTime, 0} {
		if sp.cols[c].fast != want {
			t.Errorf("column %s: fast %d, want %d", l.Names[c], sp.cols[c].fast, want)
		}
	}
	be := func(v uint64, n int) []byte {
		b := binary.BigEndian.AppendUint64(nil, v)
		return b[8-n:]
	}
	us := func(tm time.Time) []byte {
		return be(uint64(tm.Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).Microseconds()), 8)
	}
	for _, fields := range [][][]byte{
		{be(7, 2), be(1<<31, 4), be(1<<63+5, 8), us(time.Date(2026, 1, 1, 0, 0, 1, 5000, time.UTC)), be(9, 4)},
		{be(0xffff, 2), be(0, 4), be(0, 8), us(time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC)), be(1, 4)},
		{be(1, 2), be(1, 4), be(1, 8), us(time.Date(1850, 6, 1, 0, 0, 0, 0, time.UTC)), be(1, 4)},
		{be(1, 2), be(1, 4), be(1, 8), us(time.Date(2250, 6, 1, 0, 0, 0, 0, time.UTC)), be(1, 4)},
		{be(1, 2), be(1, 4), be(1, 8), be(1<<63-1, 8), be(1, 4)}, // infinity
		{be(1, 2), be(1, 4), be(1, 8), be(1<<63, 8), be(1, 4)},   // -infinity
		{nil, be(1, 4), be(1, 8), us(time.Now()), be(1, 4)},
		{be(1, 2), be(1, 3), be(1, 8), us(time.Now()), be(1, 4)},
		{be(1, 2), be(1, 4), be(1, 4), us(time.Now()), be(1, 4)},
		{be(1, 2), be(1, 4), be(1, 8), nil, be(1, 4)},
	} {
		sameAsColumns[row](t, sp, fields)
	}
}

// sameAsColumns checks that DecodeFields decodes fields into a T as
// DecodeColumn does column by column, errors included.
func sameAsColumns[T any](t *testing.T, sp *Plan, fields [][]byte) {
	t.Helper()
	var got, want T
	gotErr := sp.DecodeFields(unsafe.Pointer(&got), nil, fields)
	var wantErr error
	for c := range fields {
		if err := sp.DecodeColumn(unsafe.Pointer(&want), nil, c, fields[c]); err != nil && wantErr == nil {
			wantErr = err
		}
	}
	if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Errorf("%x: DecodeFields error %v, DecodeColumn's %v", fields, gotErr, wantErr)
		return
	}
	if gotErr == nil && !reflect.DeepEqual(got, want) {
		t.Errorf("%x: DecodeFields %+v, DecodeColumn %+v", fields, got, want)
	}
}
