package pginformer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/dbinformer/dbinformer/core/driver"
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
//     Source did not create, or a permanent slot's (which outlives the
//     process, while the next run's filter may differ), gets none; nor
//     does one before Postgres 15. A condition marked filter.Server that
//     the publication would have to evaluate is refused there.
//     Only with Options.PublishRowFilter: a row filter constrains the
//     table's migrations (see its doc).
//   - With Options.PublishColumnList, the same publication gets a column
//     list (15+): the columns the Tables of the table decode (columnList).
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
// in the same order) onto T. noRowFilter says why the publication gets no
// row filter, with the fix ("" when it may get one): a condition marked
// filter.Server, which the source must evaluate on the stream too, is then
// refused.
func newTableFilter[T any](st *tableState, f *filter.Filter[T], p *rowPlan, cols []column, noRowFilter string) (*tableFilter[T], error) {
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
				if e.Server && noRowFilter != "" && identErr == nil {
					identErr = fmt.Errorf("pginformer: table %s: condition %s is marked filter.Server, but %s, or drop filter.Server to have the adapter evaluate it on each decoded change (the List's query still does)", ident, e, noRowFilter)
				}
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
func (tf *tableFilter[T]) keep(ev *driver.Event[T]) bool {
	if tf == nil {
		return true
	}
	return tf.residue.Keep(ev)
}

// rewrite applies the whole filter to a decoded transaction's events.
func (tf *tableFilter[T]) rewrite(events []driver.Event[T]) {
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
//
// A permanent slot's publication outlives the process, and its row filter
// would apply to the WAL the slot keeps for the next run, whose filter may
// be wider: such a publication gets no row filter (the filter is evaluated
// here on every change instead).
func (s *Source) rowFilter(oid uint32, serverVersion int) string {
	if serverVersion < 150000 || s.opts.PermanentSlot || !s.opts.PublishRowFilter {
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
	rel := &wal.Relation{}
	for _, c := range cols {
		rel.Names = append(rel.Names, c.name)
		rel.OIDs = append(rel.OIDs, c.oid)
	}
	p, err := m.plan(rel)
	if err != nil {
		return nil, err
	}
	m.forget(rel)
	return newTableFilter(m.st, f, p, cols, m.src.noRowFilter())
}

// noRowFilter says why the Source's publication gets no row filter (and
// how to get one), or "" when it gets one (see rowFilter).
func (s *Source) noRowFilter() string {
	switch {
	case s.version < 150000:
		return fmt.Sprintf("the server runs Postgres %d.%d, and publication row filters (which evaluate a condition before a change is sent) came with Postgres 15: upgrade the server to 15 or later", s.version/10000, s.version%10000)
	case s.opts.PermanentSlot:
		return "a permanent slot's publication gets no row filter (it outlives the process, and a later run with a wider filter would never see the changes the old one left out): use a temporary slot"
	case !s.pubOwned:
		return fmt.Sprintf("publication %q is not the Source's own, so the Source does not set its row filter: leave Options.Publication empty so that the Source creates its own", s.pub)
	case !s.opts.PublishRowFilter:
		return "the Source's publication gets a row filter only with Options.PublishRowFilter (read its hazards: a row filter constrains the table's migrations)"
	}
	return ""
}

// setColumns records which of the table's columns (cols, from the
// catalog) the Table decodes, for the publication's column list.
func (st *tableState) setColumns(m *mapper, cols []column) error {
	rel := relationOf(cols)
	p, err := m.plan(rel)
	if err != nil {
		return err
	}
	m.forget(rel)
	st.cols, st.pubCols, st.anyColumn = nil, nil, m.typ == nil
	for i, c := range cols {
		if c.generated {
			continue
		}
		st.pubCols = append(st.pubCols, c.name)
		if p.used[i] || slices.Contains(st.pk, c.name) {
			st.cols = append(st.cols, c.name)
		}
	}
	return nil
}

// relationOf is the column layout of cols.
func relationOf(cols []column) *wal.Relation {
	rel := &wal.Relation{}
	for _, c := range cols {
		rel.Names = append(rel.Names, c.name)
		rel.OIDs = append(rel.OIDs, c.oid)
	}
	return rel
}

// columnList returns the publication's column list for the table with
// oid (Postgres 15 and later): the union of the columns every Table of it
// decodes, the primary key among them; nil to publish every column, when
// they need all of them, the server predates column lists, the table has
// REPLICA IDENTITY FULL (Postgres then refuses the table's UPDATEs and
// DELETEs under a column list that leaves a column out), the slot is
// permanent, or Options.PublishColumnList is not set (the default: see its
// hazards); nor when a Table of it
// is a map[string]any, which decodes columns added later (that a column
// list would leave out of the stream while a List reads them). A permanent slot's publication outlives the process, and the
// WAL the slot keeps is decoded with it: a later run whose struct maps
// another column would find that column missing from every change
// streamed before it could widen the list.
//
// Row filter columns need no entry of their own: a row filter is only on
// replica identity columns (see newTableFilter), which under DEFAULT are
// the primary key.
func (s *Source) columnList(oid uint32, serverVersion int) []string {
	if serverVersion < 150000 || s.opts.PermanentSlot || !s.opts.PublishColumnList {
		return nil
	}
	ts := s.byOID[oid]
	need := map[string]bool{}
	for _, t := range ts {
		if t.full || t.anyColumn {
			return nil
		}
		for _, c := range t.cols {
			need[c] = true
		}
	}
	var list []string
	all := map[string]bool{}
	for _, t := range ts {
		for _, c := range t.pubCols {
			if !all[c] {
				all[c] = true
				if need[c] {
					list = append(list, c)
				}
			}
		}
	}
	if len(list) == len(all) {
		return nil
	}
	return list
}

// checkPublishedColumns checks that publication pub sends every column the
// Table decodes: a column list of a publication the Source did not make
// (or a permanent one's from an older run) may leave out a column the
// struct maps, whose field would then be zero in every streamed change.
// Before Postgres 15 a publication sends every column.
func (s *Source) checkPublishedColumns(ctx context.Context, conn *pgx.Conn, st *tableState) error {
	if s.version < 150000 {
		return nil
	}
	var names []string
	err := conn.QueryRow(ctx, "SELECT attnames::text[] FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3", s.pub, st.schema, st.name).Scan(&names)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // published through its root, or not at all: checked elsewhere
	}
	if err != nil {
		return s.wrap("look up the published columns of "+st.ident.Sanitize(), err)
	}
	var missing []string
	for _, c := range st.cols {
		if !slices.Contains(names, c) {
			missing = append(missing, strconv.Quote(c))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	ident := st.ident.Sanitize()
	return fmt.Errorf("postgres %s: publication %q has a column list for table %s that leaves out column %[5]s, which the Table decodes: its changes would arrive without it. Publish every column (ALTER PUBLICATION %[4]s DROP TABLE %[3]s; ALTER PUBLICATION %[4]s ADD TABLE %[3]s), or map fewer columns", s.where(), s.pub, ident, pgx.Identifier{s.pub}.Sanitize(), strings.Join(missing, ", "))
}
