package filter

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Filter is an Expr checked against the type T it filters: every field
// name resolved to a struct field (once, by reflection), every value
// converted to the field's type. A nil *Filter matches everything. It is
// immutable and safe for concurrent use.
type Filter[T any] struct {
	expr Expr
	root *node[T]
}

// node is one compiled Expr node.
type node[T any] struct {
	op   Op
	path *path   // leaves
	vals []value // leaves, converted to the field's type
	args []*node[T]
	pred func(T) bool
}

var timeType = reflect.TypeFor[time.Time]()

// New checks e against T and returns the Filter. It fails, naming the
// field and T, on a field T does not have, a value whose type does not fit
// the field (a string for an int column, a negative number for an
// unsigned one), an ordering or Prefix on a field that has none (bool,
// struct), and a Where predicate that is not a func(T) bool.
//
// Field names are looked up in T (through pointers, nested and embedded
// structs, and string-keyed maps for dotted paths) by `db` tag, then by
// `json` tag, then by Go name; Key stands for the object's key. Fields a
// dotted path crosses may be pointers: a nil pointer or a missing map key
// makes the leaf false, as NULL does in SQL.
func New[T any](e Expr) (*Filter[T], error) {
	root, conv, err := compile[T](e)
	if err != nil {
		return nil, fmt.Errorf("filter on %s: %w", typeName[T](), err)
	}
	return &Filter[T]{expr: conv, root: root}, nil
}

// MustNew is New that panics on error, for filters written in code.
func MustNew[T any](e Expr) *Filter[T] {
	f, err := New[T](e)
	if err != nil {
		panic(err)
	}
	return f
}

func typeName[T any]() string {
	t := reflect.TypeFor[T]()
	return t.String()
}

// Expr returns the expression f was built from, with values converted to
// their fields' types.
func (f *Filter[T]) Expr() Expr {
	if f == nil {
		return And()
	}
	return f.expr
}

// String renders the filter, "TRUE" for nil.
func (f *Filter[T]) String() string { return f.Expr().String() }

// Match reports whether obj, whose key in its source is key, passes the
// filter. A nil Filter matches everything.
func (f *Filter[T]) Match(key string, obj T) bool {
	if f == nil {
		return true
	}
	return f.root.eval(key, obj, reflect.Value{})
}

// compile checks e against T. It returns the compiled node and a copy of
// e whose values have the fields' types (e itself, which the caller may
// reuse for another type, is left alone).
func compile[T any](e Expr) (*node[T], Expr, error) {
	n := &node[T]{op: e.Op}
	switch e.Op {
	case OpAnd, OpOr:
		args := make([]Expr, 0, len(e.Args))
		for _, a := range e.Args {
			c, ca, err := compile[T](a)
			if err != nil {
				return nil, e, err
			}
			n.args = append(n.args, c)
			args = append(args, ca)
		}
		e.Args = args
		return n, e, nil
	case OpWhere:
		p, ok := e.pred.(func(T) bool)
		if !ok || p == nil {
			return nil, e, fmt.Errorf("Where(%q) is a %T, not a func(%s) bool", e.label, e.pred, typeName[T]())
		}
		n.pred = p
		return n, e, nil
	case OpEq, OpIn, OpLt, OpLe, OpGt, OpGe, OpPrefix:
	default:
		return nil, e, fmt.Errorf("unknown operator %v (build expressions with filter.Eq, In, Lt, Le, Gt, Ge, Prefix, And, Or, Where)", e.Op)
	}
	if e.Op != OpIn && len(e.Values) != 1 {
		return nil, e, fmt.Errorf("%s: %v takes one value, has %d", e.Field, e.Op, len(e.Values))
	}
	p, err := resolve(reflect.TypeFor[T](), e.Field)
	if err != nil {
		return nil, e, err
	}
	n.path = p
	leaf := p.leaf
	switch {
	case e.Op == OpPrefix && leaf.Kind() != reflect.String:
		return nil, e, fmt.Errorf("%s: Prefix needs a string field, %s is %s", e, e.Field, leaf)
	case e.Op >= OpLt && e.Op <= OpGe && leaf.Kind() == reflect.Bool:
		return nil, e, fmt.Errorf("%s: %s is a bool, which has no order", e, e.Field)
	}
	conv := make([]any, 0, len(e.Values))
	for _, v := range e.Values {
		cv, err := convert(v, leaf)
		if err != nil {
			return nil, e, fmt.Errorf("%s: %w", e, err)
		}
		n.vals = append(n.vals, cv)
		conv = append(conv, cv.Interface())
	}
	e.Values = conv
	return n, e, nil
}

