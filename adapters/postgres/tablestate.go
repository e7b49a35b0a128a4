package pginformer

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// tableState is the per-table part of a Source: what NewTable learnt of
// the table, its part of the fan-out, and the state parked between
// watches.
type tableState struct {
	schema, name string
	ident        pgx.Identifier
	oid          uint32
	pk           []string
	full         bool // REPLICA IDENTITY FULL
	partitioned  bool
	// filtered: the Table has a TableOptions.Where; rowFilter is what of
	// it the publication may evaluate (SQL, "" for nothing). See filter.go.
	filtered  bool
	rowFilter string
	// cols are the columns the Table decodes (mapped, and the key), in
	// table order; pubCols every column pgoutput can send (the table's
	// columns less generated ones) when NewTable read the catalog. See
	// columnList in filter.go.
	cols, pubCols []string
	anyColumn     bool // a map[string]any Table: it decodes columns added later too

	// reprove proves the Table's mapping again over the table's columns
	// as they are now (after a schema change); policy is
	// TableOptions.OnSchemaChange.
	reprove func(ctx context.Context, conn *pgx.Conn, cols []column) error
	policy  SchemaPolicy

	// feed is the table's part of the Source's fan-out (fanout.go),
	// guarded by the fan-out's lock.
	feed feed

	// The state parked between watches (see core's contract): the values
	// that can come back as unchanged TOASTed ('u', see toast.go) as of
	// decoded, per column name and key (a map per column: no per-row
	// allocation), so that such a value is filled in. No key set is kept: a
	// TRUNCATE ends the watch for a new List (batch.truncated), which
	// costs less than a set of every key in memory and on every change.
	// Guarded by knownMu, taken before src.mu when both are needed.
	knownMu   sync.Mutex
	vals      map[string]map[string][]byte
	toastCols map[string]uint8 // per column name: toastAlways, toastNever, toastIfLong
	toastGen  uint64           // bumped when toastCols changes
	// filled: a watch whose consumer fills unchanged TOASTed values from
	// its cache (driver.WatchOptions.Fills) has run, so vals are not kept;
	// plain: a watch whose consumer does not has run, so they are kept
	// again (both stay set: see watchFills).
	filled, plain bool
}

func newTableState(schema, name string) *tableState {
	st := &tableState{schema: schema, name: name, ident: pgx.Identifier{schema, name}}
	st.feed.init(st.sourceName(), st.ident.Sanitize())
	return st
}

func (t *tableState) sourceName() string {
	return "postgres table " + t.ident.Sanitize()
}

// register adds a checked table to the Source, with the derived types
// (enums, their arrays) its columns use.
func (s *Source) register(st *tableState, types []*pgtype.Type) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.frozen {
		return fmt.Errorf("pginformer: table %s registered after the source's first List; register every table first", st.ident.Sanitize())
	}
	s.types = append(s.types, types...)
	s.tables = append(s.tables, st)
	s.fan.add(&st.feed)
	s.byOID[st.oid] = append(s.byOID[st.oid], st)
	return nil
}

// typeMap returns a pgtype.Map that knows every derived type registered.
func (s *Source) typeMap() *pgtype.Map {
	m := pgtype.NewMap()
	s.mu.Lock()
	types := s.types
	s.mu.Unlock()
	m.RegisterTypes(types)
	return m
}
