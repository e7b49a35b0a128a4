package pginformer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"unsafe"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Parallel snapshot readers. A List reads its table through connections
// that each imported the same exported snapshot (SET TRANSACTION SNAPSHOT),
// so every row they see is at the one version the List returns. A large
// table is split into ranges of blocks (ctid ranges: no index needed,
// Postgres 14+ scans only the range), which the readers take in turn.
// Options.SnapshotReaders bounds the connections of every List of the
// Source together; a List always has its first reader and takes more only
// while slots are free, at its start and each time its first reader
// takes another range.

// rangeBlocks is the fewest 8 kB blocks (8 MB) worth a range of its own
// (a variable for tests). Ranges are many more than readers (up to four
// per reader slot) so that readers share a table evenly and a List can
// take up slots that free up while it reads.
var rangeBlocks int64 = 1024

// testHookReaders, when set (by tests), is told how many readers a List
// used and how many ranges it read.
var testHookReaders func(table string, readers, ranges int)

// readKind says what a snapshot read is for.
type readKind uint8

const (
	// readList: a List of a table whose known keys and values the stream
	// keeps.
	readList readKind = iota
	// readFresh: a List of a table with no state: it parks the table's
	// known keys and values at the snapshot's version.
	readFresh
	// readAudit: an audit (AuditList). It leaves the table's state alone
	// (no known keys, no TOAST columns, no Skipped count, no
	// SyncProgress), reads through its first reader only, asks for no
	// TOAST flags, and emits a row that does not decode as an event with
	// Err (driver.AuditLister) instead of failing.
	readAudit
)

// read emits every row of the table as seen by the snapshot of r (see
// readKind).
func (t *Table[T]) read(ctx context.Context, r *snapReaders, rv core.ResourceVersion, how readKind, sink driver.ListSink[T]) error {
	s, st := t.src, t.st
	fresh, audit := how == readFresh, how == readAudit
	ident := st.ident.Sanitize()
	tx := r.first.tx
	// The columns as of the snapshot, less those left out.
	cols, err := snapColumns(ctx, tx, st.oid)
	if err != nil {
		return s.wrap("read columns of "+ident, err)
	}
	if len(cols) == 0 {
		return driver.Permanent(fmt.Errorf("postgres %s: table %s was dropped: its relation (oid %d) is gone; a table created again under the name needs a new Table", s.where(), ident, st.oid))
	}
	version, reltuples, blocks, err := t.snapSize(ctx, tx)
	if err != nil {
		return err
	}
	var used []snapColumn
	kinds := map[string]uint8{}
	for _, c := range cols {
		kinds[c.name] = toastKind(c.oid, c.attlen, c.storage)
		if !t.m.omit[c.name] {
			used = append(used, c)
		}
	}
	l, p, err := t.layout(used, version, !audit)
	if err != nil {
		return fmt.Errorf("%s: %w", st.sourceName(), err)
	}
	defer t.m.forget(p.rel)
	if !audit {
		st.knownMu.Lock()
		if fresh {
			st.resetKnown()
		}
		st.setToastCols(kinds)
		st.knownMu.Unlock()
	}

	queries, reltuples := t.readQueries(ctx, tx, l, version, reltuples, blocks, audit, sink)

	lr := &listRead[T]{t: t, l: l, p: p, rv: rv, fresh: fresh, audit: audit, sink: sink}
	if fn := s.opts.SyncProgress; fn != nil && !audit {
		est := int64(-1)
		if reltuples >= 0 {
			est = int64(reltuples)
		}
		lr.progress = newSyncProgress(fn, ident, est)
		defer lr.progress.done()
	}
	readers := lr.readAll(ctx, r, queries)
	if testHookReaders != nil {
		testHookReaders(st.name, readers, len(queries))
	}
	return t.readDone(lr, rv, audit)
}

