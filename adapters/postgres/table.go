package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/dbinformer/dbinformer/core"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

type changeKind uint8

const (
	changeInsert changeKind = iota + 1
	changeUpdate
	changeDelete
	changeTruncate
)

// rawValue is one column as the server printed it (text format), from
// either path: 'n' NULL, 't' text, 'u' unchanged TOASTed value (stream only).
type rawValue struct {
	kind byte
	data []byte
}

type change struct {
	kind     changeKind
	rel      *relation
	new, old []rawValue
	oldKind  uint8 // 'K' key only, 'O' old tuple (REPLICA IDENTITY FULL)
}

type batch struct {
	rv        core.ResourceVersion // commit end LSN
	commitLSN core.ResourceVersion // commit record start: the server resends from here
	changes   []change
}

// relation is a column layout: from a Relation message, or from the result
// of the snapshot query.
type relation struct {
	names []string
	oids  []uint32
}

func newRelation(m *pglogrepl.RelationMessage) *relation {
	r := &relation{}
	for _, c := range m.Columns {
		r.names = append(r.names, c.Name)
		r.oids = append(r.oids, c.DataType)
	}
	return r
}

func tupleOf(t *pglogrepl.TupleData) []rawValue {
	if t == nil {
		return nil
	}
	out := make([]rawValue, len(t.Columns))
	for i, c := range t.Columns {
		out[i] = rawValue{kind: c.DataType, data: c.Data}
	}
	return out
}

// tableState is the per-table part of a Source that the stream feeds.
// Fields below "guarded by src.mu" are only touched under it.
// knownValue is one variable-length column's last value.
type knownValue struct {
	col  string
	data []byte
}

type tableState struct {
	schema, name string
	ident        pgx.Identifier
	oid          uint32
	pk           []string
	full         bool // REPLICA IDENTITY FULL

	// guarded by src.mu
	active  bool                 // listed in the current slot's lifetime
	floor   core.ResourceVersion // oldest version a Watch may start from
	applied core.ResourceVersion // acknowledged by a consumer
	// ackedChanges counts the changes of batches at or below applied.
	ackedChanges int
	batches      []batch // streamed: unacknowledged ones, and some history before them

	// known holds every key of the table as of the last decoded change,
	// with the values of its variable-length columns: an unchanged TOASTed
	// value ('u') is filled in from here, and TRUNCATE deletes these keys.
	knownMu sync.Mutex
	known   map[string][]knownValue
	knownRV core.ResourceVersion // version known reflects; older batches (history replays) leave it alone
}

func (t *tableState) expire() {
	t.active = false
	t.floor = math.MaxUint64
	t.batches = nil
	t.ackedChanges = 0
}

// firstAfter is the index of the first batch above rv (batches are in
// version order).
func (t *tableState) firstAfter(rv core.ResourceVersion) int {
	return sort.Search(len(t.batches), func(i int) bool { return t.batches[i].rv > rv })
}

// advance records that a consumer applied everything up to rv, and drops
// acknowledged batches beyond the history kept for watches that start from
// an older version, raising floor past what it drops.
func (t *tableState) advance(rv core.ResourceVersion, history int) {
	if rv <= t.applied {
		return
	}
	i, j := t.firstAfter(t.applied), t.firstAfter(rv)
	for k := i; k < j; k++ {
		t.ackedChanges += len(t.batches[k].changes)
	}
	t.applied = rv
	drop := 0
	for drop < j && t.ackedChanges > history {
		t.ackedChanges -= len(t.batches[drop].changes)
		t.floor = max(t.floor, t.batches[drop].rv)
		t.batches[drop] = batch{} // release its rows
		drop++
	}
	// The array's dropped front is freed when append next reallocates.
	t.batches = t.batches[drop:]
}

// reset starts the table over at rv: listed there, nothing streamed yet.
func (t *tableState) reset(rv core.ResourceVersion) {
	t.active, t.floor, t.applied, t.batches, t.ackedChanges = true, rv, rv, nil, 0
}

