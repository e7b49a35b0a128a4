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

// mappedField is a field (name, type) and the column it maps to.
type mappedField struct {
	col  column
	name string
	typ  reflect.Type
}

// proveMappings proves each field's mapping (proveMapping), in order. The
// server renders every column's samples in one statement: one round trip
// for the table instead of two per column, which was most of NewTable's
// time (and of a warm restart's, which reads no row).
func (s *Source) proveMappings(ctx context.Context, conn *pgx.Conn, tm *pgtype.Map, st *tableState, fields []mappedField) error {
	samples := make([][]string, len(fields))
	var lits, types []string
	for i, f := range fields {
		samples[i] = s.samples(ctx, conn, f.col)
		for _, lit := range samples[i] {
			lits = append(lits, lit)
			types = append(types, f.col.typname)
		}
	}
	texts, err := s.castSamples(ctx, conn, lits, types)
	if err != nil {
		return s.wrap("render sample values of the columns of "+st.ident.Sanitize(), err)
	}
	for i, f := range fields {
		n := len(samples[i])
		if err := s.proveMapping(ctx, conn, tm, st, f.col, f.name, f.typ, texts[:n:n]); err != nil {
			return err
		}
		texts = texts[n:]
	}
	return nil
}

// proveMapping checks that field (of type ft) can hold every value of
// column c, given its samples as the server rendered them (texts; nil for
// those the column's type does not accept). tm knows the table's derived
// types.
func (s *Source) proveMapping(ctx context.Context, conn *pgx.Conn, tm *pgtype.Map, st *tableState, c column, field string, ft reflect.Type, texts []*string) error {
	ident := st.ident.Sanitize()
	if !c.notNull {
		if err := tm.Scan(c.oid, pgtype.TextFormatCode, nil, reflect.New(ft).Interface()); err != nil {
			return fmt.Errorf("postgres table %s: column %q (%s) is nullable, and field %s (%s) cannot hold NULL: make the field a pointer (*%s) or a type that holds NULL (a pgtype type, sql.Null...), or declare the column NOT NULL", ident, c.name, c.typname, field, ft, ft)
		}
	}
	tried := 0
	for _, text := range texts {
		if text == nil {
			continue // not a value of this column (width, domain check)
		}
		tried++
		if err := tm.Scan(c.oid, pgtype.TextFormatCode, []byte(*text), reflect.New(ft).Interface()); err != nil {
			return fmt.Errorf("postgres table %s: column %q (%s) holds values that field %s (%s) cannot: %q does not decode (%v); %s", ident, c.name, c.typname, field, ft, *text, err, mappingFix(c, ft))
		}
	}
	if tried == 0 {
		// A type without samples here (composite, range, geometric...):
		// decode a value of the table, if it has one.
		var text *string
		err := conn.QueryRow(ctx, "SELECT "+pgx.Identifier{c.name}.Sanitize()+"::text FROM "+ident+" WHERE "+pgx.Identifier{c.name}.Sanitize()+" IS NOT NULL LIMIT 1").Scan(&text)
		if err == nil && text != nil {
			if err := tm.Scan(c.oid, pgtype.TextFormatCode, []byte(*text), reflect.New(ft).Interface()); err != nil {
				return fmt.Errorf("postgres table %s: column %q (%s) cannot be decoded into field %s (%s): a value of the table does not decode (%v); %s", ident, c.name, c.typname, field, ft, err, mappingFix(c, ft))
			}
		}
	}
	return nil
}

// mappingFix says which Go types hold every value of column c, for a
// field of type ft that does not.
func mappingFix(c column, ft reflect.Type) string {
	if c.category == "A" {
		// An array may hold NULL elements: only pointer elements hold them.
		elem := "string"
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Pointer {
			elem = ft.Elem().String()
		}
		return fmt.Sprintf("an array column may hold NULL elements: use []*%s (or []*string, which holds any element), or leave the field out with `db:\"-\"`", elem)
	}
	return "use a Go type that holds every value of the column (string holds any), or leave the field out with `db:\"-\"`"
}

// castSampleFunc renders a literal as a value of a type, or NULL when the
// type does not accept it. The cast's error is caught inside the
// function, so that the mapping proof leaves no failed statement (and no
// ERROR line) in the server's log. pg_temp: it lives and dies with the
// connection, needing only the TEMPORARY privilege every role has by
// default.
const castSampleFunc = `CREATE OR REPLACE FUNCTION pg_temp.dbinformer_cast_sample(v text, t text) RETURNS text
LANGUAGE plpgsql AS $f$
BEGIN
	EXECUTE format('SELECT CAST(%L AS %s)::text', v, t) INTO v;
	RETURN v;
EXCEPTION WHEN OTHERS THEN
	RETURN NULL;
END
$f$`

// castSamples renders each literal lits[i] as a value of type typnames[i]
// (a format_type output), nil for those the type does not accept.
func (s *Source) castSamples(ctx context.Context, conn *pgx.Conn, lits, typnames []string) ([]*string, error) {
	if len(lits) == 0 {
		return nil, nil
	}
	if _, err := conn.Exec(ctx, castSampleFunc); err != nil {
		// No TEMPORARY privilege: cast each literal by itself (a value
		// the type refuses fails its statement, which the server logs).
		out := make([]*string, len(lits))
		for i, lit := range lits {
			var text string
			if conn.QueryRow(ctx, "SELECT CAST($1::text AS "+typnames[i]+")::text", lit).Scan(&text) == nil {
				out[i] = &text
			}
		}
		return out, nil
	}
	var out []*string
	err := conn.QueryRow(ctx, "SELECT array_agg(pg_temp.dbinformer_cast_sample(v, t) ORDER BY n) FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS l(v, t, n)", lits, typnames).Scan(&out)
	if err == nil && len(out) != len(lits) {
		err = fmt.Errorf("%d sample values rendered for %d", len(out), len(lits))
	}
	return out, err
}
