package core

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// IndexFunc computes the index values of an object. One object may have
// several values (a user in several groups); none is fine too.
type IndexFunc[T any] func(obj T) ([]string, error)

// Indexers names index functions.
type Indexers[T any] map[string]IndexFunc[T]

// KeyLister is what a queue needs from the cache it feeds: the object
// under a key and a walk over what it holds. It lets Replace find keys that
// vanished and Resync replay what is cached. *Indexer[T] implements it.
type KeyLister[T any] interface {
	Get(key string) (T, bool)
	// Range calls f for each key and object until f returns false.
	Range(f func(key string, obj T) bool)
}

// ErrUnknownIndex is matched by the error of a lookup in an index that
// does not exist.
var ErrUnknownIndex = errors.New("dbinformer: unknown index")

func unknownIndex(name string) error { return fmt.Errorf("%w %q", ErrUnknownIndex, name) }

// Indexer is a thread-safe map from key to object with secondary indexes,
// client-go's ThreadSafeStore and Indexer in one concrete generic type.
// Readers run concurrently with one another and with nothing else; the
// informer applies each popped batch under one write lock, so a reader sees a
// source transaction either entirely or not at all.
//
// Objects are stored as given, not copied: treat what Get and List return
// as read-only, exactly as with client-go's caches.
//
// An informer's Indexer is written by the informer only; read it through a
// Lister. Writing to it behind the informer's back makes the cache
// disagree with the source.
type Indexer[T any] struct {
	mu       sync.RWMutex
	items    map[string]T
	indexers Indexers[T]
	// indices[name][value] is the set of keys whose object has that value.
	indices map[string]map[string]map[string]struct{}
}

var _ KeyLister[int] = (*Indexer[int])(nil)

// NewIndexer returns an empty indexer with the given index functions (nil
// means none).
func NewIndexer[T any](indexers Indexers[T]) *Indexer[T] {
	s := &Indexer[T]{
		items:    make(map[string]T),
		indexers: Indexers[T]{},
		indices:  map[string]map[string]map[string]struct{}{},
	}
	for name, f := range indexers {
		s.indexers[name] = f
		s.indices[name] = map[string]map[string]struct{}{}
	}
	return s
}

// Add stores obj under key, replacing what was there (client-go's Add and
// Update). An index function error (or panic) leaves the store unchanged.
func (s *Indexer[T]) Add(key string, obj T) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _, err := s.putLocked(key, obj)
	return err
}

// Delete removes key. Deleting a missing key is not an error.
func (s *Indexer[T]) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _, err := s.deleteLocked(key)
	return err
}

// Get returns the object under key.
func (s *Indexer[T]) Get(key string) (T, bool) {
	s.mu.RLock()
	obj, ok := s.items[key]
	s.mu.RUnlock()
	return obj, ok
}

// Len returns the number of keys.
func (s *Indexer[T]) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.items)
}

// List returns every object, in no particular order.
func (s *Indexer[T]) List() []T {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]T, 0, len(s.items))
	for _, obj := range s.items {
		out = append(out, obj)
	}
	return out
}

// ListKeys returns every key, in no particular order.
func (s *Indexer[T]) ListKeys() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.items))
	for key := range s.items {
		out = append(out, key)
	}
	return out
}

// Range calls f for each key and object under the read lock until f
// returns false. f must not call back into the indexer's write methods.
// It lets a caller filter without copying the whole cache.
func (s *Indexer[T]) Range(f func(key string, obj T) bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, v := range s.items {
		if !f(k, v) {
			return
		}
	}
}

// indexTx is the write access update gives: every call happens under
// the indexer's write lock.
type indexTx[T any] struct{ s *Indexer[T] }

// get returns the object under key.
func (tx indexTx[T]) get(key string) (T, bool) {
	obj, ok := tx.s.items[key]
	return obj, ok
}

// put stores obj under key and returns what was there. On an index error
// nothing changes.
func (tx indexTx[T]) put(key string, obj T) (old T, existed bool, err error) {
	return tx.s.putLocked(key, obj)
}

// delete removes key and returns what was there.
func (tx indexTx[T]) delete(key string) (old T, existed bool, err error) {
	return tx.s.deleteLocked(key)
}

// update runs f under the write lock: readers see everything f does or
// nothing of it.
func (s *Indexer[T]) update(f func(tx indexTx[T])) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(indexTx[T]{s})
}

// snapshot runs f under the read lock with the current content; f must not
// retain the map or write to the indexer.
func (s *Indexer[T]) snapshot(f func(items map[string]T)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	f(s.items)
}

// replace swaps the whole content for items (key → object) and rebuilds
// the indexes. If an index function fails, the previous content stays and
// the error names the key.
func (s *Indexer[T]) replace(items map[string]T) error {
	indices := make(map[string]map[string]map[string]struct{}, len(s.indexers))
	s.mu.RLock()
	indexers := s.indexers
	s.mu.RUnlock()
	for name := range indexers {
		indices[name] = map[string]map[string]struct{}{}
	}
	for key, obj := range items {
		for name, f := range indexers {
			vals, err := indexValuesOf(f, obj)
			if err != nil {
				return &IndexError{Index: name, Key: key, Err: err}
			}
			for _, v := range vals {
				addToIndex(indices[name], v, key)
			}
		}
	}
	copied := make(map[string]T, len(items))
	for k, v := range items {
		copied[k] = v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items = copied
	s.indices = indices
	return nil
}

// indexValuesOf runs an index function, turning a panic into an error: one
// object that crashes an index function must not take the informer down.
func indexValuesOf[T any](f IndexFunc[T], obj T) (vals []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("index function panicked: %v", r)
		}
	}()
	return f(obj)
}

