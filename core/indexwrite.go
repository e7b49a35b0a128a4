package core

import (
	"maps"
	"slices"
)

// The Indexer's write path: every index value is computed before anything
// changes, so that a failing index function leaves the store as it was.

// putLocked stores obj and returns the previous object. Every index value
// is computed before anything changes, so a failing index function leaves
// the store as it was.
func (s *Indexer[T]) putLocked(key string, obj T) (old T, existed bool, err error) {
	s.settleLocked()
	if len(s.indexers) == 0 {
		old, existed = s.items.swap(key, obj)
		return old, existed, nil
	}
	old, existed = s.items.get(key)
	// Up to four indexes keep their values on the stack.
	var buf [4]indexValues
	vals := buf[:0]
	for _, fn := range s.fns {
		nv, err := indexValuesOf(fn.f, obj)
		if err != nil {
			return old, existed, &IndexError{Index: fn.name, Key: key, Err: err}
		}
		var ov []string
		if existed {
			if ov, err = indexValuesOf(fn.f, old); err != nil {
				return old, existed, &IndexError{Index: fn.name, Key: key, Err: err}
			}
		}
		vals = append(vals, indexValues{name: fn.name, idx: fn.idx, old: ov, new: nv})
	}
	changed := false
	for _, iv := range vals {
		changed = changed || !sameValues(iv.old, iv.new)
	}
	if changed {
		h := keyHash(key)
		id, hasID, stale := uint32(0), false, false
		if existed {
			id, hasID, stale = s.findIDLocked(h, key, vals, false)
		}
		if stale {
			// The old object was changed in place since it was indexed:
			// its recomputed values are not where the key is filed.
			// Unfile it everywhere and file it anew in every index.
			for _, idx := range s.indices {
				idx.purge(id, s.keys)
			}
		}
		for _, iv := range vals {
			if !stale && sameValues(iv.old, iv.new) {
				continue
			}
			idx := iv.idx
			if hasID && !stale {
				for _, v := range iv.old {
					idx.remove(v, h, id, s.keys)
				}
			}
			for _, v := range iv.new {
				if !hasID {
					id, hasID = s.keys.alloc(key, h), true
				}
				idx.add(v, h, id, s.keys, false)
			}
		}
		if hasID {
			s.keys.release(id)
		}
	}
	s.items.set(key, obj)
	return old, existed, nil
}

// findIDLocked returns the id of key, whose object had the old values in
// vals: probed in the set of one of them. If there are old values but none
// holds the key (the object was changed in place since it was indexed), or
// if search is set (an index function failed), every set is searched, and
// stale reports that it had to be.
func (s *Indexer[T]) findIDLocked(h uint32, key string, vals []indexValues, search bool) (id uint32, ok, stale bool) {
	for _, iv := range vals {
		for _, v := range iv.old {
			search = true
			if id, ok := iv.idx.lookup(v, h, key, s.keys); ok {
				return id, true, false
			}
		}
	}
	if !search {
		return 0, false, false
	}
	for _, idx := range s.indices {
		for _, vs := range idx {
			found, hit := uint32(0), false
			vs.each(func(id uint32) {
				if !hit && s.keys.key(id) == key {
					found, hit = id, true
				}
			})
			if hit {
				return found, true, true
			}
		}
	}
	return 0, false, false
}

type indexValues struct {
	name     string
	idx      index
	old, new []string
}

func (s *Indexer[T]) deleteLocked(key string) (old T, existed bool, err error) {
	s.settleLocked()
	old, existed = s.items.get(key)
	if !existed {
		return old, false, nil
	}
	var buf [4]indexValues
	vals := buf[:0]
	var failed []string
	for _, fn := range s.fns {
		ov, ferr := indexValuesOf(fn.f, old)
		if ferr != nil {
			failed = append(failed, fn.name)
			err = &IndexError{Index: fn.name, Key: key, Err: ferr}
			continue
		}
		vals = append(vals, indexValues{name: fn.name, idx: fn.idx, old: ov})
	}
	if len(s.indexers) > 0 {
		h := keyHash(key)
		if id, ok, stale := s.findIDLocked(h, key, vals, len(failed) > 0); ok {
			for _, iv := range vals {
				for _, v := range iv.old {
					iv.idx.remove(v, h, id, s.keys)
				}
			}
			// The object was indexed once, so its values were
			// computable; a failure now, or an object changed in place
			// since, must not leave a dangling key behind.
			if stale {
				failed = slices.Collect(maps.Keys(s.indices))
			}
			for _, name := range failed {
				s.indices[name].purge(id, s.keys)
			}
			s.keys.release(id)
		}
	}
	s.items.del(key) // may compact into a new base
	s.baseReplacedLocked()
	return old, true, err
}

func sameValues(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// loadEmpty makes base, a checkpoint's objects, the content of an empty
// indexer: the indexes are built aside in one pass and swapped in with it
// under the write lock, so readers see nothing or everything. It returns
// false, changing nothing, when the indexer is not empty. An object whose
// index function fails is left out (its position in base marked dead), its
// error in skipped (keyed by its key), as a listed object would be.
func (s *Indexer[T]) loadEmpty(base *itemBase[T]) (ok bool, skipped map[string]error) {
	for {
		s.mu.RLock()
		fns, empty := slices.Clone(s.fns), s.lenLocked() == 0
		s.mu.RUnlock()
		if !empty {
			return false, nil
		}
		kt := &keyTable{}
		indices := make(map[string]index, len(fns))
		for k := range fns {
			fns[k].idx = index{}
			indices[fns[k].name] = fns[k].idx
		}
		skipped = nil
		var left []int // positions of skipped objects
		if len(fns) > 0 {
			vals := make([][]string, len(fns))
			pos := 0
			for _, p := range base.pages {
				objs := p.objects()
				own := p.block != nil && p.block.codec != nil
			objects:
				for i := range p.n {
					key := p.key(i)
					for k, fn := range fns {
						v, err := indexValuesOf(fn.f, objs[i])
						if err != nil {
							if skipped == nil {
								skipped = map[string]error{}
							}
							skipped[key] = &IndexError{Index: fn.name, Key: key, Err: err}
							left = append(left, pos+i)
							continue objects
						}
						vals[k] = v
					}
					h, id, hasID := uint32(0), uint32(0), false
					for k, fn := range fns {
						for _, x := range vals[k] {
							if !hasID {
								h = keyHash(key)
								id, hasID = kt.alloc(key, h), true
							}
							fn.idx.add(x, h, id, kt, own)
						}
					}
					if hasID {
						kt.release(id)
					}
				}
				pos += p.n
			}
		}
		s.mu.Lock()
		if s.lenLocked() != 0 {
			s.mu.Unlock()
			return false, nil
		}
		if len(s.fns) != len(fns) {
			// AddIndexers ran meanwhile: build again with every index.
			s.mu.Unlock()
			continue
		}
		for _, pos := range left {
			// Not let go of: the caller may still be reading the pages.
			base.markDead(pos)
		}
		s.items = items[T]{m: map[string]T{}, base: base}
		s.baseReplacedLocked()
		s.indices, s.keys = indices, kt
		s.refreshFns()
		s.mu.Unlock()
		return true, skipped
	}
}