// path is a resolved field name: how to reach the leaf value from a T.
type path struct {
	key   bool // the object's key, not a field
	steps []step
	leaf  reflect.Type
}

type step struct {
	deref  bool   // follow a pointer (nil: no value)
	index  []int  // struct field, possibly promoted
	mapKey string // map index (missing: no value)
	isMap  bool
}

func resolve(t reflect.Type, field string) (*path, error) {
	if field == Key {
		return &path{key: true, leaf: reflect.TypeFor[string]()}, nil
	}
	if field == "" {
		return nil, errors.New("a condition has no field name")
	}
	p := &path{}
	cur := t
	for i, seg := range strings.Split(field, ".") {
		for cur.Kind() == reflect.Pointer {
			p.steps = append(p.steps, step{deref: true})
			cur = cur.Elem()
		}
		switch {
		case cur.Kind() == reflect.Struct && cur != timeType:
			f, err := lookup(cur, seg)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", field, err)
			}
			p.steps = append(p.steps, step{index: f.Index})
			cur = f.Type
		case cur.Kind() == reflect.Map && cur.Key().Kind() == reflect.String:
			p.steps = append(p.steps, step{isMap: true, mapKey: seg})
			cur = cur.Elem()
		default:
			at := strings.Join(strings.Split(field, ".")[:i], ".")
			return nil, fmt.Errorf("field %q: %s is a %s, which has no field %q", field, at, cur, seg)
		}
	}
	for cur.Kind() == reflect.Pointer {
		p.steps = append(p.steps, step{deref: true})
		cur = cur.Elem()
	}
	switch cur.Kind() {
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
	default:
		if cur != timeType {
			return nil, fmt.Errorf("field %q is a %s: filters compare strings, numbers, bools and time.Time", field, cur)
		}
	}
	p.leaf = cur
	return p, nil
}

// lookup finds the field of struct t named name by db tag, json tag or Go
// name, the shallowest one winning; two at the same depth are ambiguous.
func lookup(t reflect.Type, name string) (reflect.StructField, error) {
	var found []reflect.StructField
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() {
			continue
		}
		if tagName(f, "db") == name || tagName(f, "json") == name || f.Name == name {
			found = append(found, f)
		}
	}
	if len(found) == 0 {
		var names []string
		for _, f := range reflect.VisibleFields(t) {
			if f.IsExported() && !f.Anonymous {
				names = append(names, fieldName(f))
			}
		}
		return reflect.StructField{}, fmt.Errorf("%s has no field %q (by db tag, json tag or Go name); it has %s", t, name, strings.Join(names, ", "))
	}
	best := found[0]
	ambiguous := false
	for _, f := range found[1:] {
		switch {
		case len(f.Index) < len(best.Index):
			best, ambiguous = f, false
		case len(f.Index) == len(best.Index):
			ambiguous = true
		}
	}
	if ambiguous {
		return reflect.StructField{}, fmt.Errorf("%s has several fields named %q at the same depth", t, name)
	}
	return best, nil
}

func tagName(f reflect.StructField, tag string) string {
	v, ok := f.Tag.Lookup(tag)
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, ",")
	if v == "-" {
		return ""
	}
	return v
}

func fieldName(f reflect.StructField) string {
	if n := tagName(f, "db"); n != "" {
		return n
	}
	if n := tagName(f, "json"); n != "" {
		return n
	}
	return f.Name
}

// value is a converted operand.
type value = reflect.Value

