package pginformer_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/rowplan"
)

// TestNumericTextFromBinary: the text rowplan makes of a numeric's binary
// form is numeric_out's, to the byte, for edge values (zeros with a scale,
// powers of 10,000 around the digit groups, tiny and huge values, the
// special ones) and for many generated ones, so that a List reading
// numeric in binary decodes what the stream's text decodes to and keeps
// the same text in TOAST memory.
func TestNumericTextFromBinary(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, examplePG.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	edge := []string{"0", "0.00", "0.0000", "0.00000", "1", "-1", "1.25", "-0.5", "100", "100.00", "9999", "10000", "10000.0001",
		"99999999", "100000000", "0.0001", "0.00001", "0.1000", "0.00000001", "1e-20", "-1e20", "1e131071", "1e-16383",
		"123456789012345678901234567890.123456789", "-0.000000000000000000000000000001", "9999.9999", "NaN", "Infinity", "-Infinity"}
	sql := `SELECT v::numeric::text, v::numeric FROM unnest($1::text[]) v
		UNION ALL SELECT v::text, v FROM (
			SELECT (random() * 10 ^ (g % 40) - 10 ^ (g % 17))::numeric(60, 20) / (1 + g % 13) AS v FROM generate_series(1, 3000) g
			UNION ALL SELECT round((random() * 10 ^ (g % 30))::numeric, g % 9) FROM generate_series(1, 3000) g
			UNION ALL SELECT repeat('9', g)::numeric / 7 FROM generate_series(1, 60) g) r`
	res := conn.PgConn().ExecParams(ctx, sql, [][]byte{[]byte("{" + strings.Join(edge, ",") + "}")}, nil, []int16{0}, []int16{0, 1}).Read()
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(res.Rows) < 6000 {
		t.Fatalf("%d rows", len(res.Rows))
	}
	// And decoded from binary into a pgtype.Numeric (mostly without the
	// text) as from the text.
	type num struct{ N pgtype.Numeric }
	layout := rowplan.Layout{Names: []string{"n"}, OIDs: []uint32{pgtype.NumericOID}, Used: []bool{true}, Fields: [][]int{{0}}}
	fromBinary := rowplan.Compile(reflect.TypeFor[num](), layout, []int16{pgtype.BinaryFormatCode}, pgtype.NewMap())
	fromText := rowplan.Compile(reflect.TypeFor[num](), layout, []int16{pgtype.TextFormatCode}, pgtype.NewMap())
	for _, row := range res.Rows {
		got, err := rowplan.AppendNumericText(nil, row[1])
		if err != nil || string(got) != string(row[0]) {
			t.Errorf("binary %x: text %q, %v; numeric_out %q", row[1], got, err, row[0])
		}
		var b, x num
		errB := fromBinary.DecodeColumn(unsafe.Pointer(&b), nil, 0, row[1])
		errX := fromText.DecodeColumn(unsafe.Pointer(&x), nil, 0, row[0])
		if errB != nil || errX != nil || !reflect.DeepEqual(b, x) {
			t.Errorf("%s: from binary %+v (%v), from text %+v (%v)", row[0], b.N, errB, x.N, errX)
		}
	}
}
