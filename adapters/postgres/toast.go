package pginformer

import (
	"bytes"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/rowplan"
	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/jackc/pgx/v5/pgtype"
)

// TOAST memory. pgoutput leaves out a TOASTed value that an update did not
// change ('u'); under REPLICA IDENTITY DEFAULT the old row is not sent
// either, so the table keeps, per key, the last value of each column that
// can come back as 'u' — unless its consumer fills it in from its cache
// (watchFills, fillin.go). Every function here but watchFills is called
// with knownMu held.
//
// Only a value stored out of line (external) is ever sent as 'u', and
// Postgres moves a value out of line only if its stored form is longer
// than a TOAST pointer (MAXALIGN(TOAST_POINTER_SIZE) = 24 bytes,
// toast_tuple_find_biggest_attribute in heaptoast.c). So:
//   - fixed-length types (attlen > 0: integers, timestamps, uuid, enums...)
//     and columns with STORAGE PLAIN are never TOASTed: nothing is kept;
//   - for text-like types the stored form is the text plus a 1- or 4-byte
//     header (or less, compressed): a value of at most 20 bytes is never
//     external and is not kept;
//   - other variable-length types (numeric, jsonb, arrays...) are kept
//     from the stream, where their stored size is unknown;
//   - List asks the server which values are out of line (outOfLine: exact
//     on Postgres 14+, before it only rules out values stored in 20 bytes
//     or less) and keeps only those.

// knownValue is one column's last value, as text.
type knownValue struct {
	col  string
	data []byte
}

// What a column's values may need (tableState.toastCols, rowPlan.toast).
const (
	toastAlways uint8 = iota // keep every value
	toastNever               // never TOASTed: keep nothing
	toastIfLong              // text-like: keep values over maxInline bytes
)

// maxInline is the longest text-like value that can never be stored out of
// line: 20 bytes of text and a 4-byte header fit a TOAST pointer's 24.
const maxInline = 20

// fixedLength are types whose values are never TOASTed (used for a column
// the catalog has not been read for yet).
var fixedLength = map[uint32]bool{
	pgtype.BoolOID: true, pgtype.Int2OID: true, pgtype.Int4OID: true, pgtype.Int8OID: true,
	pgtype.Float4OID: true, pgtype.Float8OID: true, pgtype.DateOID: true, pgtype.TimeOID: true,
	pgtype.TimestampOID: true, pgtype.TimestamptzOID: true, pgtype.UUIDOID: true, pgtype.OIDOID: true,
}

// toastKind classifies a column from the catalog: attlen and attstorage.
func toastKind(oid uint32, attlen int16, storage byte) uint8 {
	switch {
	case attlen != -1 || storage == 'p':
		return toastNever
	case rowplan.TextLike(oid):
		return toastIfLong
	}
	return toastAlways
}

// setToastCols records the table's columns as a snapshot saw them.
func (t *tableState) setToastCols(kinds map[string]uint8) {
	t.toastCols = kinds
	t.toastGen++
}

// toastOf returns p's per-column kinds, computed once per generation.
func (t *tableState) toastOf(p *rowPlan) []uint8 {
	if p.toast != nil && p.toastG == t.toastGen {
		return p.toast
	}
	k := make([]uint8, len(p.rel.Names))
	for c, name := range p.rel.Names {
		kind, ok := t.toastCols[name]
		switch {
		case ok:
		case fixedLength[p.rel.OIDs[c]]:
			kind = toastNever
		case rowplan.TextLike(p.rel.OIDs[c]):
			kind = toastIfLong
		default:
			kind = toastAlways
		}
		k[c] = kind
	}
	p.toast, p.toastG = k, t.toastGen
	return k
}

// watchFills records what a new watch's consumer does with an event whose
// unchanged TOASTed values the table did not fill in (fillin.go). The
// first consumer that fills them from its cache (a core informer) ends the
// keeping of values: they are dropped, and updates of keys whose values
// are not kept carry a driver.Event.Fill. A consumer that does not fill (a
// relay) makes the table keep them again from then on: its watch ends on
// the first event it cannot take (driver.ErrExpired), and the List it then
// runs records them again. Called with knownMu not held.
func (t *tableState) watchFills(fills bool) {
	t.knownMu.Lock()
	defer t.knownMu.Unlock()
	switch {
	case !fills:
		t.plain = true
	case !t.filled && !t.plain:
		t.filled = true
		t.resetKnown()
	}
}

// keepsToast reports whether values are kept (see watchFills).
func (t *tableState) keepsToast() bool { return !t.filled || t.plain }

// resetKnown forgets every value.
func (t *tableState) resetKnown() {
	t.vals = map[string]map[string][]byte{}
}

// remember records the values of a row that may come back as 'u', and
// forgets the row's earlier ones that cannot any more. It keeps vals'
// bytes, or copies of them when the row has columns p does not decode (its
// bytes share one buffer with theirs).
func (t *tableState) remember(p *rowPlan, key string, vals []wal.Value) {
	if t.full || !t.keepsToast() { // FULL: 'u' is filled from the old row instead
		return
	}
	kinds := t.toastOf(p)
	for c, v := range vals {
		if !p.used[c] || c >= len(kinds) || kinds[c] == toastNever {
			continue
		}
		col := p.rel.Names[c]
		if v.Kind != 't' || kinds[c] == toastIfLong && len(v.Data) <= maxInline {
			if m := t.vals[col]; len(m) > 0 {
				delete(m, key)
			}
			continue
		}
		data := v.Data
		if p.partial {
			data = bytes.Clone(data)
		}
		t.keep(col, key, data)
	}
}

// rememberListed records the values of a listed row that List found could
// be TOASTed (already copied).
func (t *tableState) rememberListed(key string, vl []knownValue) {
	if !t.keepsToast() {
		return
	}
	for _, kv := range vl {
		t.keep(kv.col, key, kv.data)
	}
}

func (t *tableState) keep(col, key string, data []byte) {
	m := t.vals[col]
	if m == nil {
		m = map[string][]byte{}
		t.vals[col] = m
	}
	m[key] = data
}

// forget drops a deleted key's values.
func (t *tableState) forget(key string) {
	for _, m := range t.vals {
		delete(m, key)
	}
}

// fillToast replaces unchanged TOASTed values ('u') with the old tuple's
// value (REPLICA IDENTITY FULL) or the last known value of key. A 'u' it
// cannot fill stays 'u'.
func (t *tableState) fillToast(p *rowPlan, key string, vals, old []wal.Value) []wal.Value {
	var out []wal.Value
	for i, v := range vals {
		if v.Kind != 'u' {
			continue
		}
		if out == nil {
			out = append([]wal.Value(nil), vals...)
		}
		if i < len(old) && old[i].Kind == 't' {
			out[i] = old[i]
			continue
		}
		if data, ok := t.vals[p.rel.Names[i]][key]; ok {
			out[i] = wal.Value{Kind: 't', Data: data}
		}
	}
	if out == nil {
		return vals
	}
	return out
}