// convert turns v into a value of type t, refusing anything lossy.
func convert(v any, t reflect.Type) (reflect.Value, error) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return rv, fmt.Errorf("value nil for a %s field (filters have no NULL)", t)
	}
	mismatch := func() (reflect.Value, error) {
		return reflect.Value{}, fmt.Errorf("value %#v is a %s, the field is a %s", v, rv.Type(), t)
	}
	if rv.Type() == t {
		return rv, nil
	}
	out := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.String:
		if rv.Kind() != reflect.String {
			return mismatch()
		}
		out.SetString(rv.String())
	case reflect.Bool:
		if rv.Kind() != reflect.Bool {
			return mismatch()
		}
		out.SetBool(rv.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		switch {
		case rv.CanInt():
			if out.OverflowInt(rv.Int()) {
				return reflect.Value{}, fmt.Errorf("value %v does not fit the field's %s", v, t)
			}
			out.SetInt(rv.Int())
		case rv.CanUint():
			if rv.Uint() > 1<<63-1 || out.OverflowInt(int64(rv.Uint())) {
				return reflect.Value{}, fmt.Errorf("value %v does not fit the field's %s", v, t)
			}
			out.SetInt(int64(rv.Uint()))
		default:
			return mismatch()
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		switch {
		case rv.CanInt():
			if rv.Int() < 0 || out.OverflowUint(uint64(rv.Int())) {
				return reflect.Value{}, fmt.Errorf("value %v does not fit the field's %s", v, t)
			}
			out.SetUint(uint64(rv.Int()))
		case rv.CanUint():
			if out.OverflowUint(rv.Uint()) {
				return reflect.Value{}, fmt.Errorf("value %v does not fit the field's %s", v, t)
			}
			out.SetUint(rv.Uint())
		default:
			return mismatch()
		}
	case reflect.Float32, reflect.Float64:
		switch {
		case rv.CanFloat():
			out.SetFloat(rv.Float())
		case rv.CanInt():
			out.SetFloat(float64(rv.Int()))
		case rv.CanUint():
			out.SetFloat(float64(rv.Uint()))
		default:
			return mismatch()
		}
	default:
		return mismatch()
	}
	return out, nil
}

func (n *node[T]) eval(key string, obj T, root reflect.Value) bool {
	switch n.op {
	case OpAnd:
		for _, a := range n.args {
			if !a.eval(key, obj, root) {
				return false
			}
		}
		return true
	case OpOr:
		for _, a := range n.args {
			if a.eval(key, obj, root) {
				return true
			}
		}
		return false
	case OpWhere:
		return n.pred(obj)
	}
	var v reflect.Value
	if n.path.key {
		v = reflect.ValueOf(key)
	} else {
		if !root.IsValid() {
			root = reflect.ValueOf(&obj).Elem()
		}
		var ok bool
		if v, ok = n.path.get(root); !ok {
			return false
		}
	}
	switch n.op {
	case OpEq:
		return compare(v, n.vals[0]) == 0
	case OpIn:
		for _, w := range n.vals {
			if compare(v, w) == 0 {
				return true
			}
		}
		return false
	case OpLt:
		return compare(v, n.vals[0]) < 0
	case OpLe:
		return compare(v, n.vals[0]) <= 0
	case OpGt:
		return compare(v, n.vals[0]) > 0
	case OpGe:
		return compare(v, n.vals[0]) >= 0
	case OpPrefix:
		return strings.HasPrefix(v.String(), n.vals[0].String())
	}
	return false
}

func (p *path) get(v reflect.Value) (reflect.Value, bool) {
	for _, s := range p.steps {
		switch {
		case s.deref:
			if v.IsNil() {
				return v, false
			}
			v = v.Elem()
		case s.isMap:
			if v.IsNil() {
				return v, false
			}
			v = v.MapIndex(reflect.ValueOf(s.mapKey).Convert(v.Type().Key()))
			if !v.IsValid() {
				return v, false
			}
		default:
			var err error
			if v, err = v.FieldByIndexErr(s.index); err != nil {
				return v, false // a nil embedded pointer on the way
			}
		}
	}
	return v, true
}

// compare orders two values of the same leaf type. Bools compare equal or
// not (New refuses ordering them).
func compare(a, b reflect.Value) int {
	switch a.Kind() {
	case reflect.String:
		return strings.Compare(a.String(), b.String())
	case reflect.Bool:
		if a.Bool() == b.Bool() {
			return 0
		}
		return 1
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return cmp.Compare(a.Int(), b.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return cmp.Compare(a.Uint(), b.Uint())
	case reflect.Float32, reflect.Float64:
		return cmp.Compare(a.Float(), b.Float())
	}
	if a.Type() == timeType {
		return a.Interface().(time.Time).Compare(b.Interface().(time.Time))
	}
	return 1
}