// IndexError reports an index function that failed for a key.
type IndexError struct {
	Index string
	Key   string
	Err   error
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("dbinformer: index %q failed for key %q: %v", e.Index, e.Key, e.Err)
}

func (e *IndexError) Unwrap() error { return e.Err }

// Index returns the objects that share an index value with obj.
func (s *Indexer[T]) Index(indexName string, obj T) ([]T, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	f, ok := s.indexers[indexName]
	if !ok {
		return nil, unknownIndex(indexName)
	}
	vals, err := indexValuesOf(f, obj)
	if err != nil {
		return nil, &IndexError{Index: indexName, Err: err}
	}
	idx := s.indices[indexName]
	var keys map[string]struct{}
	if len(vals) == 1 {
		keys = idx[vals[0]]
	} else {
		keys = map[string]struct{}{}
		for _, v := range vals {
			for k := range idx[v] {
				keys[k] = struct{}{}
			}
		}
	}
	out := make([]T, 0, len(keys))
	for k := range keys {
		out = append(out, s.items[k])
	}
	return out, nil
}

// ByIndex returns the objects whose index function produced value.
func (s *Indexer[T]) ByIndex(indexName, value string) ([]T, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	idx, ok := s.indices[indexName]
	if !ok {
		return nil, unknownIndex(indexName)
	}
	set := idx[value]
	out := make([]T, 0, len(set))
	for k := range set {
		out = append(out, s.items[k])
	}
	return out, nil
}

// IndexKeys returns the keys whose index function produced value, sorted.
func (s *Indexer[T]) IndexKeys(indexName, value string) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	idx, ok := s.indices[indexName]
	if !ok {
		return nil, unknownIndex(indexName)
	}
	set := idx[value]
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

// ListIndexFuncValues returns every value an index currently holds, sorted.
// An unknown index gives nil.
func (s *Indexer[T]) ListIndexFuncValues(indexName string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	idx := s.indices[indexName]
	out := make([]string, 0, len(idx))
	for v := range idx {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// GetIndexers returns a copy of the index functions.
func (s *Indexer[T]) GetIndexers() Indexers[T] {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(Indexers[T], len(s.indexers))
	for k, v := range s.indexers {
		out[k] = v
	}
	return out
}

// AddIndexers adds index functions and indexes what is already stored. A
// name that exists already is an error and nothing is added. Unlike
// client-go this works on a non-empty store too, at the cost of one pass.
func (s *Indexer[T]) AddIndexers(newIndexers Indexers[T]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range newIndexers {
		if _, ok := s.indexers[name]; ok {
			return fmt.Errorf("dbinformer: indexer %q already exists", name)
		}
	}
	built := make(map[string]map[string]map[string]struct{}, len(newIndexers))
	for name, f := range newIndexers {
		idx := map[string]map[string]struct{}{}
		for key, obj := range s.items {
			vals, err := indexValuesOf(f, obj)
			if err != nil {
				return &IndexError{Index: name, Key: key, Err: err}
			}
			for _, v := range vals {
				addToIndex(idx, v, key)
			}
		}
		built[name] = idx
	}
	for name, f := range newIndexers {
		s.indexers[name] = f
		s.indices[name] = built[name]
	}
	return nil
}

// putLocked stores obj and returns the previous object. Every index value
// is computed before anything changes, so a failing index function leaves
// the store as it was.
func (s *Indexer[T]) putLocked(key string, obj T) (old T, existed bool, err error) {
	old, existed = s.items[key]
	if len(s.indexers) == 0 {
		s.items[key] = obj
		return old, existed, nil
	}
	// Up to four indexes keep their values on the stack.
	var buf [4]indexValues
	vals := buf[:0]
	for name, f := range s.indexers {
		nv, err := indexValuesOf(f, obj)
		if err != nil {
			return old, existed, &IndexError{Index: name, Key: key, Err: err}
		}
		var ov []string
		if existed {
			if ov, err = indexValuesOf(f, old); err != nil {
				return old, existed, &IndexError{Index: name, Key: key, Err: err}
			}
		}
		vals = append(vals, indexValues{name: name, old: ov, new: nv})
	}
	for _, iv := range vals {
		if sameValues(iv.old, iv.new) {
			continue
		}
		idx := s.indices[iv.name]
		for _, v := range iv.old {
			removeFromIndex(idx, v, key)
		}
		for _, v := range iv.new {
			addToIndex(idx, v, key)
		}
	}
	s.items[key] = obj
	return old, existed, nil
}

type indexValues struct {
	name     string
	old, new []string
}

func (s *Indexer[T]) deleteLocked(key string) (old T, existed bool, err error) {
	old, existed = s.items[key]
	if !existed {
		return old, false, nil
	}
	for name, f := range s.indexers {
		vals, ferr := indexValuesOf(f, old)
		if ferr != nil {
			// The object was indexed once, so its values were computable;
			// a failure now must not leave a dangling key behind.
			for v, set := range s.indices[name] {
				if _, ok := set[key]; ok {
					removeFromIndex(s.indices[name], v, key)
				}
			}
			err = &IndexError{Index: name, Key: key, Err: ferr}
			continue
		}
		for _, v := range vals {
			removeFromIndex(s.indices[name], v, key)
		}
	}
	delete(s.items, key)
	return old, true, err
}

func addToIndex(idx map[string]map[string]struct{}, value, key string) {
	set := idx[value]
	if set == nil {
		set = map[string]struct{}{}
		idx[value] = set
	}
	set[key] = struct{}{}
}

func removeFromIndex(idx map[string]map[string]struct{}, value, key string) {
	set := idx[value]
	if set == nil {
		return
	}
	delete(set, key)
	// Drop empty sets so that ListIndexFuncValues only names live values
	// and memory does not grow with churn (client-go #84959).
	if len(set) == 0 {
		delete(idx, value)
	}
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