// pending is the oldest batch no consumer has acknowledged.
func (t *tableState) pending() *batch {
	if i := t.firstAfter(t.applied); i < len(t.batches) {
		return &t.batches[i]
	}
	return nil
}

func (t *tableState) sourceName() string {
	return "postgres table " + t.ident.Sanitize()
}

// Table is one table of a Source as a core.ListerWatcher[T]. T is a struct
// whose exported fields map to columns by `db` tag or by name (case and
// underscores ignored, like pgx.RowToStructByName), or map[string]any.
type Table[T any] struct {
	src   *Source
	st    *tableState
	isMap bool
	typ   reflect.Type

	mu    sync.Mutex
	plans map[*relation]*rowPlan
	maps  sync.Pool // *pgtype.Map: not safe for concurrent use
}

var (
	_ core.ListerWatcher[map[string]any] = (*Table[map[string]any])(nil)
	_ core.HeadReader                    = (*Table[map[string]any])(nil)
	_ core.Watcher[map[string]any]       = (*watcher[map[string]any])(nil)
	_ core.ProgressRequester             = (*watcher[map[string]any])(nil)
)

// NewTable registers table schema.name (raw identifiers, quoted by this
// package; schema "" means "public") with src and checks it: it exists, the
// role may SELECT it, it has a primary key, its replica identity is DEFAULT
// or FULL, and every field of T maps to a column whose type can be decoded
// into it. Register every table before the first List.
func NewTable[T any](ctx context.Context, src *Source, schema, name string) (*Table[T], error) {
	if schema == "" {
		schema = "public"
	}
	ident := pgx.Identifier{schema, name}
	t := &Table[T]{src: src, plans: map[*relation]*rowPlan{}}
	var zero T
	switch any(zero).(type) {
	case map[string]any:
		t.isMap = true
	default:
		t.typ = reflect.TypeOf(zero)
		if t.typ == nil || t.typ.Kind() != reflect.Struct {
			return nil, fmt.Errorf("postgres: table %s: type %T is neither a struct nor map[string]any", ident.Sanitize(), zero)
		}
	}
	src.mu.Lock()
	frozen := src.frozen
	src.mu.Unlock()
	if frozen {
		return nil, fmt.Errorf("postgres: table %s registered after the source's first List; register every table first", ident.Sanitize())
	}
	conn, err := src.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	st := &tableState{schema: schema, name: name, ident: ident, floor: math.MaxUint64}
	t.st = st
	var ident8 string
	var canSelect bool
	err = conn.QueryRow(ctx, `SELECT c.oid, c.relreplident::text, has_table_privilege(c.oid, 'SELECT')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, schema, name).Scan(&st.oid, &ident8, &canSelect)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres %s: table %s does not exist", src.where(), ident.Sanitize())
	}
	if err != nil {
		return nil, src.wrap("look up table "+ident.Sanitize(), err)
	}
	if !canSelect {
		return nil, fmt.Errorf("postgres %s: role %q has no SELECT privilege on table %s (GRANT SELECT ON %s TO %s)", src.where(), src.connCfg.User, ident.Sanitize(), ident.Sanitize(), pgx.Identifier{src.connCfg.User}.Sanitize())
	}
	rows, _ := conn.Query(ctx, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = $1 AND i.indisprimary
		ORDER BY array_position(i.indkey::int2[], a.attnum)`, st.oid)
	st.pk, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, src.wrap("read primary key of "+ident.Sanitize(), err)
	}
	if len(st.pk) == 0 {
		return nil, fmt.Errorf("postgres %s: table %s has no primary key; keys come from the primary key, and under REPLICA IDENTITY DEFAULT deletes carry nothing else (ALTER TABLE %s ADD PRIMARY KEY (...))", src.where(), ident.Sanitize(), ident.Sanitize())
	}
	switch ident8 {
	case "d":
	case "f":
		st.full = true
	default:
		return nil, fmt.Errorf("postgres %s: table %s has REPLICA IDENTITY %s; use DEFAULT or FULL (ALTER TABLE %s REPLICA IDENTITY DEFAULT)", src.where(), ident.Sanitize(), map[string]string{"n": "NOTHING", "i": "USING INDEX"}[ident8], ident.Sanitize())
	}
	type col struct {
		name    string
		oid     uint32
		typname string
		qname   string // schema.typname, as pgx.Conn.LoadTypes wants it
	}
	rows, _ = conn.Query(ctx, `SELECT a.attname, a.atttypid, format_type(a.atttypid, NULL), tn.nspname || '.' || ty.typname
		FROM pg_attribute a JOIN pg_type ty ON ty.oid = a.atttypid JOIN pg_namespace tn ON tn.oid = ty.typnamespace
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, st.oid)
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (col, error) {
		var c col
		err := r.Scan(&c.name, &c.oid, &c.typname, &c.qname)
		return c, err
	})
	if err != nil {
		return nil, src.wrap("read columns of "+ident.Sanitize(), err)
	}
	// Enums, domains and arrays of them are unknown to pgtype until loaded.
	var unknown []string
	for _, c := range cols {
		if _, ok := conn.TypeMap().TypeForOID(c.oid); !ok {
			unknown = append(unknown, c.qname)
		}
	}
	var loaded []*pgtype.Type
	if len(unknown) > 0 {
		loaded, err = conn.LoadTypes(ctx, unknown)
		if err != nil {
			return nil, src.wrap("load column types of "+ident.Sanitize(), err)
		}
	}
	src.mu.Lock()
	src.types = append(src.types, loaded...)
	src.mu.Unlock()
	t.maps.New = func() any {
		m := pgtype.NewMap()
		src.mu.Lock()
		types := src.types
		src.mu.Unlock()
		m.RegisterTypes(types)
		return m
	}
	rel := &relation{}
	for _, c := range cols {
		rel.names = append(rel.names, c.name)
		rel.oids = append(rel.oids, c.oid)
	}
	plan, err := t.plan(rel)
	if err != nil {
		return nil, err
	}
	if !t.isMap {
		// Every field needs a column, and every column type a decoding
		// into its field.
		m := t.maps.Get().(*pgtype.Map)
		defer t.maps.Put(m)
		mapped := map[string]bool{}
		for i, f := range plan.fields {
			if f == nil {
				continue
			}
			mapped[fmt.Sprint(f)] = true
			target := reflect.New(t.typ.FieldByIndex(f).Type).Interface()
			if p := m.PlanScan(rel.oids[i], pgtype.TextFormatCode, target); fmt.Sprintf("%T", p) == "*pgtype.scanPlanFail" {
				return nil, fmt.Errorf("postgres %s: table %s: column %q of type %s cannot be decoded into field %s (%s)", src.where(), ident.Sanitize(), rel.names[i], cols[i].typname, t.typ.FieldByIndex(f).Name, t.typ.FieldByIndex(f).Type)
			}
		}
		for _, f := range structFields(t.typ, nil) {
			if !mapped[fmt.Sprint(f.path)] {
				return nil, fmt.Errorf("postgres %s: table %s has no column for field %s of %s", src.where(), ident.Sanitize(), f.name, t.typ)
			}
		}
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.frozen {
		return nil, fmt.Errorf("postgres: table %s registered after the source's first List; register every table first", ident.Sanitize())
	}
	src.tables = append(src.tables, st)
	src.byOID[st.oid] = append(src.byOID[st.oid], st)
	return t, nil
}

type structField struct {
	path      []int
	name, tag string
}

// structFields lists the exported fields of typ that map to columns, with
// the fields of embedded structs without a db tag flattened in, as
// pgx.RowToStructByName does.
func structFields(typ reflect.Type, prefix []int) []structField {
	var out []structField
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		tag := f.Tag.Get("db")
		if !f.IsExported() || tag == "-" {
			continue
		}
		path := append(append([]int(nil), prefix...), i)
		if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, structFields(f.Type, path)...)
			continue
		}
		out = append(out, structField{path: path, name: f.Name, tag: tag})
	}
	return out
}

// rowPlan maps one column layout onto T.
type rowPlan struct {
	rel    *relation
	fields [][]int // per column: the struct field index, nil when unmapped
	key    []int   // column positions of the primary key
}

func normalizeName(s string) string {
	return strings.ToLower(strings.ReplaceAll(s, "_", ""))
}

func (t *Table[T]) plan(rel *relation) (*rowPlan, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.plans[rel]; ok {
		return p, nil
	}
	p := &rowPlan{rel: rel, fields: make([][]int, len(rel.names))}
	if !t.isMap {
		byTag, byName := map[string][]int{}, map[string][]int{}
		for _, f := range structFields(t.typ, nil) {
			if f.tag != "" {
				byTag[f.tag] = f.path
			} else {
				byName[normalizeName(f.name)] = f.path
			}
		}
		for c, name := range rel.names {
			if path, ok := byTag[name]; ok {
				p.fields[c] = path
			} else if path, ok := byName[normalizeName(name)]; ok {
				p.fields[c] = path
			}
		}
	}
	for _, k := range t.st.pk {
		found := false
		for c, name := range rel.names {
			if name == k {
				p.key = append(p.key, c)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("postgres: table %s: primary key column %q missing from the row", t.st.ident.Sanitize(), k)
		}
	}
	if rel.names != nil {
		t.plans[rel] = p
	}
	return p, nil
}

// encodeKey joins the primary key's text values. A single column is its
// text as is; a composite key escapes '\' and '/' and joins with '/', so
// that different keys never encode alike. NULL cannot occur in a key.
func encodeKey(p *rowPlan, vals []rawValue) (string, error) {
	if len(p.key) == 1 {
		c := p.key[0]
		if c >= len(vals) || vals[c].kind != 't' {
			return "", fmt.Errorf("primary key column %q missing from the tuple", p.rel.names[c])
		}
		return string(vals[c].data), nil
	}
	var b strings.Builder
	for i, c := range p.key {
		if c >= len(vals) || vals[c].kind != 't' {
			return "", fmt.Errorf("primary key column %q missing from the tuple", p.rel.names[c])
		}
		if i > 0 {
			b.WriteByte('/')
		}
		for _, ch := range vals[c].data {
			if ch == '\\' || ch == '/' {
				b.WriteByte('\\')
			}
			b.WriteByte(ch)
		}
	}
	return b.String(), nil
}

// fixedLength are types whose values are never TOASTed.
var fixedLength = map[uint32]bool{
	pgtype.BoolOID: true, pgtype.Int2OID: true, pgtype.Int4OID: true, pgtype.Int8OID: true,
	pgtype.Float4OID: true, pgtype.Float8OID: true, pgtype.DateOID: true, pgtype.TimeOID: true,
	pgtype.TimestampOID: true, pgtype.TimestamptzOID: true, pgtype.UUIDOID: true, pgtype.OIDOID: true,
}

// remember records the variable-length values of a row under its key.
func (t *Table[T]) remember(p *rowPlan, key string, vals []rawValue, mutate bool) {
	if !mutate {
		return
	}
	var vl []knownValue
	if !t.st.full { // FULL: 'u' is filled from the old row instead
		for c, v := range vals {
			if v.kind == 't' && !fixedLength[p.rel.oids[c]] {
				vl = append(vl, knownValue{p.rel.names[c], v.data})
			}
		}
	}
	t.st.knownMu.Lock()
	t.st.known[key] = vl
	t.st.knownMu.Unlock()
}

func (t *Table[T]) decode(p *rowPlan, vals []rawValue) (T, error) {
	var obj T
	m := t.maps.Get().(*pgtype.Map)
	defer t.maps.Put(m)
	if t.isMap {
		row := make(map[string]any, len(vals))
		for c, v := range vals {
			if c >= len(p.rel.names) {
				break
			}
			name := p.rel.names[c]
			if v.kind != 't' {
				row[name] = nil
				continue
			}
			oid := p.rel.oids[c]
			typ, ok := m.TypeForOID(oid)
			if !ok {
				row[name] = string(v.data)
				continue
			}
			val, err := typ.Codec.DecodeValue(m, oid, pgtype.TextFormatCode, v.data)
			if err != nil {
				return obj, fmt.Errorf("column %q: %w", name, err)
			}
			row[name] = val
		}
		return any(row).(T), nil
	}
	rv := reflect.ValueOf(&obj).Elem()
	for c, f := range p.fields {
		if f == nil || c >= len(vals) {
			continue
		}
		var src []byte
		if vals[c].kind == 't' {
			src = vals[c].data
		}
		if err := m.Scan(p.rel.oids[c], pgtype.TextFormatCode, src, rv.FieldByIndex(f).Addr().Interface()); err != nil {
			return obj, fmt.Errorf("column %q: %w", p.rel.names[c], err)
		}
	}
	return obj, nil
}

// Head returns pg_current_wal_lsn().
func (t *Table[T]) Head(ctx context.Context) (core.ResourceVersion, error) {
	return t.src.Head(ctx)
}

// List reads the table inside a snapshot that matches a position of the
// replication stream and returns that position. The first List of a
// Source reads inside the slot's own exported snapshot (RV = the slot's
// consistent point); a later one, once the stream runs, takes the snapshot
// of a short-lived temporary helper slot and uses its consistent point.
func (t *Table[T]) List(ctx context.Context, opts core.ListOptions[T]) (core.ResourceVersion, error) {
	s := t.src
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, errors.New("postgres: source closed")
	}
	s.frozen = true
	sess, resumable := s.sess, s.resumable
	s.mu.Unlock()
	if sess == nil && resumable {
		if err := s.resume(ctx); err != nil && !errors.Is(err, core.ErrExpired) {
			return 0, err
		}
		s.mu.Lock()
		sess = s.sess
		s.mu.Unlock()
	}
	if sess == nil {
		var err error
		sess, err = s.newSession(ctx)
		if err != nil {
			return 0, err
		}
		s.mu.Lock()
		s.sess = sess
		s.pos, s.lastTxn = sess.cp, sess.cp
		for _, st := range s.tables {
			st.expire()
		}
		s.notifyLocked()
		s.mu.Unlock()
	}
	if sess.snapTx != nil {
		s.mu.Lock()
		if !t.st.active {
			t.st.reset(sess.cp)
		}
		s.mu.Unlock()
		if err := t.read(ctx, sess.snapTx, sess.cp, opts); err != nil {
			return 0, err
		}
		sess.listed[t.st] = true
		if len(sess.listed) == len(s.tables) {
			// Every table has its snapshot: stream.
			if err := s.startStream(ctx, sess); err != nil {
				return 0, err
			}
		}
		return sess.cp, nil
	}
	s.mu.Lock()
	if !t.st.active {
		// From here on the stream keeps this table's transactions; the
		// helper's consistent point below is at or after s.pos.
		t.st.reset(s.pos)
	}
	s.mu.Unlock()
	return t.listWithHelper(ctx, opts)
}

func (t *Table[T]) listWithHelper(ctx context.Context, opts core.ListOptions[T]) (core.ResourceVersion, error) {
	s := t.src
	repl, err := s.connectRepl(ctx)
	if err != nil {
		return 0, err
	}
	defer repl.Close(context.Background())
	name := "dbinformer_list_" + randomHex(8)
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, name, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary: true, SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication,
	})
	if err != nil {
		return 0, s.wrap("create temporary slot for a snapshot", err)
	}
	cp, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, fmt.Errorf("postgres %s: slot consistent point %q: %w", s.where(), res.ConsistentPoint, err)
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err == nil {
		_, err = tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+res.SnapshotName+"'")
	}
	if err != nil {
		return 0, s.wrap("import a snapshot", err)
	}
	defer tx.Rollback(context.Background())
	rv := core.ResourceVersion(cp)
	if err := t.read(ctx, tx, rv, opts); err != nil {
		return 0, err
	}
	s.log.Debug("table listed in a helper slot's snapshot", "table", t.st.ident.Sanitize(), "rv", cp.String())
	return rv, nil
}

// read emits every row of the table as seen by tx.
func (t *Table[T]) read(ctx context.Context, tx pgx.Tx, rv core.ResourceVersion, opts core.ListOptions[T]) error {
	s := t.src
	if opts.Estimate != nil {
		var n float64
		if err := tx.QueryRow(ctx, "SELECT reltuples FROM pg_class WHERE oid = $1", t.st.oid).Scan(&n); err == nil && n >= 0 {
			opts.Estimate(int64(n))
		}
	}
	t.st.knownMu.Lock()
	t.st.known = map[string][]knownValue{}
	t.st.knownRV = rv
	t.st.knownMu.Unlock()
	// Text format on both paths: the walsender prints values as text, and
	// decoding the same text with the same pgtype.Map gives equal values.
	rr := tx.Conn().PgConn().ExecParams(ctx, "SELECT * FROM "+t.st.ident.Sanitize(), nil, nil, nil, nil)
	fds := rr.FieldDescriptions()
	rel := &relation{}
	for _, fd := range fds {
		rel.names = append(rel.names, fd.Name)
		rel.oids = append(rel.oids, fd.DataTypeOID)
	}
	p, err := t.plan(rel)
	if err != nil {
		rr.Close()
		return err
	}
	defer func() {
		t.mu.Lock()
		delete(t.plans, rel)
		t.mu.Unlock()
	}()
	var emitErr error
	for rr.NextRow() {
		// rr.Values is reused by the next row: copy the row into one buffer.
		raw := rr.Values()
		size := 0
		for _, v := range raw {
			size += len(v)
		}
		buf := make([]byte, 0, size)
		vals := make([]rawValue, len(raw))
		for i, v := range raw {
			if v == nil {
				vals[i] = rawValue{kind: 'n'}
			} else {
				buf = append(buf, v...)
				vals[i] = rawValue{kind: 't', data: buf[len(buf)-len(v) : len(buf) : len(buf)]}
			}
		}
		ev := core.Event[T]{Type: core.Added, RV: rv}
		key, err := encodeKey(p, vals)
		if err != nil {
			ev.Err = &core.DecodeError{Source: t.st.sourceName(), RV: rv, Err: err}
		} else {
			ev.Key = key
			t.remember(p, key, vals, true)
			obj, err := t.decode(p, vals)
			if err != nil {
				ev.Err = &core.DecodeError{Source: t.st.sourceName(), Key: key, RV: rv, Err: err}
			} else {
				ev.Object, ev.HasObject = obj, true
			}
		}
		if emitErr = opts.Emit(ev); emitErr != nil {
			break
		}
	}
	if _, err := rr.Close(); err != nil && emitErr == nil {
		return s.wrap("read table "+t.st.ident.Sanitize(), err)
	}
	return emitErr
}

// Watch delivers the table's changes after from. from must be a version
// this Source has kept the table's changes since: one returned by List, or
// one a previous watcher delivered. Anything older is ErrExpired.
func (t *Table[T]) Watch(ctx context.Context, from core.ResourceVersion) (core.Watcher[T], error) {
	s := t.src
	check := func() error {
		if s.closed {
			return errors.New("postgres: source closed")
		}
		if !t.st.active || from < t.st.floor {
			return fmt.Errorf("%s: version %d is older than what the replication slot %q still serves: %w", t.st.sourceName(), from, s.slot, core.ErrExpired)
		}
		return nil
	}
	s.mu.Lock()
	err := check()
	if err == nil {
		t.st.advance(from, s.history)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := s.ensureStreaming(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := check(); err != nil {
		return nil, err
	}
	if s.streamErr != nil {
		return nil, s.streamErr
	}
	return &watcher[T]{t: t, ctx: ctx, gen: s.gen, pos: from, acked: from, stop: make(chan struct{})}, nil
}

type watcher[T any] struct {
	t        *Table[T]
	ctx      context.Context // Watch's: ends the watch too
	gen      uint64
	pos      core.ResourceVersion // last version returned
	acked    core.ResourceVersion
	stopOnce sync.Once
	stop     chan struct{}
}

func (w *watcher[T]) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }

// RequestProgress asks the server for its WAL end; a Bookmark at least that
// far follows once nothing before it is pending.
func (w *watcher[T]) RequestProgress(ctx context.Context) error {
	w.t.src.requestProgress()
	return nil
}

var errStopped = errors.New("postgres: watch stopped")

// Next returns the next transaction of the table, or a Bookmark when the
// stream moved on without touching it. Calling Next again acknowledges the
// previous result as applied: only then may the server discard its WAL.
func (w *watcher[T]) Next(ctx context.Context) ([]core.Event[T], error) {
	s, st := w.t.src, w.t.st
	for {
		s.mu.Lock()
		if w.acked < w.pos && st.active {
			w.acked = w.pos
			st.advance(w.pos, s.history)
		}
		select {
		case <-w.stop:
			s.mu.Unlock()
			return nil, errStopped
		case <-w.ctx.Done():
			s.mu.Unlock()
			return nil, w.ctx.Err()
		default:
		}
		if !st.active || st.floor > w.pos {
			err := s.streamErr
			active, floor := st.active, st.floor
			s.mu.Unlock()
			switch {
			case active:
				err = fmt.Errorf("%s: version %d fell out of the changes kept in memory (from %d on; Config.History): %w", st.sourceName(), w.pos, floor, core.ErrExpired)
			case err == nil || !errors.Is(err, core.ErrExpired):
				err = fmt.Errorf("%s: the replication slot %q was lost or recreated: %w", st.sourceName(), s.slot, core.ErrExpired)
			}
			return nil, err
		}
		if s.gen != w.gen {
			err := s.streamErr
			s.mu.Unlock()
			if err == nil {
				err = errors.New("postgres: replication stream restarted")
			}
			return nil, err
		}
		var next *batch
		if i := st.firstAfter(w.pos); i < len(st.batches) {
			b := st.batches[i]
			next = &b
		}
		if next != nil {
			w.pos = next.rv
			s.mu.Unlock()
			return w.t.events(next), nil
		}
		if s.pos > w.pos {
			w.pos = s.pos
			s.mu.Unlock()
			return []core.Event[T]{{Type: core.Bookmark, RV: w.pos}}, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-w.stop:
			return nil, errStopped
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w.ctx.Done():
			return nil, w.ctx.Err()
		}
	}
}

// events turns one transaction into events, in order, keeping the table's
// known keys and TOAST values current.
func (t *Table[T]) events(b *batch) []core.Event[T] {
	var out []core.Event[T]
	src := t.st.sourceName()
	t.st.knownMu.Lock()
	mutate := b.rv > t.st.knownRV
	if mutate {
		t.st.knownRV = b.rv
	}
	t.st.knownMu.Unlock()
	fail := func(typ core.EventType, key string, err error) {
		out = append(out, core.Event[T]{Type: typ, Key: key, RV: b.rv, Err: &core.DecodeError{Source: src, Key: key, RV: b.rv, Err: err}})
	}
	for _, c := range b.changes {
		if c.kind == changeTruncate {
			t.st.knownMu.Lock()
			keys := make([]string, 0, len(t.st.known))
			for k := range t.st.known {
				keys = append(keys, k)
			}
			if mutate {
				t.st.known = map[string][]knownValue{}
			}
			t.st.knownMu.Unlock()
			sort.Strings(keys)
			for _, k := range keys {
				out = append(out, core.Event[T]{Type: core.Deleted, Key: k, RV: b.rv})
			}
			continue
		}
		if c.rel == nil {
			fail(core.Modified, "", errors.New("change before its Relation message"))
			continue
		}
		p, err := t.plan(c.rel)
		if err != nil {
			fail(core.Modified, "", err)
			continue
		}
		var oldKey string
		if c.old != nil {
			if oldKey, err = encodeKey(p, c.old); err != nil {
				fail(core.Deleted, "", err)
				continue
			}
		}
		switch c.kind {
		case changeDelete:
			ev := core.Event[T]{Type: core.Deleted, Key: oldKey, RV: b.rv}
			if c.oldKind == 'O' {
				if obj, err := t.decode(p, t.fillToast(p, oldKey, c.old, nil)); err == nil {
					ev.Object, ev.HasObject = obj, true
				}
			}
			if mutate {
				t.st.knownMu.Lock()
				delete(t.st.known, oldKey)
				t.st.knownMu.Unlock()
			}
			out = append(out, ev)
		case changeInsert, changeUpdate:
			typ := core.Added
			if c.kind == changeUpdate {
				typ = core.Modified
			}
			key, err := encodeKey(p, c.new)
			if err != nil {
				fail(typ, "", err)
				continue
			}
			prevKey := key
			if c.old != nil && oldKey != key {
				// Primary key changed: the old key is gone.
				prevKey = oldKey
				ev := core.Event[T]{Type: core.Deleted, Key: oldKey, RV: b.rv}
				if c.oldKind == 'O' {
					if obj, err := t.decode(p, t.fillToast(p, oldKey, c.old, nil)); err == nil {
						ev.Object, ev.HasObject = obj, true
					}
				}
				out = append(out, ev)
				typ = core.Added
			}
			vals := t.fillToast(p, prevKey, c.new, c.old)
			if prevKey != key && mutate {
				t.st.knownMu.Lock()
				delete(t.st.known, prevKey)
				t.st.knownMu.Unlock()
			}
			missing := ""
			for i, v := range vals {
				if v.kind == 'u' {
					missing = p.rel.names[i]
				}
			}
			if missing != "" {
				fail(typ, key, fmt.Errorf("unchanged TOASTed column %q has no known previous value", missing))
				continue
			}
			t.remember(p, key, vals, mutate)
			obj, err := t.decode(p, vals)
			if err != nil {
				fail(typ, key, err)
				continue
			}
			out = append(out, core.Event[T]{Type: typ, Key: key, Object: obj, HasObject: true, RV: b.rv})
		}
	}
	if len(out) == 0 {
		// A transaction that touched the table without a visible change
		// (e.g. TRUNCATE of an empty table) still moves the version.
		out = append(out, core.Event[T]{Type: core.Bookmark, RV: b.rv})
	}
	return out
}

// fillToast replaces unchanged TOASTed values ('u') with the old tuple's
// value (REPLICA IDENTITY FULL) or the last known value of key.
func (t *Table[T]) fillToast(p *rowPlan, key string, vals, old []rawValue) []rawValue {
	var out []rawValue
	for i, v := range vals {
		if v.kind != 'u' {
			continue
		}
		if out == nil {
			out = append([]rawValue(nil), vals...)
		}
		if i < len(old) && old[i].kind == 't' {
			out[i] = old[i]
			continue
		}
		t.st.knownMu.Lock()
		for _, kv := range t.st.known[key] {
			if kv.col == p.rel.names[i] {
				out[i] = rawValue{kind: 't', data: kv.data}
				break
			}
		}
		t.st.knownMu.Unlock()
	}
	if out == nil {
		return vals
	}
	return out
}
