package pginformer

import (
	"fmt"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// Schema changes under a running Table. NewTable proves the mapping of T
// onto the table's columns as they are; afterwards each Relation message of
// the stream, and the Source's catalog check (guard.go), compare the table
// with what was proven. What they find, and what is done about it, is a
// *SchemaChangeError.

// SchemaAction is what a Table does about a schema change that leaves its
// mapping proven.
type SchemaAction int

const (
	// SchemaRelist ends the table's watch with driver.ErrExpired: the
	// informer lists the table again and hands its handlers only the
	// differences (a rewrite may have changed any value).
	SchemaRelist SchemaAction = iota
	// SchemaFail ends the table's watch with driver.ErrPermanent: the
	// informer stops, its cache frozen at the last version before the
	// change.
	SchemaFail
)

func (a SchemaAction) String() string {
	if a == SchemaFail {
		return "the table's watch failed"
	}
	return "the table is listed again"
}

// SchemaPolicy decides what a Table does about a schema change after which
// T still holds every value of the table: a mapped column's type, width or
// nullability changed and NewTable's proof holds again (or, for a
// map[string]any Table, columns were added, dropped or changed). It is not
// asked about changes that break the mapping (a mapped column dropped or
// renamed, a type T cannot hold, the table dropped or out of the
// publication): those always fail the watch.
type SchemaPolicy func(*SchemaChangeError) SchemaAction

// FailOnSchemaChange is a SchemaPolicy that stops the informer at every
// schema change, for applications that must restart on one.
func FailOnSchemaChange(*SchemaChangeError) SchemaAction { return SchemaFail }

// SchemaChangeError reports a change of a synced table's schema and what
// was done about it. It matches driver.ErrExpired when the table is listed
// again (Action SchemaRelist), driver.ErrPermanent when its watch failed.
// Table.LastSchemaChange returns the last one.
type SchemaChangeError struct {
	// Table is the table's quoted name, schema included.
	Table string
	// Column names the column that changed; "" for the whole table.
	Column string
	// Change says what changed: "dropped or renamed", "type changed from
	// integer to bigint", "dropped", "left publication \"p\""...
	Change string
	// RV is the stream position at or before which the change was met:
	// the watch delivered everything below it.
	RV core.ResourceVersion
	// Action is what was done.
	Action SchemaAction
	// Fix says what to do, when the watch failed.
	Fix string
}

func (e *SchemaChangeError) Error() string {
	what := "postgres table " + e.Table
	if e.Column != "" {
		what += fmt.Sprintf(": column %q", e.Column)
	}
	msg := fmt.Sprintf("%s %s (met at %s): %s", what, e.Change, lsn(e.RV), e.Action)
	if e.Fix != "" {
		msg += "; " + e.Fix
	}
	return msg
}

// SchemaAction implements driver.SchemaChange: "relist" or "fail", for
// SyncStatus, the status page and metrics.
func (e *SchemaChangeError) SchemaAction() string {
	if e.Action == SchemaRelist {
		return "relist"
	}
	return "fail"
}

var _ driver.SchemaChange = (*SchemaChangeError)(nil)

// Unwrap makes the error match what the informer does about it.
func (e *SchemaChangeError) Unwrap() error {
	if e.Action == SchemaRelist {
		return driver.ErrExpired
	}
	return driver.ErrPermanent
}

// shapeColumn is one column as NewTable proved it.
type shapeColumn struct {
	name    string
	oid     uint32
	typmod  int32
	notNull bool
	typname string // format_type, for messages
}

// tableShape is what NewTable proved of a table: its relation id and the
// columns the Table decodes (the key among them), in table order. all: a
// map[string]any Table, which decodes every column, added ones too.
type tableShape struct {
	oid  uint32
	cols []shapeColumn
	all  bool
	omit map[string]bool // TableOptions.Omit: never part of the shape
}

// shapeOf is the shape of the columns of cols the Table decodes.
func shapeOf(st *tableState, cols []column, omit map[string]bool) *tableShape {
	sh := &tableShape{oid: st.oid, all: st.anyColumn, omit: omit}
	for _, c := range cols {
		if c.generated || omit[c.name] || !sh.all && !containsString(st.cols, c.name) {
			continue
		}
		sh.cols = append(sh.cols, shapeColumn{name: c.name, oid: c.oid, typmod: c.typmod, notNull: c.notNull, typname: c.typname})
	}
	return sh
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// fingerprint names the shape in a checkpoint (Table.Codec): a warm start
// over a table of another shape must not restore its cache.
func (sh *tableShape) fingerprint() string {
	out := fmt.Sprintf("pg relation %d", sh.oid)
	for _, c := range sh.cols {
		out += fmt.Sprintf(" %q:%d:%d", c.name, c.oid, c.typmod)
	}
	return out
}

// shapeChange is a difference between a proven shape and the table as
// seen now. proof: the mapping may still hold and must be proven again
// (a type, width or nullability changed, or a map Table's columns moved);
// otherwise it is broken.
type shapeChange struct {
	column, change, fix string
	proof               bool
}

// diffRelation compares a Relation message's layout with the shape.
func (sh *tableShape) diffRelation(rel *wal.Relation) *shapeChange {
	at := map[string]int{}
	for i, n := range rel.Names {
		at[n] = i
	}
	for _, c := range sh.cols {
		i, ok := at[c.name]
		switch {
		case !ok && sh.all:
			return &shapeChange{column: c.name, change: "dropped or renamed", proof: true}
		case !ok:
			return &shapeChange{column: c.name, change: "dropped or renamed", fix: "the field mapped to it would be zero in every change from here on: map the new column (a struct field tagged with its name) or leave the field out (`db:\"-\"`), and start a new Source and Table"}
		case rel.OIDs[i] != c.oid || i < len(rel.Mods) && rel.Mods[i] != c.typmod:
			return &shapeChange{column: c.name, change: fmt.Sprintf("type changed from %s (type %d, modifier %d) to type %d, modifier %d", c.typname, c.oid, c.typmod, rel.OIDs[i], modAt(rel, i)), proof: true}
		}
	}
	if sh.all && sh.added(rel.Names) {
		return &shapeChange{change: "columns added", proof: true}
	}
	return nil
}

// added reports whether names has a column the shape lacks (and does not
// omit).
func (sh *tableShape) added(names []string) bool {
	have := map[string]bool{}
	for _, c := range sh.cols {
		have[c.name] = true
	}
	for _, n := range names {
		if !have[n] && !sh.omit[n] {
			return true
		}
	}
	return false
}

func modAt(rel *wal.Relation, i int) int32 {
	if i < len(rel.Mods) {
		return rel.Mods[i]
	}
	return -1
}

// diffColumns compares the table's columns in the catalog with the shape.
func (sh *tableShape) diffColumns(cols []column) *shapeChange {
	at := map[string]column{}
	var live []string
	for _, c := range cols {
		if !c.generated {
			at[c.name] = c
			live = append(live, c.name)
		}
	}
	for _, p := range sh.cols {
		c, ok := at[p.name]
		switch {
		case !ok && sh.all:
			return &shapeChange{column: p.name, change: "dropped or renamed", proof: true}
		case !ok:
			return &shapeChange{column: p.name, change: "dropped or renamed", fix: "the field mapped to it has no column any more: map the new column (a struct field tagged with its name) or leave the field out (`db:\"-\"`), and start a new Source and Table"}
		case c.oid != p.oid || c.typmod != p.typmod:
			return &shapeChange{column: p.name, change: fmt.Sprintf("type changed from %s to %s", p.typname, c.typname), proof: true}
		case p.notNull && !c.notNull:
			return &shapeChange{column: p.name, change: "became nullable (DROP NOT NULL)", proof: true}
		}
	}
	if sh.all && sh.added(live) {
		return &shapeChange{change: "columns added", proof: true}
	}
	return nil
}
