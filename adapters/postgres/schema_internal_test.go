package pginformer

import (
	"errors"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/jackc/pgx/v5/pgtype"
)

// TestShapeDiffs: what a Relation message or the catalog may show against
// what NewTable proved, for a struct Table mapping id and v of (id, v,
// note) and for a map Table omitting note.
func TestShapeDiffs(t *testing.T) {
	cols := []column{
		{name: "id", oid: pgtype.Int8OID, typmod: -1, notNull: true},
		{name: "v", oid: pgtype.Int4OID, typmod: -1, notNull: true},
		{name: "note", oid: pgtype.TextOID, typmod: -1},
	}
	st := newTableState("public", "t")
	st.cols = []string{"id", "v"}
	structShape := shapeOf(st, cols, nil)
	mapState := newTableState("public", "t")
	mapState.anyColumn = true
	mapShape := shapeOf(mapState, cols, map[string]bool{"note": true})
	rel := func(names []string, oids ...uint32) *wal.Relation {
		r := &wal.Relation{Names: names, OIDs: oids}
		for range names {
			r.Mods = append(r.Mods, -1)
		}
		return r
	}
	for _, c := range []struct {
		name  string
		shape *tableShape
		rel   *wal.Relation
		want  string // "" none, "fail", "proof"
	}{
		{"same", structShape, rel([]string{"id", "v", "note"}, pgtype.Int8OID, pgtype.Int4OID, pgtype.TextOID), ""},
		{"unmapped added", structShape, rel([]string{"id", "v", "note", "x"}, pgtype.Int8OID, pgtype.Int4OID, pgtype.TextOID, pgtype.TextOID), ""},
		{"unmapped dropped", structShape, rel([]string{"id", "v"}, pgtype.Int8OID, pgtype.Int4OID), ""},
		{"mapped dropped", structShape, rel([]string{"id", "note"}, pgtype.Int8OID, pgtype.TextOID), "fail"},
		{"mapped retyped", structShape, rel([]string{"id", "v", "note"}, pgtype.Int8OID, pgtype.Int8OID, pgtype.TextOID), "proof"},
		{"map: column added", mapShape, rel([]string{"id", "v", "note", "x"}, pgtype.Int8OID, pgtype.Int4OID, pgtype.TextOID, pgtype.TextOID), "proof"},
		{"map: omitted column sent", mapShape, rel([]string{"id", "v", "note"}, pgtype.Int8OID, pgtype.Int4OID, pgtype.TextOID), ""},
		{"map: column dropped", mapShape, rel([]string{"id", "note"}, pgtype.Int8OID, pgtype.TextOID), "proof"},
	} {
		got := ""
		if ch := c.shape.diffRelation(c.rel); ch != nil {
			got = "fail"
			if ch.proof {
				got = "proof"
			}
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	nullable := append([]column(nil), cols...)
	nullable[1].notNull = false
	if ch := structShape.diffColumns(nullable); ch == nil || !ch.proof {
		t.Errorf("DROP NOT NULL of a mapped column: %+v, want a change to prove", ch)
	}
	if ch := structShape.diffColumns(cols[:2]); ch != nil {
		t.Errorf("an unmapped column dropped: %+v, want none", ch)
	}
	relist := &SchemaChangeError{Table: `"public"."t"`, Column: "v", Change: "type changed", Action: SchemaRelist}
	fail := &SchemaChangeError{Table: `"public"."t"`, Column: "v", Change: "dropped or renamed", Action: SchemaFail, Fix: "map it"}
	if !errors.Is(relist, driver.ErrExpired) || errors.Is(relist, driver.ErrPermanent) || !errors.Is(fail, driver.ErrPermanent) || errors.Is(fail, driver.ErrExpired) {
		t.Errorf("SchemaChangeError matches: relist %v/%v, fail %v/%v", errors.Is(relist, driver.ErrExpired), errors.Is(relist, driver.ErrPermanent), errors.Is(fail, driver.ErrPermanent), errors.Is(fail, driver.ErrExpired))
	}
}
