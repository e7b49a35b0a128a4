package pginformer

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Partial sync (TableOptions.Where). What is pushed down, and where:
//
//   - The List's snapshot read gets a WHERE with the top-level conditions
//     Postgres evaluates exactly as Go does: Eq, In, Lt, Le, Gt, Ge on an
//     integer field mapped to a smallint, integer or bigint column; Eq and
//     In on a bool field mapped to a boolean column; Eq, In and Prefix
//     (starts_with) on a string field mapped to a text or character
//     varying column. Only on a table with REPLICA IDENTITY FULL or
//     whose mapped columns are all fixed-length: an update that brings a
//     row into the filter may leave an unchanged TOASTed value out of the
//     stream ('u'), which only the old row (FULL) or the listed value can
//     fill, and a row left out of the list has no listed value.
//   - The publication the Source creates gets a row filter (Postgres 15
//     and later) with those of the conditions that are on replica identity
//     columns (the primary key under REPLICA IDENTITY DEFAULT, any column
//     under FULL; Postgres refuses others for UPDATE and DELETE): the
//     server then sends no change of a row that neither matched before
//     nor matches after, turns an update that leaves the filter into a
//     delete and one that enters it into an insert. Several Tables on one
//     table share the publication: its row filter is the union (OR) of
//     theirs, and none when one of them has none. A publication the
//     Source did not create, or one that already carried the table
//     (a permanent slot's, from an earlier run), is left as it is.
//   - Everything else, and the whole filter on the stream, is evaluated
//     here on each decoded row.
//
// Handlers see a row that starts matching as an add and one that stops as
// a delete carrying its last matching state. Several Tables on one table
// of one Source, each with its own filter, share the slot and the stream;
// each evaluates its own filter.
const pgPushdown = "Eq/In/ranges on integer columns, Eq/In on boolean columns, Eq/In/Prefix on text and varchar columns, in the List's snapshot query, on a table with REPLICA IDENTITY FULL or only fixed-length mapped columns"

// tableFilter is a Table's partial-sync state.
type tableFilter[T any] struct {
	full    *filter.Filter[T] // evaluated on the stream
	residue *filter.Filter[T] // evaluated on the List's rows
	where   string            // SQL for the List's snapshot query; "" for none
}

// newTableFilter splits f for table st. p maps the table's columns (cols,
// in the same order) onto T.
func newTableFilter[T any](st *tableState, f *filter.Filter[T], p *rowPlan, cols []column) (*tableFilter[T], error) {
	if f == nil {
		return nil, nil
	}
	ident := st.ident.Sanitize()
	// Which column each top-level field of T maps to.
	colOf := func(field string) (column, bool) {
		idx, ok := filter.FieldIndex[T](field)
		if !ok {
			return column{}, false
		}
		for i, fi := range p.fields {
			if fi != nil && slices.Equal(fi, idx) {
				return cols[i], true
			}
		}
		return column{}, false
	}
	safe := st.full
	if !safe {
		safe = true
		for i, c := range cols {
			if p.used[i] && !fixedLength[c.oid] {
				safe = false
			}
		}
	}
	var sql, pub []string
	var identErr error
	_, residue, err := f.Split("postgres table "+ident, pgPushdown, func(e filter.Expr) bool {
		if !safe {
			return false
		}
		c, ok := colOf(e.Field)
		if !ok {
			return false
		}
		s, ok := conditionSQL(e, c)
		if ok {
			sql = append(sql, s)
			// Postgres allows a row filter on UPDATE and DELETE only
			// over the replica identity's columns.
			if st.full || slices.Contains(st.pk, c.name) {
				pub = append(pub, s)
			} else if e.Server && identErr == nil {
				identErr = fmt.Errorf("pginformer: table %s: condition %s is marked filter.Server, but column %q is not in the table's replica identity (its primary key), and Postgres evaluates a publication row filter on UPDATE and DELETE only over replica identity columns: ALTER TABLE %s REPLICA IDENTITY FULL, or filter on key columns", ident, e, c.name, ident)
			}
		}
		return ok
	})
	if err != nil {
		if !safe {
			err = fmt.Errorf("%w; table %s has REPLICA IDENTITY DEFAULT and variable-length columns, so no condition is pushed down: ALTER TABLE %s REPLICA IDENTITY FULL makes the conditions on integer, boolean and text columns part of the List's query", err, ident, ident)
		}
		return nil, fmt.Errorf("pginformer: %w", err)
	}
	if identErr != nil {
		return nil, identErr
	}
	tf := &tableFilter[T]{full: f, residue: residue}
	if len(sql) > 0 {
		tf.where = strings.Join(sql, " AND ")
	}
	if len(pub) > 0 {
		st.rowFilter = strings.Join(pub, " AND ")
	}
	st.filtered = true
	return tf, nil
}

