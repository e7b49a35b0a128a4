package pginformer

import (
	"context"
	"fmt"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// The guard: while the stream runs, the Source looks at the catalog every
// schemaCheckEvery (and at once when a watch asks for progress, or the
// stream met a Relation message that differs from what a Table proved)
// for what pgoutput does not say: a table dropped, or out of the
// publication, sends nothing at all, and a rewrite (ALTER COLUMN ... TYPE)
// streams no rows. A check that finds every table as its Table proved it
// vouches for the WAL position the previous check read before it looked:
// a transaction committed before that position is visible to this later
// check even if it was still finishing its commit when the position was
// read. A watch's Bookmark never passes the vouched position, so WaitFor
// never succeeds for a version at which a table had stopped being
// streamed unnoticed.

// schemaCheckEvery is how often the guard looks while nothing asks it to.
const schemaCheckEvery = 2 * time.Second

// guardQueryTimeout bounds one check's statements.
const guardQueryTimeout = 5 * time.Second

// guard runs the checks until ctx ends (the stream's end).
func (s *Source) guard(ctx context.Context) {
	timer := time.NewTimer(schemaCheckEvery)
	defer timer.Stop()
	var prevAt core.ResourceVersion
	var prevSeq uint64
	have := false // prevAt is from a check that found every table as proven
	for {
		seq := s.fan.verifyAskedSoFar()
		at, err := s.checkSchemas(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// A dead server is the stream's to report; look again later.
			s.log.Debug("catalog check", "err", err)
			have = false
		} else {
			if have {
				s.fan.vouch(prevAt, prevSeq)
			}
			prevAt, prevSeq, have = at, seq, true
			if s.fan.wantsVouch(seq) {
				continue // a request waits for the next check to vouch for this one
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(schemaCheckEvery)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.fan.guardWake:
		}
	}
}

// wantsVouch reports whether a check made after request seq waits to be
// vouched for: a watch asked, or nothing was vouched for yet.
func (f *fanout) wantsVouch(seq uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.verified == 0 || f.verifyDone < seq
}

// catalogTable is one registered table as the catalog shows it now.
type catalogTable struct {
	exists, published bool
	sameName          *uint32 // the oid of a table under the registered name (a re-created one)
	names             []string
	oids              []uint32
	mods              []int32
	notNull           []bool
	typnames          []string
}

// checkSchemas reads pg_current_wal_lsn(), then the tables, and settles
// every difference from what their Tables proved. It returns the
// position read first.
func (s *Source) checkSchemas(ctx context.Context) (core.ResourceVersion, error) {
	s.mu.Lock()
	tables := s.tables
	s.mu.Unlock()
	conn, err := s.connect(ctx)
	if err != nil {
		return 0, err
	}
	// A statement cancelled at the stream's end would leave an ERROR line
	// in the server's log at every Close: let it finish (it is short).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), guardQueryTimeout)
	defer cancel()
	defer s.release(conn)
	var at pglogrepl.LSN
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&at); err != nil {
		return 0, err
	}
	oids, nsps, rels := make([]uint32, len(tables)), make([]string, len(tables)), make([]string, len(tables))
	for i, st := range tables {
		oids[i], nsps[i], rels[i] = st.oid, st.schema, st.name
	}
	// A second statement, so a second snapshot: taken after at was read.
	rows, _ := conn.Query(ctx, `SELECT o.oid, c.oid IS NOT NULL,
			c.oid IS NOT NULL AND EXISTS (SELECT 1 FROM pg_publication_tables pt WHERE pt.pubname = $1 AND pt.schemaname = n.nspname AND pt.tablename = c.relname),
			(SELECT c2.oid FROM pg_class c2 JOIN pg_namespace n2 ON n2.oid = c2.relnamespace WHERE n2.nspname = o.nsp AND c2.relname = o.rel),
			ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = o.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' ORDER BY a.attnum),
			ARRAY(SELECT a.atttypid FROM pg_attribute a WHERE a.attrelid = o.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' ORDER BY a.attnum),
			ARRAY(SELECT a.atttypmod FROM pg_attribute a WHERE a.attrelid = o.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' ORDER BY a.attnum),
			ARRAY(SELECT a.attnotnull FROM pg_attribute a WHERE a.attrelid = o.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' ORDER BY a.attnum),
			ARRAY(SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a WHERE a.attrelid = o.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' ORDER BY a.attnum)
		FROM unnest($2::oid[], $3::text[], $4::text[]) AS o(oid, nsp, rel)
		LEFT JOIN pg_class c ON c.oid = o.oid LEFT JOIN pg_namespace n ON n.oid = c.relnamespace`, s.pub, oids, nsps, rels)
	found := map[uint32]*catalogTable{}
	var oid uint32
	var ct catalogTable
	_, err = pgx.ForEachRow(rows, []any{&oid, &ct.exists, &ct.published, &ct.sameName, &ct.names, &ct.oids, &ct.mods, &ct.notNull, &ct.typnames}, func() error {
		c := ct
		found[oid] = &c
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, st := range tables {
		shape, active, h := s.fan.schemaState(&st.feed)
		if !active || shape == nil || h != nil && h.err != nil {
			continue
		}
		ct := found[st.oid]
		if ct == nil {
			continue
		}
		ch := s.catalogChange(st, shape, ct)
		if ch == nil && h != nil {
			// The stream met a layout the catalog no longer shows (a
			// rename or retype undone since): changes were streamed in
			// it all the same.
			ch = h.change
		}
		if ch != nil {
			if err := s.settle(ctx, conn, st, shape, ch, h); err != nil {
				return 0, err
			}
		}
	}
	return core.ResourceVersion(at), nil
}

// catalogChange compares the catalog's view of st's table with its proven
// shape.
func (s *Source) catalogChange(st *tableState, shape *tableShape, ct *catalogTable) *shapeChange {
	ident, pub := st.ident.Sanitize(), pgx.Identifier{s.pub}.Sanitize()
	switch {
	case !ct.exists:
		fix := "a table created again under the name needs a new Source and Table (restart the application)"
		if ct.sameName != nil {
			fix = fmt.Sprintf("a table of that name exists again (oid %d, was %d): it needs a new Source and Table (restart the application)", *ct.sameName, st.oid)
		}
		return &shapeChange{change: "was dropped", fix: fix}
	case !ct.published:
		return &shapeChange{change: fmt.Sprintf("left publication %q (ALTER PUBLICATION ... DROP TABLE, or a DROP ... CASCADE)", s.pub), fix: fmt.Sprintf("its changes are no longer streamed: add it back (ALTER PUBLICATION %s ADD TABLE %s) and restart the informer", pub, ident)}
	}
	cols := make([]column, len(ct.names))
	for i := range cols {
		cols[i] = column{name: ct.names[i], oid: ct.oids[i], typmod: ct.mods[i], notNull: ct.notNull[i], typname: ct.typnames[i]}
	}
	return shape.diffColumns(cols)
}

// settle decides what st's watches do about ch (h: what the stream met,
// if anything), tells them, and records it.
func (s *Source) settle(ctx context.Context, conn *pgx.Conn, st *tableState, shapeNow *tableShape, ch *shapeChange, h *halt) error {
	e := &SchemaChangeError{Table: st.ident.Sanitize(), Column: ch.column, Change: ch.change, Action: SchemaFail, Fix: ch.fix}
	e.RV = s.fan.vouched()
	if h != nil {
		e.RV = h.at
	}
	var shape *tableShape
	if ch.proof {
		cols, err := columns(ctx, conn, st.oid)
		if err != nil {
			return err
		}
		if err := st.reprove(ctx, conn, cols); err != nil {
			e.Fix = fmt.Sprintf("the mapping no longer holds (%v)", err)
		} else {
			e.Action = SchemaRelist
			if st.policy != nil {
				e.Action = st.policy(e)
			}
			if e.Action == SchemaRelist {
				e.Fix = ""
				shape = shapeOf(st, cols, shapeNow.omit)
			} else {
				e.Fix = "the table's policy (TableOptions.OnSchemaChange) stops the informer: restart it to list the table again"
			}
		}
	}
	if shape != nil {
		s.fan.setShape(&st.feed, shape)
	}
	st.feed.note(e) // before the watches see it
	s.logSchemaChange(e)
	s.fan.decide(&st.feed, e)
	return nil
}

// logSchemaChange says what changed and what was done.
func (s *Source) logSchemaChange(e *SchemaChangeError) {
	s.log.Warn("table schema changed", "table", e.Table, "column", e.Column, "change", e.Change, "action", e.Action.String(), "rv", lsn(e.RV))
}

// vouched is the position the guard last vouched for.
func (f *fanout) vouched() core.ResourceVersion {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.verified
}
