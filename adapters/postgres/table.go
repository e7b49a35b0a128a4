package pginformer

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// TableOptions configures a Table. The zero value of every field means the
// default.
type TableOptions[T any] struct {
	// Schema holds the table. Default "public".
	Schema string
	// Omit lists columns to leave out: they are neither read by List nor
	// decoded from the stream, and a map[string]any row has no entry for
	// them. Generated columns are always left out (pgoutput before
	// Postgres 18 does not stream them).
	Omit []string
	// SkipUndecodable keeps the sync going over rows that do not decode
	// into T (or whose primary key is empty): each is reported as an event
	// with a *driver.DecodeError (counted by the informer's DecodeFailed
	// metric) and counted by Table.Skipped. A listed row that fails is
	// missing from the cache. A streamed change that fails keeps its type
	// and its key (when the key itself decodes): the informer applies the
	// core's rule for undecodable events, under which an update that fails
	// never leaves the key's previous object looking current (the key
	// leaves the cache, or the informer stops, by the core's policy); a
	// change whose key does not decode cannot name its object. Default:
	// such a row fails the List with driver.ErrPermanent, naming how many
	// rows failed and why, and a watch that meets one fails the same way.
	SkipUndecodable bool
	// Where, when set, makes the Table a partial sync (package filter):
	// conditions Postgres evaluates exactly go into the List's snapshot
	// query, the rest (and the whole filter on the stream) is evaluated on
	// each decoded row; see filter.go. Handlers see a row that starts
	// matching as an add and one that stops as a delete carrying its last
	// matching state.
	Where *filter.Filter[T]
	// OnSchemaChange decides what the Table does when its table's schema
	// changes under it in a way T still holds (a mapped column's type,
	// width or nullability changed and the mapping is proven again; any
	// column change of a map[string]any Table): SchemaRelist lists the
	// table again (handlers see only the differences), SchemaFail stops
	// the informer with a *SchemaChangeError. A change T cannot hold (a
	// mapped column dropped or renamed, a type T cannot hold, the table
	// dropped or out of the publication) always stops it. Default
	// (nil): SchemaRelist. See "Schema changes" in the package doc.
	OnSchemaChange SchemaPolicy
}

// Table is one table of a Source as a driver.ListerWatcher[T]. T is a struct
// whose exported fields map to columns by `db` tag or by name (case and
// underscores ignored, like pgx.RowToStructByName; `db:"-"` leaves a field
// out), or map[string]any.
type Table[T any] struct {
	src     *Source
	st      *tableState
	m       *mapper
	opts    TableOptions[T]
	skipped atomic.Int64
	filter  *tableFilter[T] // nil: unfiltered
	changes atomic.Int64    // row changes the stream delivered

	codecOnce sync.Once // Codec
	codec     codec.Codec[T]
}

var (
	_ driver.ListerWatcher[map[string]any] = (*Table[map[string]any])(nil)
	_ driver.HeadReader                    = (*Table[map[string]any])(nil)
	_ driver.ProgressReporter              = (*Table[map[string]any])(nil)
)

// NewTable registers table (a raw name, quoted by this package) of
// opts.Schema with src and checks it against the catalog: it exists, the
// role may SELECT it, it has a primary key and replica identity DEFAULT or
// FULL, a publication the Source did not create carries its changes, and
// every field of T maps to a column whose every value (NULL included when
// the column is nullable) decodes into the field. It does I/O. Register
// every table before the first List of any of them.
func NewTable[T any](ctx context.Context, src *Source, table string, opts TableOptions[T]) (*Table[T], error) {
	if opts.Schema == "" {
		opts.Schema = "public"
	}
	st := newTableState(opts.Schema, table)
	ident := st.ident.Sanitize()
	typ, err := rowType[T](ident)
	if err != nil {
		return nil, err
	}
	if err := src.checkRegistrable(ident); err != nil {
		return nil, err
	}
	conn, err := src.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer src.release(conn)
	if err := src.lookupTable(ctx, conn, st); err != nil {
		return nil, err
	}
	if !src.pubOwned {
		if err := src.checkPublication(ctx, conn, st); err != nil {
			return nil, err
		}
	} else if err := src.checkPartitionFamily(ctx, conn, st); err != nil {
		return nil, err
	}
	cols, err := columns(ctx, conn, st.oid)
	if err != nil {
		return nil, src.wrap("read columns of "+ident, err)
	}
	omit, err := omitSet(st, cols, opts.Omit)
	if err != nil {
		return nil, err
	}
	tm := src.typeMap()
	loaded, err := src.loadColumnTypes(ctx, conn, tm, cols, ident)
	if err != nil {
		return nil, err
	}
	m := newMapper(src, st, typ, omit)
	if typ != nil {
		if err := src.checkFields(ctx, conn, tm, m, cols); err != nil {
			return nil, err
		}
	}
	tf, err := tableFilterFor(m, opts.Where, cols)
	if err != nil {
		return nil, err
	}
	for _, c := range cols {
		if c.generated {
			omit[c.name] = true
		}
	}
	if err := st.setColumns(m, cols); err != nil {
		return nil, err
	}
	if !src.pubOwned {
		if err := src.checkPublishedColumns(ctx, conn, st); err != nil {
			return nil, err
		}
	}
	st.resetKnown()
	st.feed.shape = shapeOf(st, cols, m.omit)
	st.policy = opts.OnSchemaChange
	st.reprove = src.reprover(typ, m, ident)
	if err := src.register(st, loaded); err != nil {
		return nil, err
	}
	return &Table[T]{src: src, st: st, m: m, opts: opts, filter: tf}, nil
}