// conditionSQL renders e, a condition on column c, as SQL that Postgres
// evaluates as the filter does in Go; ok is false when it cannot.
func conditionSQL(e filter.Expr, c column) (string, bool) {
	col := pgx.Identifier{c.name}.Sanitize()
	var lit func(v any) (string, bool)
	ordered := false
	switch c.oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		ordered = true
		lit = func(v any) (string, bool) {
			switch x := v.(type) {
			case int:
				return strconv.FormatInt(int64(x), 10), true
			case int8:
				return strconv.FormatInt(int64(x), 10), true
			case int16:
				return strconv.FormatInt(int64(x), 10), true
			case int32:
				return strconv.FormatInt(int64(x), 10), true
			case int64:
				return strconv.FormatInt(x, 10), true
			case uint:
				return strconv.FormatUint(uint64(x), 10), true
			case uint8:
				return strconv.FormatUint(uint64(x), 10), true
			case uint16:
				return strconv.FormatUint(uint64(x), 10), true
			case uint32:
				return strconv.FormatUint(uint64(x), 10), true
			case uint64:
				return strconv.FormatUint(x, 10), true
			}
			return "", false
		}
	case pgtype.BoolOID:
		lit = func(v any) (string, bool) {
			b, ok := v.(bool)
			return strconv.FormatBool(b), ok
		}
	case pgtype.TextOID, pgtype.VarcharOID:
		lit = func(v any) (string, bool) {
			s, ok := v.(string)
			if !ok || strings.IndexByte(s, 0) >= 0 {
				return "", false
			}
			return quoteLiteral(s), true
		}
	default:
		return "", false
	}
	one := func(op string) (string, bool) {
		l, ok := lit(e.Values[0])
		return col + " " + op + " " + l, ok
	}
	switch e.Op {
	case filter.OpEq:
		return one("=")
	case filter.OpIn:
		if len(e.Values) == 0 {
			return "false", true
		}
		ls := make([]string, len(e.Values))
		for i, v := range e.Values {
			l, ok := lit(v)
			if !ok {
				return "", false
			}
			ls[i] = l
		}
		return col + " IN (" + strings.Join(ls, ", ") + ")", true
	case filter.OpLt, filter.OpLe, filter.OpGt, filter.OpGe:
		if !ordered {
			return "", false // text order depends on the collation
		}
		return one(e.Op.String())
	case filter.OpPrefix:
		if c.oid != pgtype.TextOID && c.oid != pgtype.VarcharOID {
			return "", false
		}
		l, ok := lit(e.Values[0])
		return "starts_with(" + col + ", " + l + ")", ok
	}
	return "", false
}

// keep is the List's residue check; nil tf keeps everything.
func (tf *tableFilter[T]) keep(ev *core.Event[T]) bool {
	if tf == nil {
		return true
	}
	return tf.residue.Keep(ev)
}

// rewrite applies the whole filter to a decoded transaction's events.
func (tf *tableFilter[T]) rewrite(events []core.Event[T]) {
	if tf != nil {
		tf.full.RewriteBatch(events)
	}
}

// snapshotWhere is the List query's WHERE condition, "" for none.
func (tf *tableFilter[T]) snapshotWhere() string {
	if tf == nil {
		return ""
	}
	return tf.where
}

// rowFilter returns the publication row filter for the table with oid: the
// union of the row filters of every Table of it, "" when one of them needs
// every row (no filter, or no condition Postgres may evaluate on UPDATE and
// DELETE), or when the server predates row filters (Postgres 15).
func (s *Source) rowFilter(oid uint32, serverVersion int) string {
	if serverVersion < 150000 {
		return ""
	}
	var terms []string
	for _, t := range s.byOID[oid] {
		if !t.filtered || t.rowFilter == "" {
			return ""
		}
		terms = append(terms, "("+t.rowFilter+")")
	}
	slices.Sort(terms)
	return strings.Join(slices.Compact(terms), " OR ")
}

// tableFilterFor splits f against the table's columns (NewTable's hook).
func tableFilterFor[T any](m *mapper, f *filter.Filter[T], cols []column) (*tableFilter[T], error) {
	if f == nil {
		return nil, nil
	}
	rel := &relation{}
	for _, c := range cols {
		rel.names = append(rel.names, c.name)
		rel.oids = append(rel.oids, c.oid)
	}
	p, err := m.plan(rel)
	if err != nil {
		return nil, err
	}
	m.forget(rel)
	return newTableFilter(m.st, f, p, cols)
}
