package pginformer

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// NewTable proves each field mapping before anything is streamed: a value
// that cannot be decoded later would otherwise drop its row from the cache.
// The proof decodes, into the field's type, NULL when the column is
// nullable and a few extreme values of the column's type that the server
// itself renders as text (so that the samples are exactly what List and the
// stream will see, and are valid for the column's width and domain).

// Per base type: values at the edges of what the type holds.
var sampleValues = map[uint32][]string{
	pgtype.Int2OID:        {"-32768", "32767"},
	pgtype.Int4OID:        {"-2147483648", "2147483647"},
	pgtype.Int8OID:        {"-9223372036854775808", "9223372036854775807"},
	pgtype.OIDOID:         {"4294967295"},
	pgtype.Float4OID:      {"-1.5", "NaN", "Infinity"},
	pgtype.Float8OID:      {"-1.5", "NaN", "Infinity"},
	pgtype.NumericOID:     {"-0.5", "NaN", "99999999999999999999", "9999999999999999999", "99999"},
	pgtype.TextOID:        {"x"},
	pgtype.VarcharOID:     {"x"},
	pgtype.BPCharOID:      {"x"},
	pgtype.NameOID:        {"x"},
	pgtype.BoolOID:        {"true"},
	pgtype.ByteaOID:       {`\x00`},
	pgtype.DateOID:        {"2000-01-01"},
	pgtype.TimestampOID:   {"2000-01-01 00:00:00.5"},
	pgtype.TimestamptzOID: {"2000-01-01 00:00:00.5+00"},
	pgtype.TimeOID:        {"12:00:00"},
	pgtype.IntervalOID:    {"1 day 00:00:01"},
	pgtype.UUIDOID:        {"00000000-0000-0000-0000-000000000000"},
	pgtype.InetOID:        {"10.0.0.1/8", "::1"},
	pgtype.CIDROID:        {"10.0.0.0/8"},
	790:                   {"-92233720368547758.08", "92233720368547758.07"}, // money
	3220:                  {"0/0", "FFFFFFFF/FFFFFFFF"},                      // pg_lsn
}

// samples returns candidate literals for a column; the server drops those
// the column's type does not accept.
func (s *Source) samples(ctx context.Context, conn *pgx.Conn, c column) []string {
	if c.category == "A" {
		out := []string{"{}", "{NULL}"}
		for _, v := range s.baseSamples(ctx, conn, c.elem) {
			out = append(out, `{"`+strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v)+`"}`)
		}
		return out
	}
	return s.baseSamples(ctx, conn, c.base)
}

func (s *Source) baseSamples(ctx context.Context, conn *pgx.Conn, oid uint32) []string {
	if v, ok := sampleValues[oid]; ok {
		return v
	}
	// An enum: its first label.
	var label string
	if err := conn.QueryRow(ctx, "SELECT enumlabel FROM pg_enum WHERE enumtypid = $1 ORDER BY enumsortorder LIMIT 1", oid).Scan(&label); err == nil {
		return []string{label}
	}
	return nil
}

// proveMapping checks that field (of type ft) can hold every value of
// column c. tm knows the table's derived types.
func (s *Source) proveMapping(ctx context.Context, conn *pgx.Conn, tm *pgtype.Map, st *tableState, c column, field string, ft reflect.Type) error {
	ident := st.ident.Sanitize()
	if !c.notNull {
		if err := tm.Scan(c.oid, pgtype.TextFormatCode, nil, reflect.New(ft).Interface()); err != nil {
			return fmt.Errorf("postgres table %s: column %q (%s) is nullable, and field %s (%s) cannot hold NULL: make the field a pointer (*%s) or a type that holds NULL (a pgtype type, sql.Null...), or declare the column NOT NULL", ident, c.name, c.typname, field, ft, ft)
		}
	}
	tried := 0
	for _, lit := range s.samples(ctx, conn, c) {
		var text string
		// format_type's output is a valid type name, quoted where needed.
		if err := conn.QueryRow(ctx, "SELECT CAST($1::text AS "+c.typname+")::text", lit).Scan(&text); err != nil {
			continue // not a value of this column (width, domain check)
		}
		tried++
		if err := tm.Scan(c.oid, pgtype.TextFormatCode, []byte(text), reflect.New(ft).Interface()); err != nil {
			return fmt.Errorf("postgres table %s: column %q (%s) holds values that field %s (%s) cannot: %q does not decode (%v); use a Go type that holds every value of the column (string holds any), or leave the field out with `db:\"-\"`", ident, c.name, c.typname, field, ft, text, err)
		}
	}
	if tried == 0 {
		// A type without samples here (composite, range, geometric...):
		// decode a value of the table, if it has one.
		var text *string
		err := conn.QueryRow(ctx, "SELECT "+pgx.Identifier{c.name}.Sanitize()+"::text FROM "+ident+" WHERE "+pgx.Identifier{c.name}.Sanitize()+" IS NOT NULL LIMIT 1").Scan(&text)
		if err == nil && text != nil {
			if err := tm.Scan(c.oid, pgtype.TextFormatCode, []byte(*text), reflect.New(ft).Interface()); err != nil {
				return fmt.Errorf("postgres table %s: column %q (%s) cannot be decoded into field %s (%s): a value of the table does not decode (%v); use a Go type that holds every value of the column (string holds any), or leave the field out with `db:\"-\"`", ident, c.name, c.typname, field, ft, err)
			}
		}
	}
	return nil
}