// rowType returns T's struct type, or nil when T is map[string]any: the
// mapper and the field checks take a nil type to mean "a map holds any
// column". Any other T is refused before NewTable does any I/O.
func rowType[T any](ident string) (reflect.Type, error) {
	var zero T
	if _, ok := any(zero).(map[string]any); ok {
		return nil, nil
	}
	typ := reflect.TypeOf(zero)
	if typ == nil || typ.Kind() != reflect.Struct {
		return nil, fmt.Errorf("pginformer: table %s: type %T is neither a struct nor map[string]any", ident, zero)
	}
	return typ, nil
}

// checkRegistrable refuses a table registered on a closed Source, or after
// the Source's first List froze its table set (the slot's stream and the
// snapshot are planned for the tables known then).
func (s *Source) checkRegistrable(ident string) error {
	s.mu.Lock()
	frozen, closed := s.frozen, s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if frozen {
		return fmt.Errorf("pginformer: table %s registered after the source's first List; register every table first", ident)
	}
	return nil
}

// omitSet checks TableOptions.Omit against the table's columns and returns
// it as a set: a name the table does not have is a mistake to report, and a
// primary key column cannot be left out because keys are made of it.
func omitSet(st *tableState, cols []column, names []string) (map[string]bool, error) {
	ident := st.ident.Sanitize()
	omit := map[string]bool{}
	for _, name := range names {
		found := false
		for _, c := range cols {
			found = found || c.name == name
		}
		if !found {
			return nil, fmt.Errorf("pginformer: table %s: TableOptions.Omit names column %q, which the table does not have", ident, name)
		}
		for _, k := range st.pk {
			if k == name {
				return nil, fmt.Errorf("pginformer: table %s: TableOptions.Omit names primary key column %q: keys are made of it", ident, name)
			}
		}
		omit[name] = true
	}
	return omit, nil
}

// loadColumnTypes loads into tm the types of cols that tm does not know and
// returns them (nil when there were none). Enums, domains and arrays of
// them are unknown to pgtype until loaded. The caller decides how the
// stream's decoders get them (register, or appending to s.types).
func (s *Source) loadColumnTypes(ctx context.Context, conn *pgx.Conn, tm *pgtype.Map, cols []column, ident string) ([]*pgtype.Type, error) {
	var unknown []string
	for _, c := range cols {
		if _, ok := tm.TypeForOID(c.oid); !ok {
			unknown = append(unknown, c.qname)
		}
	}
	if len(unknown) == 0 {
		return nil, nil
	}
	loaded, err := conn.LoadTypes(ctx, unknown)
	if err != nil {
		return nil, s.wrap("load column types of "+ident, err)
	}
	tm.RegisterTypes(loaded)
	return loaded, nil
}

// reprover returns the tableState's reprove: after a schema change T still
// might hold, it proves the mapping of typ again against the new columns,
// loading any new types first.
func (s *Source) reprover(typ reflect.Type, m *mapper, ident string) func(context.Context, *pgx.Conn, []column) error {
	return func(ctx context.Context, conn *pgx.Conn, cols []column) error {
		if typ == nil {
			return nil // a map holds any value (an unknown type as text)
		}
		tm := s.typeMap()
		loaded, err := s.loadColumnTypes(ctx, conn, tm, cols, ident)
		if err != nil {
			return err
		}
		if len(loaded) > 0 {
			s.mu.Lock() // the stream's decoders get them too (typeMap)
			s.types = append(s.types, loaded...)
			s.mu.Unlock()
		}
		return s.checkFields(ctx, conn, tm, m, cols)
	}
}

