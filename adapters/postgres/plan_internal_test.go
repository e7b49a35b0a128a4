package pginformer

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/rowplan"
	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/jackc/pgx/v5/pgtype"
)

type sharedRow struct {
	ID   int64     `db:"id"`
	A    string    `db:"a"`
	B    string    `db:"b"`
	Long string    `db:"long"`
	E    string    `db:"e"`
	Tag  namedText `db:"tag"`
}

type namedText string

// TestDecodeFieldsSharesShortStrings: DecodeFields decodes a row as
// DecodeColumn would, with the short text values of plain string fields
// in one allocation, a value over rowplan.MaxShared in its own, a named string
// type through pgx's plan, and NULL into a string an error naming the
// column.
func TestDecodeFieldsSharesShortStrings(t *testing.T) {
	m := newMapper(nil, &tableState{pk: []string{"id"}}, reflect.TypeFor[sharedRow](), nil)
	rel := &wal.Relation{Names: []string{"id", "a", "b", "long", "e", "tag"},
		OIDs: []uint32{pgtype.Int8OID, pgtype.TextOID, pgtype.VarcharOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID}}
	p, err := m.plan(rel)
	if err != nil {
		t.Fatal(err)
	}
	formats := make([]int16, len(rel.Names))
	for i := range formats {
		formats[i] = pgtype.BinaryFormatCode
	}
	sp := m.compile(p, formats, pgtype.NewMap())
	long := strings.Repeat("l", rowplan.MaxShared+1)
	fields := [][]byte{{0, 0, 0, 0, 0, 0, 0, 42}, []byte("aa"), []byte("bbb"), []byte(long), {}, []byte("t")}
	var row sharedRow
	if err := sp.DecodeFields(unsafe.Pointer(&row), nil, fields); err != nil {
		t.Fatal(err)
	}
	want := sharedRow{ID: 42, A: "aa", B: "bbb", Long: long, E: "", Tag: "t"}
	if row != want {
		t.Fatalf("decoded %+v, want %+v", row, want)
	}
	for i := range fields {
		clear(fields[i]) // the row must not alias the wire bytes
	}
	if row != want {
		t.Fatalf("after the input was cleared: %+v, want %+v", row, want)
	}
	// Addresses as numbers: the end of an allocation is no pointer
	// (checkptr, under -race).
	at := func(s string) uintptr { return uintptr(unsafe.Pointer(unsafe.StringData(s))) }
	if at(row.A)+uintptr(len(row.A)) != at(row.B) {
		t.Errorf("a and b are not in one allocation")
	}
	if at(row.B)+uintptr(len(row.B)) == at(row.Long) {
		t.Errorf("a value over rowplan.MaxShared is in the row's shared allocation")
	}

	fields = [][]byte{{0, 0, 0, 0, 0, 0, 0, 1}, []byte("aa"), nil, []byte("x"), []byte("e"), []byte("t")}
	if err := sp.DecodeFields(unsafe.Pointer(&row), nil, fields); err == nil || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("NULL into a string field: %v, want an error naming column \"b\"", err)
	}
}
