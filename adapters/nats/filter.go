package natsinformer

import (
	"fmt"
	"strings"

	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/filter"
)

// Partial sync (KVOptions.Where, EventStreamOptions.Where): one condition
// on filter.Key at the top level of the filter becomes the consumers'
// subject filter, so that the server sends only the matching keys'
// messages:
//
//   - KV: filter.Eq(filter.Key, "eu.berlin") watches that one key's subject,
//     filter.Prefix(filter.Key, "eu.") (a prefix of whole tokens, ending in
//     ".") the subjects "eu.>" below KVOptions.Prefix. Only when
//     KVOptions.Filter is empty: the two would have to be intersected.
//   - event streams: filter.Eq(filter.Key, "42") fills the key's token into
//     EventStreamOptions.Filter when that token is a "*" there
//     ("orders.*.events" becomes "orders.42.events"), with KeyToken and no
//     Key function.
//
// Everything else is evaluated here on each decoded value (KV) or folded
// state (event stream): those messages still cross the network and are
// decoded or folded, and an event stream keeps every entity's folded state
// (a later event may make it match).
const (
	kvPushdown     = "one filter.Key condition, Eq or a whole-token Prefix ending in \".\", as the subject filter, when KVOptions.Filter is empty"
	streamPushdown = "one filter.Eq(filter.Key, ...) filling a \"*\" key token of EventStreamOptions.Filter"
)

// kvWhere returns the subject pattern below the KV prefix and the residue
// of f. pattern is KVOptions.Filter ("" for none).
func kvWhere[T any](source, pattern string, f *filter.Filter[T]) (string, *filter.Filter[T], error) {
	if f == nil {
		return pattern, nil, nil
	}
	pushedOne := pattern != ""
	pushed, residue, err := f.Split(source, kvPushdown, func(e filter.Expr) bool {
		if pushedOne || e.Field != filter.Key {
			return false
		}
		k, _ := e.Values[0].(string)
		switch e.Op {
		case filter.OpEq:
			pushedOne = checkPattern("key", k, false) == nil
		case filter.OpPrefix:
			pushedOne = strings.HasSuffix(k, ".") && checkPattern("key", strings.TrimSuffix(k, "."), false) == nil
		}
		return pushedOne
	})
	if err != nil {
		return "", nil, fmt.Errorf("natsinformer: %w", err)
	}
	for _, e := range pushed {
		k := e.Values[0].(string)
		if e.Op == filter.OpPrefix {
			k += ">"
		}
		pattern = k
	}
	return pattern, residue, nil
}

// streamWhere returns the subject pattern and the residue of f for an event
// stream. pattern is the completed EventStreamOptions.Filter (">" for all).
func streamWhere[S any](source, pattern string, opts *EventStreamOptions[S]) (string, *filter.Filter[S], error) {
	f := opts.Where
	if f == nil {
		return pattern, nil, nil
	}
	toks := strings.Split(pattern, ".")
	i := opts.KeyToken
	switch {
	case i == 0:
		i = len(toks) - 1
	case i > 0:
		i--
	default:
		i += len(toks)
	}
	canFill := opts.Key == nil && i >= 0 && i < len(toks) && toks[i] == "*" && !strings.HasSuffix(pattern, ">")
	pushed, residue, err := f.Split(source, streamPushdown, func(e filter.Expr) bool {
		if !canFill || e.Field != filter.Key || e.Op != filter.OpEq {
			return false
		}
		k, _ := e.Values[0].(string)
		if checkPattern("key", k, false) != nil || strings.Contains(k, ".") {
			return false
		}
		canFill = false
		return true
	})
	if err != nil {
		return "", nil, fmt.Errorf("natsinformer: %w", err)
	}
	for _, e := range pushed {
		toks[i] = e.Values[0].(string)
		pattern = strings.Join(toks, ".")
	}
	return pattern, residue, nil
}

// rewriteLast applies residue to the event apply just appended.
func rewriteLast[T any](residue *filter.Filter[T], out []driver.Event[T], before int) []driver.Event[T] {
	if residue != nil && len(out) > before {
		residue.Rewrite(&out[len(out)-1])
	}
	return out
}
