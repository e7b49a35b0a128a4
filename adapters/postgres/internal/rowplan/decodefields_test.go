package rowplan

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
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
		var got, want row
		gotErr := sp.DecodeFields(unsafe.Pointer(&got), nil, fields)
		var wantErr error
		for c := range fields {
			if err := sp.DecodeColumn(unsafe.Pointer(&want), nil, c, fields[c]); err != nil && wantErr == nil {
				wantErr = err
			}
		}
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Errorf("%q: DecodeFields error %v, DecodeColumn's %v", fields, gotErr, wantErr)
			continue
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%q: DecodeFields %+v, DecodeColumn %+v", fields, got, want)
		}
	}
}
