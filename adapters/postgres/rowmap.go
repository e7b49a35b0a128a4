package pginformer

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unsafe"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/rowplan"
	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/jackc/pgx/v5/pgtype"
)

// Row to struct mapping: which column goes to which field, the key, and
// decoding the text of a row into T.

// mapper maps rows of one table onto T (a struct, or map[string]any when
// typ is nil). It is not generic, so that the stream-side code needs no T.
type mapper struct {
	st    *tableState
	typ   reflect.Type // nil: map[string]any
	omit  map[string]bool
	src   *Source
	mu    sync.Mutex
	plans map[*wal.Relation]*rowPlan
}

func newMapper(src *Source, st *tableState, typ reflect.Type, omit map[string]bool) *mapper {
	m := &mapper{st: st, typ: typ, omit: omit, src: src, plans: map[*wal.Relation]*rowPlan{}}
	return m
}

type structField struct {
	path      []int
	name, tag string
}

// structFields lists the exported fields of typ that map to columns, with
// the fields of embedded structs without a db tag flattened in, as
// pgx.RowToStructByName does. A field tagged `db:"-"` is left out.
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
	rel    *wal.Relation
	fields [][]int // per column: the struct field index, nil when unmapped
	used   []bool  // per column: decoded into T (mapped, or any column of a map)
	key    []int   // column positions of the primary key
	// partial: some column is not decoded. A streamed row's values slice
	// one copy of its whole message, so what TOAST memory keeps of such a
	// row is copied out, not to hold the columns T leaves out.
	partial bool

	textMu sync.Mutex
	text   *rowplan.Plan // compiled for text values, on first decode
	toast  []uint8       // per column: toastNever, toastIfLong or toastAlways (see toast.go)
	toastG uint64        // the table's toast generation toast was computed at
}

func normalizeName(s string) string {
	return strings.ToLower(strings.ReplaceAll(s, "_", ""))
}

// plan returns the plan of a column layout, cached per relation.
func (m *mapper) plan(rel *wal.Relation) (*rowPlan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.plans[rel]; ok {
		return p, nil
	}
	p := &rowPlan{rel: rel, fields: make([][]int, len(rel.Names)), used: make([]bool, len(rel.Names))}
	if m.typ != nil {
		byTag, byName := map[string][]int{}, map[string][]int{}
		for _, f := range structFields(m.typ, nil) {
			if f.tag != "" {
				byTag[f.tag] = f.path
			} else {
				byName[normalizeName(f.name)] = f.path
			}
		}
		for c, name := range rel.Names {
			if m.omit[name] {
				continue
			}
			if path, ok := byTag[name]; ok {
				p.fields[c] = path
			} else if path, ok := byName[normalizeName(name)]; ok {
				p.fields[c] = path
			}
			p.used[c] = p.fields[c] != nil
		}
	} else {
		for c, name := range rel.Names {
			p.used[c] = !m.omit[name]
		}
	}
	for _, u := range p.used {
		p.partial = p.partial || !u
	}
	for _, k := range m.st.pk {
		found := false
		for c, name := range rel.Names {
			if name == k {
				p.key = append(p.key, c)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("primary key column %q missing from the row", k)
		}
	}
	if rel.Names != nil {
		m.plans[rel] = p
	}
	return p, nil
}

// forget drops the cached plan of a relation that will not be seen again.
func (m *mapper) forget(rel *wal.Relation) {
	m.mu.Lock()
	delete(m.plans, rel)
	m.mu.Unlock()
}

var errEmptyKey = errors.New("the primary key is empty (the informer cannot key an object by an empty string)")

// encodeKey joins the primary key's text values. A single column is its
// text as is; a composite key escapes '\' and '/' and joins with '/', so
// that different keys never encode alike. NULL cannot occur in a key.
func encodeKey(p *rowPlan, vals []wal.Value) (string, error) {
	if len(p.key) == 1 {
		c := p.key[0]
		if c >= len(vals) || vals[c].Kind != 't' {
			return "", fmt.Errorf("primary key column %q missing from the tuple", p.rel.Names[c])
		}
		if len(vals[c].Data) == 0 {
			return "", errEmptyKey
		}
		return string(vals[c].Data), nil
	}
	var b strings.Builder
	for i, c := range p.key {
		if c >= len(vals) || vals[c].Kind != 't' {
			return "", fmt.Errorf("primary key column %q missing from the tuple", p.rel.Names[c])
		}
		if i > 0 {
			b.WriteByte('/')
		}
		for _, ch := range vals[c].Data {
			if ch == '\\' || ch == '/' {
				b.WriteByte('\\')
			}
			b.WriteByte(ch)
		}
	}
	return b.String(), nil
}

// decode fills dst (a *T) from a row's text values, through the plan's
// compiled text scan plan (see plan.go).
func (m *mapper) decode(p *rowPlan, vals []wal.Value, dst any) error {
	p.textMu.Lock()
	defer p.textMu.Unlock()
	if p.text == nil {
		formats := make([]int16, len(p.rel.Names))
		for i := range formats {
			formats[i] = pgtype.TextFormatCode
		}
		p.text = m.compile(p, formats, m.src.typeMap())
	}
	var obj unsafe.Pointer
	var row map[string]any
	if m.typ == nil {
		row = make(map[string]any, len(vals))
	} else {
		obj = reflect.ValueOf(dst).UnsafePointer()
	}
	for c, v := range vals {
		if c >= p.text.Len() {
			break
		}
		if v.Kind == 'u' {
			// An unchanged TOASTed value left for the consumer to fill in
			// from its cache (see fillin.go): the field stays zero.
			continue
		}
		var data []byte
		if v.Kind == 't' {
			data = v.Data
			if data == nil {
				data = []byte{}
			}
		}
		if err := p.text.DecodeColumn(obj, row, c, data); err != nil {
			return err
		}
	}
	if m.typ == nil {
		*dst.(*map[string]any) = row
	}
	return nil
}

// compile builds the scan plan of p for columns arriving in formats (one
// per column of p.rel).
func (m *mapper) compile(p *rowPlan, formats []int16, tm *pgtype.Map) *rowplan.Plan {
	return rowplan.Compile(m.typ, rowplan.Layout{Names: p.rel.Names, OIDs: p.rel.OIDs, Used: p.used, Fields: p.fields}, formats, tm)
}
