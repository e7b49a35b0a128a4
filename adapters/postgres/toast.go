package pginformer

import (
	"sort"

	"github.com/jackc/pgx/v5/pgtype"
)

// TOAST memory. pgoutput leaves out a TOASTed value that an update did not
// change ('u'); under REPLICA IDENTITY DEFAULT the old row is not sent
// either, so the table keeps, per key, the last value of each
// variable-length column. Every function here is called with knownMu held.

// knownValue is one variable-length column's last value.
type knownValue struct {
	col  string
	data []byte
}

// fixedLength are types whose values are never TOASTed.
var fixedLength = map[uint32]bool{
	pgtype.BoolOID: true, pgtype.Int2OID: true, pgtype.Int4OID: true, pgtype.Int8OID: true,
	pgtype.Float4OID: true, pgtype.Float8OID: true, pgtype.DateOID: true, pgtype.TimeOID: true,
	pgtype.TimestampOID: true, pgtype.TimestamptzOID: true, pgtype.UUIDOID: true, pgtype.OIDOID: true,
}

// remember records the variable-length values of a row under its key.
func (t *tableState) remember(p *rowPlan, key string, vals []rawValue) {
	var vl []knownValue
	if !t.full { // FULL: 'u' is filled from the old row instead
		for c, v := range vals {
			if v.kind == 't' && p.used[c] && !fixedLength[p.rel.oids[c]] {
				vl = append(vl, knownValue{p.rel.names[c], v.data})
			}
		}
	}
	t.known[key] = vl
}

// forget drops a deleted key.
func (t *tableState) forget(key string) { delete(t.known, key) }

// truncate empties the table and returns its keys, sorted.
func (t *tableState) truncate() []string {
	keys := make([]string, 0, len(t.known))
	for k := range t.known {
		keys = append(keys, k)
	}
	t.known = map[string][]knownValue{}
	sort.Strings(keys)
	return keys
}

// fillToast replaces unchanged TOASTed values ('u') with the old tuple's
// value (REPLICA IDENTITY FULL) or the last known value of key. A 'u' it
// cannot fill stays 'u'.
func (t *tableState) fillToast(p *rowPlan, key string, vals, old []rawValue) []rawValue {
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
		for _, kv := range t.known[key] {
			if kv.col == p.rel.names[i] {
				out[i] = rawValue{kind: 't', data: kv.data}
				break
			}
		}
	}
	if out == nil {
		return vals
	}
	return out
}