// snapSize reads, in the snapshot of tx, the server's version (which
// decides how the statement asks about TOAST and whether block ranges
// work) and the table's estimated rows and size in blocks (how many
// ranges to read it in, and the progress estimate).
func (t *Table[T]) snapSize(ctx context.Context, tx pgx.Tx) (version int, reltuples float64, blocks int64, err error) {
	if err := tx.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, c.reltuples,
			pg_relation_size(c.oid) / current_setting('block_size')::int
		FROM pg_class c WHERE c.oid = $1`, t.st.oid).Scan(&version, &reltuples, &blocks); err != nil {
		return 0, 0, 0, t.src.wrap("read the size of "+t.st.ident.Sanitize(), err)
	}
	return version, reltuples, blocks, nil
}

// readQueries builds the statements a read runs: the select list of l,
// narrowed by a partial sync's pushed-down conditions, split in block
// ranges when the table is large enough for several readers to pay. It
// reports the estimate to sink and returns it (reltuples, or the planner's
// estimate of the rows a condition keeps) for the progress count.
func (t *Table[T]) readQueries(ctx context.Context, tx pgx.Tx, l *copyLayout, version int, reltuples float64, blocks int64, audit bool, sink driver.ListSink[T]) ([]string, float64) {
	s, st, ident := t.src, t.st, t.st.ident.Sanitize()
	// Ranges of blocks (blockRanges).
	sel := "SELECT " + joinComma(l.exprs) + " FROM " + ident
	// A partial sync's pushed-down conditions (TableOptions.Where) narrow
	// every range; what Postgres cannot evaluate exactly is checked on
	// each decoded row by List's filter.
	where := t.filter.snapshotWhere()
	if where != "" {
		sel += " WHERE (" + where + ")"
	}
	if where != "" {
		// The planner's estimate of the rows the condition keeps: a
		// selective one reads through an index in one query (block ranges
		// would each scan their blocks whole), and progress counts
		// towards what is kept, not the whole table.
		if est, ok := s.planRows(ctx, tx, sel); ok {
			reltuples = est
		}
	}
	if sink.Estimate != nil && reltuples >= 0 {
		sink.Estimate(int64(reltuples))
	}
	n := 1
	if !audit && !st.partitioned && version >= 140000 && blocks >= 2*rangeBlocks && (where == "" || reltuples*4 >= float64(blocks)*rowsPerBlockFloor) {
		n = int(min(blocks/rangeBlocks, int64(4*cap(s.readers))))
	}
	queries := blockRanges(sel, where != "", blocks, n)
	return queries, reltuples
}

// readDone turns the end of a read (lr) into read's result: the error that
// stopped it, or, when rows did not decode, the List's failure
// (driver.ErrPermanent) or, with SkipUndecodable, a warning.
func (t *Table[T]) readDone(lr *listRead[T], rv core.ResourceVersion, audit bool) error {
	s, st, ident := t.src, t.st, t.st.ident.Sanitize()
	if lr.err != nil {
		var pgErr *pgconn.PgError
		switch {
		case lr.emitErr:
			return lr.err
		case errors.As(lr.err, &pgErr) && pgErr.Code == "42P01": // undefined_table
			return driver.Permanent(s.wrap("read table "+ident, lr.err))
		}
		return s.wrap("read table "+ident, lr.err)
	}
	if audit {
		return nil // its rows that did not decode were emitted with Err
	}
	if !t.opts.SkipUndecodable {
		return lr.bad.err(fmt.Sprintf("%s: of the rows listed at %s", st.sourceName(), lsn(rv)))
	}
	if lr.bad.n > 0 {
		s.log.Warn("rows left out of the cache: they do not decode", "table", ident, "rows", lr.bad.n, "first", lr.bad.first[0])
	}
	return nil
}

// snapColumns reads the table's columns (oid) as the snapshot of tx sees
// them, generated ones left out.
func snapColumns(ctx context.Context, tx pgx.Tx, oid uint32) ([]snapColumn, error) {
	rows, _ := tx.Query(ctx, `SELECT attname, atttypid, attlen, attstorage FROM pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum`, oid)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (snapColumn, error) {
		var c snapColumn
		var storage string
		err := row.Scan(&c.name, &c.oid, &c.attlen, &storage)
		if len(storage) > 0 {
			c.storage = storage[0]
		}
		return c, err
	})
}

// blockRanges splits the statement sel over a table of blocks blocks into
// n ranges of ctid (one statement, sel itself, when n ≤ 1); filtered says
// sel has a WHERE clause already. The last range is open-ended: rows of
// blocks past the size read are not in the snapshot, but need no proof of
// it.
func blockRanges(sel string, filtered bool, blocks int64, n int) []string {
	if n <= 1 {
		return []string{sel}
	}
	queries := make([]string, 0, n)
	step := (blocks + int64(n) - 1) / int64(n)
	for i := range n {
		lo, hi := int64(i)*step, int64(i+1)*step
		q := sel + " WHERE ctid >= '(" + strconv.FormatInt(lo, 10) + ",0)'::tid"
		if filtered {
			q = sel + " AND ctid >= '(" + strconv.FormatInt(lo, 10) + ",0)'::tid"
		}
		if i < n-1 {
			q += " AND ctid < '(" + strconv.FormatInt(hi, 10) + ",0)'::tid"
		}
		queries = append(queries, q)
	}
	return queries
}

// readAll reads queries through r's readers and returns how many read.
// The first reader adds readers while ranges wait unread and reader slots
// are free, before each range it takes: at the start, and again later, so
// that a List that began while other Lists held the slots (a Source
// syncing several tables) takes them up as those finish. The first error
// ends every reader (lr.err says it).
func (lr *listRead[T]) readAll(ctx context.Context, r *snapReaders, queries []string) (readers int) {
	s := lr.t.src
	work := make(chan string, len(queries))
	for _, q := range queries {
		work <- q
	}
	close(work)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// copyOne reads one range through rd; false ends that reader.
	copyOne := func(rd *snapReader, q string) bool {
		if err := lr.copy(rctx, rd, q); err != nil {
			lr.fail(err)
			cancel()
			return false
		}
		return true
	}
	var wg sync.WaitGroup
	readers = 1
	for q := range work {
		for len(work) > 0 {
			rd := r.more(rctx)
			if rd == nil {
				break
			}
			readers++
			wg.Go(func() {
				defer rd.close(s)
				for q := range work {
					if !copyOne(rd, q) {
						return
					}
				}
			})
		}
		if !copyOne(r.first, q) {
			break
		}
	}
	wg.Wait()
	return readers
}

func joinComma(ss []string) string {
	n := 0
	for _, s := range ss {
		n += len(s) + 2
	}
	b := make([]byte, 0, n)
	for i, s := range ss {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, s...)
	}
	return string(b)
}

// listRead is one List's state shared by its readers.
type listRead[T any] struct {
	t     *Table[T]
	l     *copyLayout
	p     *rowPlan
	rv    core.ResourceVersion
	fresh bool
	audit bool
	sink  driver.ListSink[T]

	mu       sync.Mutex // serialises Emit and guards what follows
	bad      undecodable
	err      error
	emitErr  bool // err came from the sink: return it as is
	progress *syncProgress
}

func (lr *listRead[T]) fail(err error) {
	lr.mu.Lock()
	if lr.err == nil {
		lr.err = err
	}
	lr.mu.Unlock()
}

// errEmitted marks a sink's error passed through a COPY.
type errEmitted struct{ err error }

func (e errEmitted) Error() string { return e.err.Error() }

// copy reads the rows of one statement through rd.
func (lr *listRead[T]) copy(ctx context.Context, rd *snapReader, query string) error {
	t, st, l := lr.t, lr.t.st, lr.l
	sp := t.m.compile(lr.p, l.formats, t.src.typeMap())
	isMap := t.m.typ == nil
	ncols := len(l.rel.Names)
	var vl []knownValue
	cp := &copyParser{ncols: len(l.exprs)}
	// One event per reader, decoded into and emitted by value row after
	// row: the decoders take its object's address, which would put a new
	// event on the heap for every row.
	ev := new(driver.Event[T])
	cp.row = func(fields [][]byte) error {
		*ev = driver.Event[T]{Type: driver.Added, RV: lr.rv}
		key, err := l.key(fields)
		if err == nil {
			ev.Key = key
			var row map[string]any
			obj := unsafe.Pointer(&ev.Object)
			if isMap {
				row = make(map[string]any, ncols)
				*(*map[string]any)(obj) = row
			}
			err = sp.DecodeFields(obj, row, fields[:ncols])
			if err == nil && lr.fresh {
				vl = vl[:0] // rememberListed keeps the values, not the slice
				if l.anyFlag(fields) {
					for c := range ncols {
						if l.mayBeExternal(fields, c) {
							vl = append(vl, knownValue{l.rel.Names[c], sp.KeepText(obj, row, c, fields[c], l.stripVer[c])})
						}
					}
				}
				st.knownMu.Lock()
				st.rememberListed(key, vl)
				st.knownMu.Unlock()
			}
		}
		lr.mu.Lock()
		defer lr.mu.Unlock()
		if lr.err != nil {
			return lr.err
		}
		if err != nil {
			de := &driver.DecodeError{Source: st.sourceName(), Key: key, RV: lr.rv, Err: err}
			lr.bad.add(de)
			switch {
			case lr.audit:
			case !t.opts.SkipUndecodable:
				return nil
			default:
				t.skipped.Add(1)
			}
			ev.Err, ev.Object, ev.HasObject = de, *new(T), false
		} else {
			ev.HasObject = true
		}
		if err := lr.sink.Emit(*ev); err != nil {
			lr.err, lr.emitErr = err, true
			return errEmitted{err}
		}
		lr.progress.add(1)
		return nil
	}
	_, err := rd.conn.PgConn().CopyTo(ctx, cp, "COPY ("+query+") TO STDOUT (FORMAT binary)")
	var emitted errEmitted
	if errors.As(err, &emitted) {
		return emitted.err
	}
	if err == nil && !cp.done {
		err = fmt.Errorf("%w: it ended before its trailer", errCopyFormat)
	}
	return err
}

// rowsPerBlockFloor: a condition expected to keep fewer rows than a
// quarter of this many per block of the table is read in one query.
const rowsPerBlockFloor = 20

// planRows asks the planner how many rows query returns; ok is false when
// it cannot say (the List goes on without the estimate).
func (s *Source) planRows(ctx context.Context, tx pgx.Tx, query string) (rows float64, ok bool) {
	var out []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+query).Scan(&out); err != nil {
		s.log.Debug("no row estimate for a filtered List", "err", err)
		return 0, false
	}
	var plan []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		}
	}
	if err := json.Unmarshal(out, &plan); err != nil || len(plan) == 0 {
		return 0, false
	}
	return plan[0].Plan.Rows, true
}
