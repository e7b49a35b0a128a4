package etcdinformer

import (
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/filter"
)

// What a Prefix pushes down of Options.Where: the conditions on the object
// key (filter.Key: Eq, Prefix, Lt, Le, Gt, Ge) at the top level of the
// filter, which narrow the range that List reads and Watch watches below the
// prefix, so that etcd never sends the keys outside it. Everything else
// (value fields, Or, In, Where) is evaluated here, on each decoded value.
const etcdPushdown = "conditions on filter.Key (Eq, Prefix, Lt, Le, Gt, Ge), as a key range below the prefix"

// canPush reports whether e narrows the key range.
func canPush(e filter.Expr) bool {
	if e.Field != filter.Key {
		return false
	}
	switch e.Op {
	case filter.OpEq, filter.OpPrefix, filter.OpLt, filter.OpLe, filter.OpGt, filter.OpGe:
		return true
	}
	return false
}

// applyFilter narrows p's range to f's key conditions and keeps the
// residue. It runs in NewPrefix, after the prefix is completed.
func (p *Prefix[T]) applyFilter(f *filter.Filter[T]) error {
	pushed, residue, err := f.Split(p.source, etcdPushdown, canPush)
	if err != nil {
		return fmt.Errorf("etcdinformer: %w", err)
	}
	p.residue = residue
	// unbounded: p.end is etcd's "to the end of the key space".
	unbounded := p.end == "\x00"
	start, end := p.start, p.end
	lower := func(k string) {
		if k > start {
			start = k
		}
	}
	upper := func(k string) {
		if unbounded || k < end {
			end, unbounded = k, false
		}
	}
	for _, e := range pushed {
		k := p.prefix + e.Values[0].(string)
		switch e.Op {
		case filter.OpEq:
			lower(k)
			upper(k + "\x00")
		case filter.OpPrefix:
			lower(k)
			if re := clientv3.GetPrefixRangeEnd(k); re != "\x00" {
				upper(re)
			}
		case filter.OpGe:
			lower(k)
		case filter.OpGt:
			lower(k + "\x00")
		case filter.OpLt:
			upper(k)
		case filter.OpLe:
			upper(k + "\x00")
		}
	}
	if !unbounded && start >= end {
		return fmt.Errorf("etcdinformer: %s: the key conditions of filter %s select no key (range [%q, %q)): such a filter can only be a mistake", p.source, f, start, end)
	}
	p.start, p.end = start, end
	switch {
	case len(pushed) == 0:
	case unbounded:
		p.source = fmt.Sprintf("%s keys from %q", p.source, start)
	default:
		p.source = fmt.Sprintf("%s keys [%q, %q)", p.source, start, end)
	}
	return nil
}
