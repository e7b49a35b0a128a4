package filter

import (
	"fmt"
	"strings"
)

// Op is what one Expr node does.
type Op uint8

const (
	// OpEq: the field equals Values[0].
	OpEq Op = iota + 1
	// OpIn: the field equals one of Values.
	OpIn
	// OpLt, OpLe, OpGt, OpGe: the field compares with Values[0].
	OpLt
	OpLe
	OpGt
	OpGe
	// OpPrefix: the (string) field starts with Values[0].
	OpPrefix
	// OpAnd: every one of Args holds (true when Args is empty).
	OpAnd
	// OpOr: at least one of Args holds.
	OpOr
	// OpWhere: a client-side predicate (see Where); never pushed down.
	OpWhere
)

// String returns the operator as written in Expr.String.
func (o Op) String() string {
	switch o {
	case OpEq:
		return "="
	case OpIn:
		return "IN"
	case OpLt:
		return "<"
	case OpLe:
		return "<="
	case OpGt:
		return ">"
	case OpGe:
		return ">="
	case OpPrefix:
		return "PREFIX"
	case OpAnd:
		return "AND"
	case OpOr:
		return "OR"
	case OpWhere:
		return "WHERE"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Key is the field name that stands for an object's key in its source
// (the etcd key below the prefix, the NATS KV key or subject token, the
// Kubernetes namespace/name), rather than for a field of the object.
const Key = "$key"

// Expr is a condition, built with Eq, In, Lt, Le, Gt, Ge, Prefix, And, Or
// and Where, and checked against a type by New. Its fields are exported so
// that an adapter can translate the part it pushes down (see
// Filter.Split); build expressions with the functions, not by hand.
type Expr struct {
	Op Op
	// Field names what a leaf compares: a struct field by its `db` tag,
	// its `json` tag or its Go name, a dotted path through nested structs
	// and string-keyed maps ("metadata.labels.app"), or Key.
	Field string
	// Values are the operands of a leaf. After New they have the Go type
	// of the field (an int field's values are int, a string field's
	// string).
	Values []any
	// Args are the operands of OpAnd and OpOr.
	Args []Expr
	// Server marks a condition that must be evaluated by the source (see
	// Server); Split fails if the adapter cannot push it down.
	Server bool

	pred  any    // OpWhere: a func(T) bool
	label string // OpWhere: its name in messages
}

// Eq holds when field equals v.
func Eq(field string, v any) Expr { return Expr{Op: OpEq, Field: field, Values: []any{v}} }

// In holds when field equals one of vs. In with no values never holds.
func In(field string, vs ...any) Expr {
	return Expr{Op: OpIn, Field: field, Values: append([]any(nil), vs...)}
}

// Lt holds when field < v.
func Lt(field string, v any) Expr { return Expr{Op: OpLt, Field: field, Values: []any{v}} }

// Le holds when field <= v.
func Le(field string, v any) Expr { return Expr{Op: OpLe, Field: field, Values: []any{v}} }

// Gt holds when field > v.
func Gt(field string, v any) Expr { return Expr{Op: OpGt, Field: field, Values: []any{v}} }

// Ge holds when field >= v.
func Ge(field string, v any) Expr { return Expr{Op: OpGe, Field: field, Values: []any{v}} }

// Prefix holds when the string field starts with p.
func Prefix(field, p string) Expr { return Expr{Op: OpPrefix, Field: field, Values: []any{p}} }

// And holds when every one of es holds.
func And(es ...Expr) Expr { return Expr{Op: OpAnd, Args: append([]Expr(nil), es...)} }

// Or holds when at least one of es holds.
func Or(es ...Expr) Expr { return Expr{Op: OpOr, Args: append([]Expr(nil), es...)} }

// Where is the escape hatch: a predicate on the object, evaluated by the
// adapter after decoding, never by the source. name says what it checks
// in messages ("paid orders"). pred must be a func(T) bool for the T the
// filter is built for; New checks it. It must be a pure function of the
// object: the adapter calls it on every change.
func Where[T any](name string, pred func(T) bool) Expr {
	return Expr{Op: OpWhere, pred: pred, label: name}
}

// Server marks e as a condition the source must evaluate: an adapter that
// cannot push it down refuses the filter (Split returns an error naming it)
// rather than reading everything and filtering on this side.
func Server(e Expr) Expr {
	e.Server = true
	return e
}

// String renders e for messages, e.g. `status = "paid" AND (age >= 18)`.
func (e Expr) String() string {
	var b strings.Builder
	e.write(&b)
	return b.String()
}

func (e Expr) write(b *strings.Builder) {
	switch e.Op {
	case OpAnd, OpOr:
		if len(e.Args) == 0 {
			if e.Op == OpAnd {
				b.WriteString("TRUE")
			} else {
				b.WriteString("FALSE")
			}
			return
		}
		for i, a := range e.Args {
			if i > 0 {
				b.WriteString(" " + e.Op.String() + " ")
			}
			paren := a.Op == OpAnd || a.Op == OpOr
			if paren {
				b.WriteByte('(')
			}
			a.write(b)
			if paren {
				b.WriteByte(')')
			}
		}
	case OpWhere:
		fmt.Fprintf(b, "WHERE(%s)", e.label)
	case OpIn:
		fmt.Fprintf(b, "%s IN (", e.Field)
		for i, v := range e.Values {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(b, "%#v", v)
		}
		b.WriteByte(')')
	default:
		var v any
		if len(e.Values) > 0 {
			v = e.Values[0]
		}
		fmt.Fprintf(b, "%s %s %#v", e.Field, e.Op, v)
	}
}
