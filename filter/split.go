package filter

import (
	"fmt"
	"reflect"
	"strings"
)

// Split divides f between a source and its adapter. can reports whether
// the source evaluates a condition; Split offers it each top-level
// conjunct of f (f itself when f is not an AND). pushed are the conjuncts
// it accepted, for the adapter to translate into the source's terms: f
// implies their conjunction, so the source sends a superset of f's
// matches and never misses one. residue is a Filter of the other
// conjuncts, which the adapter evaluates on each object the source sends
// (it matches everything when everything was pushed down). A nil f splits
// into nothing and a nil residue: an unfiltered source.
//
// Split fails when a conjunct marked with Server, or holding one, is left
// to the adapter. The error names the condition, source and supports (what
// the source can evaluate, in words), and the fix.
func (f *Filter[T]) Split(source, supports string, can func(Expr) bool) (pushed []Expr, residue *Filter[T], err error) {
	if f == nil {
		return nil, nil, nil
	}
	exprs, nodes := []Expr{f.expr}, []*node[T]{f.root}
	if f.expr.Op == OpAnd {
		exprs, nodes = f.expr.Args, f.root.args
	}
	rest := &Filter[T]{expr: And(), root: &node[T]{op: OpAnd}}
	for i, e := range exprs {
		if can(e) {
			pushed = append(pushed, e)
			continue
		}
		if server(e) {
			return nil, nil, fmt.Errorf("%s cannot evaluate %s, which is marked filter.Server (it evaluates %s): drop filter.Server to evaluate it in the adapter after decoding, or filter on what the source evaluates", source, e, supports)
		}
		rest.expr.Args = append(rest.expr.Args, e)
		rest.root.args = append(rest.root.args, nodes[i])
	}
	if len(rest.root.args) == 1 {
		rest.expr, rest.root = rest.expr.Args[0], rest.root.args[0]
	}
	return pushed, rest, nil
}

// server reports whether e or anything in it is marked Server.
func server(e Expr) bool {
	if e.Server {
		return true
	}
	for _, a := range e.Args {
		if server(a) {
			return true
		}
	}
	return false
}

// All reports whether f matches everything: nil, or an AND of nothing
// (the residue of a fully pushed-down filter).
func (f *Filter[T]) All() bool {
	return f == nil || (f.expr.Op == OpAnd && len(f.expr.Args) == 0)
}

// Conjuncts returns e's top-level conjuncts: e's Args if e is an AND,
// else e alone.
func Conjuncts(e Expr) []Expr {
	if e.Op == OpAnd {
		return e.Args
	}
	return []Expr{e}
}

// FieldIndex resolves field (one name, no dots, not Key) in struct type T
// as New does and returns its index path for reflect.Value.FieldByIndex,
// so that an adapter can tell which column or attribute a condition is
// about. ok is false for a name that does not resolve to a field of T
// itself (a dotted path, Key, a non-struct T).
func FieldIndex[T any](field string) (index []int, ok bool) {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Struct || field == Key || field == "" || strings.Contains(field, ".") {
		return nil, false
	}
	f, err := lookup(t, field)
	if err != nil {
		return nil, false
	}
	return f.Index, true
}
