package pginformer

import (
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/dbinformer/dbinformer/core"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// tableState is the per-table part of a Source: what the stream feeds and
// the Table's watches read. Fields under "guarded by src.mu" are only
// touched with the Source's mu held.
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

	// guarded by src.mu
	active  bool                 // listed in the current slot's lifetime
	floor   core.ResourceVersion // oldest version a Watch may start from
	applied core.ResourceVersion // acknowledged by a consumer
	decoded core.ResourceVersion // the known keys and values reflect every batch up to here
	// covered: a snapshot read the table at this version, so the stream's
	// transactions at or below it are already in the table's state. Not
	// applied: a consumer's acknowledgement (a Watch starting from a
	// helper List's version, ahead of the stream) says nothing of what
	// other watches still need from the stream.
	covered core.ResourceVersion
	// ackedChanges counts the changes of batches at or below applied.
	ackedChanges int
	batches      []*batch // streamed: unacknowledged ones, and some history before them

	// gated: a checkpointing informer watches the table; the slot's
	// confirmed position stays at or below durable, its last durable
	// checkpoint (restore.go).
	gated   bool
	durable core.ResourceVersion

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
}

func newTableState(schema, name string) *tableState {
	return &tableState{schema: schema, name: name, ident: pgx.Identifier{schema, name}, floor: math.MaxUint64}
}

func (t *tableState) sourceName() string {
	return "postgres table " + t.ident.Sanitize()
}

// expire forgets the stream: the table must list again.
func (t *tableState) expire() {
	t.active = false
	t.floor = math.MaxUint64
	t.batches = nil
	t.ackedChanges = 0
}

// reset starts the table over at rv: listed there, nothing streamed yet.
func (t *tableState) reset(rv core.ResourceVersion) {
	t.active, t.floor, t.applied, t.decoded, t.covered, t.batches, t.ackedChanges = true, rv, rv, rv, rv, nil, 0
}

// firstAfter is the index of the first batch above rv (batches are in
// version order).
func (t *tableState) firstAfter(rv core.ResourceVersion) int {
	return sort.Search(len(t.batches), func(i int) bool { return t.batches[i].rv > rv })
}

// advance records that a consumer applied everything up to rv, and drops
// acknowledged, decoded batches beyond the history kept for watches that
// start from an older version, raising floor past what it drops.
func (t *tableState) advance(rv core.ResourceVersion, history int) {
	if rv <= t.applied {
		return
	}
	i, j := t.firstAfter(t.applied), t.firstAfter(rv)
	for k := i; k < j; k++ {
		t.ackedChanges += t.batches[k].size
	}
	t.applied = rv
	drop := 0
	for drop < j && t.ackedChanges > history && t.batches[drop].rv <= t.decoded {
		t.ackedChanges -= t.batches[drop].size
		t.floor = max(t.floor, t.batches[drop].rv)
		t.batches[drop] = nil // release its rows
		drop++
	}
	// The array's dropped front is freed when append next reallocates.
	t.batches = t.batches[drop:]
}

// pending is the oldest batch no consumer has acknowledged.
func (t *tableState) pending() *batch {
	if i := t.firstAfter(t.applied); i < len(t.batches) {
		return t.batches[i]
	}
	return nil
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

// ackLocked is the position every table has applied: the stream position,
// held back by the oldest batch some table has not acknowledged yet. The
// server may discard WAL up to it.
func (s *Source) ackLocked() core.ResourceVersion {
	ack := s.pos
	for _, t := range s.tables {
		if b := t.pending(); b != nil && b.commitLSN < ack {
			ack = b.commitLSN
		}
		if t.gated && t.durable < ack {
			ack = t.durable
		}
	}
	return ack
}
