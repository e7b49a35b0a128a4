package pginformer

import (
	"fmt"
	"maps"
	"reflect"

	"github.com/dbinformer/dbinformer/core/driver"
)

// Filling in unchanged TOASTed values from the consumer's cache.
//
// Under REPLICA IDENTITY DEFAULT pgoutput leaves a TOASTed value that an
// update did not change out of the update ('u'). The table fills it in
// from the value it remembers for the key (toast.go) when it has one: it
// does for every key it listed or saw written since. A table restored from
// a checkpoint has none: it emits the update with those fields left zero
// and a driver.Event.Fill that copies them from the object the consumer
// caches for the key, its previous state, which holds the last value of
// every column T maps. A watch whose consumer does not fill
// (driver.WatchOptions.Fills false) ends on such an event with an error
// matching driver.ErrExpired, and its caller relists.

// cacheFill returns the Fill of an update decoded into obj without the
// columns missing, which it copies from the cached object.
func (t *Table[T]) cacheFill(p *rowPlan, missing []int, obj T) func(cached T) (T, error) {
	if t.m.typ == nil { // map[string]any rows
		names := make([]string, len(missing))
		for i, c := range missing {
			names[i] = p.rel.Names[c]
		}
		return func(cached T) (T, error) {
			row, _ := any(obj).(map[string]any)
			old, _ := any(cached).(map[string]any)
			out := maps.Clone(row) // obj is shared by every watch of the batch
			for _, name := range names {
				v, ok := old[name]
				if !ok {
					var zero T
					return zero, fmt.Errorf("unchanged TOASTed column %q: the cached object has no value for it", name)
				}
				out[name] = v
			}
			return any(out).(T), nil
		}
	}
	paths := make([][]int, len(missing))
	for i, c := range missing {
		paths[i] = p.fields[c]
	}
	return func(cached T) (T, error) {
		out := obj
		dst, src := reflect.ValueOf(&out).Elem(), reflect.ValueOf(&cached).Elem()
		for _, path := range paths {
			dst.FieldByIndex(path).Set(src.FieldByIndex(path))
		}
		return out, nil
	}
}

// needsFill returns an error matching driver.ErrExpired for the first event
// of evs that only the consumer's cache can complete.
func needsFill[T any](evs []driver.Event[T]) error {
	for i := range evs {
		if evs[i].Fill != nil {
			return fmt.Errorf("key %q: an unchanged TOASTed value left out of the update is not known here (the table was restored from a checkpoint) and this watch's consumer does not fill it in from its cache (core.WatchOptions.Fills); list again: %w", evs[i].Key, driver.ErrExpired)
		}
	}
	return nil
}