// checkFields checks that every field of the struct has a column that is
// streamed and whose values it can hold.
func (s *Source) checkFields(ctx context.Context, conn *pgx.Conn, tm *pgtype.Map, m *mapper, cols []column) error {
	st, ident := m.st, m.st.ident.Sanitize()
	rel := &wal.Relation{}
	for _, c := range cols {
		rel.Names = append(rel.Names, c.name)
		rel.OIDs = append(rel.OIDs, c.oid)
	}
	p, err := m.plan(rel)
	if err != nil {
		return err
	}
	m.forget(rel)
	mapped := map[string]bool{}
	// The fields are proven in column order, up to the first that maps to
	// a generated column (whose error comes after the proofs before it).
	var fields []mappedField
	var generated error
	for i, f := range p.fields {
		if f == nil {
			continue
		}
		field := m.typ.FieldByIndex(f)
		mapped[fmt.Sprint(f)] = true
		if cols[i].generated {
			generated = fmt.Errorf("pginformer: table %s: field %s maps to generated column %q, which pgoutput (before Postgres 18) does not stream: rows from the stream would carry a zero value. Leave the field out (tag it `db:\"-\"`) or name the column in TableOptions.Omit and drop the field", ident, field.Name, cols[i].name)
			break
		}
		fields = append(fields, mappedField{col: cols[i], name: field.Name, typ: field.Type})
	}
	if err := s.proveMappings(ctx, conn, tm, st, fields); err != nil {
		return err
	}
	if generated != nil {
		return generated
	}
	for _, f := range structFields(m.typ, nil) {
		if !mapped[fmt.Sprint(f.path)] {
			return fmt.Errorf("pginformer: table %s has no column for field %s of %s (or TableOptions.Omit leaves it out); tag the field `db:\"-\"` to leave it out", ident, f.name, m.typ)
		}
	}
	return nil
}

// Head returns pg_current_wal_lsn().
func (t *Table[T]) Head(ctx context.Context) (core.ResourceVersion, error) {
	return t.src.Head(ctx)
}

// ReportsProgress reports true: a watch answers progress requests with a
// Bookmark at the WAL position of the server's next keepalive.
func (t *Table[T]) ReportsProgress() bool { return true }

// StreamedChanges is how many row changes (inserts, updates, deletes) of
// the table the stream has delivered to this Table so far: with a
// publication row filter (TableOptions.Where), changes outside it are not
// sent and not counted.
func (t *Table[T]) StreamedChanges() int64 { return t.changes.Load() }

// LastSchemaChange is the last change of the table's schema the Source met
// while the table was synced, with what was done about it (nil: none). A
// status page or a metric can show it; the watch that met it returned it
// (SyncStatus shows it as the last error).
func (t *Table[T]) LastSchemaChange() *SchemaChangeError { return t.st.feed.lastChange.Load() }

// SchemaChanges counts the changes of the table's schema the Source met
// while the table was synced.
func (t *Table[T]) SchemaChanges() int64 { return t.st.feed.changes.Load() }

// Skipped is how many rows and changes were left out of the cache because
// they did not decode (with TableOptions.SkipUndecodable).
func (t *Table[T]) Skipped() int64 { return t.skipped.Load() }

// List reads the table inside a snapshot that matches a position of the
// replication stream and returns that position. The first Lists of a
// Source read inside the slot's own exported snapshot (RV = the slot's
// consistent point); a later one, once the stream runs, inside the
// snapshot of a short-lived temporary helper slot (RV = its consistent
// point).
func (t *Table[T]) List(ctx context.Context, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	sink = t.filtered(sink)
	return t.src.snapshotFor(ctx, t.st, func(r *snapReaders, rv core.ResourceVersion, fresh bool) error {
		how := readList
		if fresh {
			how = readFresh
		}
		return t.read(ctx, r, rv, how, sink)
	})
}

// filtered applies a partial sync's residue (what the snapshot query's
// WHERE does not evaluate) to the rows a List or an audit emits.
func (t *Table[T]) filtered(sink driver.ListSink[T]) driver.ListSink[T] {
	if t.filter != nil {
		emit := sink.Emit
		sink.Emit = func(ev driver.Event[T]) error {
			if !t.filter.keep(&ev) {
				return nil
			}
			return emit(ev)
		}
	}
	return sink
}

// undecodable collects the rows a List or a batch could not decode.
type undecodable struct {
	n     int
	first []error
}

func (u *undecodable) add(err error) {
	u.n++
	if len(u.first) < 3 {
		u.first = append(u.first, err)
	}
}

func (u *undecodable) err(what string) error {
	if u.n == 0 {
		return nil
	}
	reasons := make([]string, len(u.first))
	for i, e := range u.first {
		reasons[i] = e.Error()
	}
	return driver.Permanent(fmt.Errorf("%s: %d could not be decoded (first: %s); fix the data or the mapping, or set TableOptions.SkipUndecodable to leave such rows out: %w", what, u.n, strings.Join(reasons, "; "), u.first[0]))
}
