package pginformer

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/jackc/pgx/v5/pgtype"
)

type idRow struct {
	ID int64 `db:"id"`
	V  int64 `db:"v"`
}

// TestServerConditionNeedsRowFilters: a filter.Server condition on the
// key, which the publication would evaluate on Postgres 15+, is refused on
// an older server, naming the version and both fixes; on 15 it is taken.
func TestServerConditionNeedsRowFilters(t *testing.T) {
	cols := []column{{name: "id", oid: pgtype.Int8OID}, {name: "v", oid: pgtype.Int8OID}}
	f := filter.MustNew[idRow](filter.Server(filter.Le("id", 10)))
	for _, version := range []int{140011, 150004} {
		src := &Source{version: version, pubOwned: true, opts: Options{PublishRowFilter: true}}
		st := newTableState("public", "t")
		st.pk = []string{"id"}
		m := newMapper(src, st, reflect.TypeFor[idRow](), map[string]bool{})
		_, err := tableFilterFor(m, f, cols)
		if version < 150000 {
			if err == nil || !strings.Contains(err.Error(), "Postgres 14.11") || !strings.Contains(err.Error(), "upgrade") || !strings.Contains(err.Error(), "drop filter.Server") {
				t.Errorf("server %d: %v", version, err)
			}
		} else if err != nil || st.rowFilter != `"id" <= 10` {
			t.Errorf("server %d: %v, row filter %q", version, err, st.rowFilter)
		}
	}
}

// TestRememberPartialRow: TOAST memory keeps a copy of a long value of a
// row with columns the Table does not decode, not a slice of the row's
// message (which holds the others, e.g. a large unmapped text); of a row
// it decodes whole it keeps the slice.
func TestRememberPartialRow(t *testing.T) {
	for _, partial := range []bool{true, false} {
		src := &Source{}
		st := newTableState("public", "t")
		st.pk = []string{"id"}
		st.resetKnown()
		rel := &wal.Relation{Names: []string{"id", "body"}, OIDs: []uint32{pgtype.Int8OID, pgtype.TextOID}}
		omit := map[string]bool{}
		if partial {
			rel.Names = append(rel.Names, "note")
			rel.OIDs = append(rel.OIDs, pgtype.TextOID)
		}
		type row struct {
			ID   int64  `db:"id"`
			Body string `db:"body"`
		}
		m := newMapper(src, st, reflect.TypeFor[row](), omit)
		p, err := m.plan(rel)
		if err != nil {
			t.Fatal(err)
		}
		msg := []byte("1" + strings.Repeat("b", 30) + strings.Repeat("n", 1000))
		vals := []wal.Value{{Kind: 't', Data: msg[:1]}, {Kind: 't', Data: msg[1:31]}}
		if partial {
			vals = append(vals, wal.Value{Kind: 't', Data: msg[31:]})
		}
		st.remember(p, "1", vals)
		kept := st.known("1")
		if len(kept) != 1 || kept[0].col != "body" || !bytes.Equal(kept[0].data, msg[1:31]) {
			t.Fatalf("partial %v: kept %q, want body only", partial, kept)
		}
		shares := &kept[0].data[0] == &msg[1]
		if shares == partial {
			t.Errorf("partial %v: kept value shares the message's bytes: %v", partial, shares)
		}
	}
}
