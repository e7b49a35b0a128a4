package core

import (
	"errors"
	"fmt"
	"iter"
	"sort"
	"sync"

	"github.com/dbinformer/dbinformer/core/internal/inplace"
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
	items    items[T]
	indexers Indexers[T]
	// indices[name][value] is the set of ids of keys whose object has
	// that value; keys names the ids (see indexset.go).
	indices map[string]index
	keys    *keyTable
	// fns is indexers and indices in one slice, for the write path: a
	// slice walk instead of a map iteration and a map lookup per index and
	// write.
	fns []indexFn[T]
	// staged is an initial list not yet filed (stage.go); expect is the
	// list's estimate of its size (reserve).
	staged *stagedItems[T]
	expect int
	// seen is the running audit's set of keys, which knows positions of
	// the base (auditseen.go); nil when no audit runs.
	seen *auditSeen[T]
	// stageBits and stageMinBase shape staging (stagedItems); tests
	// make them small.
	stageBits    uint
	stageMinBase int
}

type indexFn[T any] struct {
	name string
	f    IndexFunc[T]
	idx  index
}

// refreshFns rebuilds fns from indexers and indices.
func (s *Indexer[T]) refreshFns() {
	s.fns = s.fns[:0]
	for name, f := range s.indexers {
		s.fns = append(s.fns, indexFn[T]{name: name, f: f, idx: s.indices[name]})
	}
}

var _ KeyLister[int] = (*Indexer[int])(nil)

// NewIndexer returns an empty indexer with the given index functions (nil
// means none).
func NewIndexer[T any](indexers Indexers[T]) *Indexer[T] {
	s := &Indexer[T]{
		stageBits:    stagePageBits,
		stageMinBase: minStagedBase,
		items:        newItems[T](0),
		indexers:     Indexers[T]{},
		indices:      map[string]index{},
		keys:         &keyTable{},
	}
	for name, f := range indexers {
		s.indexers[name] = f
		s.indices[name] = index{}
	}
	s.refreshFns()
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
	s.rlock()
	obj, ok := s.items.get(key)
	s.mu.RUnlock()
	return obj, ok
}

// Len returns the number of keys.
func (s *Indexer[T]) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lenLocked()
}

// List returns every object, in no particular order.
func (s *Indexer[T]) List() []T {
	s.rlock()
	defer s.mu.RUnlock()
	out := make([]T, 0, s.items.len())
	for _, obj := range s.items.all {
		out = append(out, obj)
	}
	return out
}

// ListKeys returns every key, in no particular order.
func (s *Indexer[T]) ListKeys() []string {
	s.rlock()
	defer s.mu.RUnlock()
	out := make([]string, 0, s.items.len())
	for key := range s.items.all {
		out = append(out, key)
	}
	return out
}

// Range calls f for each key and object under the read lock until f
// returns false. f must not call back into the indexer's write methods.
// It lets a caller filter without copying the whole cache.
func (s *Indexer[T]) Range(f func(key string, obj T) bool) {
	s.rlock()
	defer s.mu.RUnlock()
	for k, v := range s.items.all {
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
	tx.s.settleLocked()
	return tx.s.items.get(key)
}

// getOwned is get for an object whose parts the caller keeps (see
// items.getOwned).
func (tx indexTx[T]) getOwned(key string) (T, bool) {
	tx.s.settleLocked()
	return tx.s.items.getOwned(key)
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

// keysNow returns every key, without decoding any object, and where it
// was: its position in base, or -1 (in the map).
func (s *Indexer[T]) keysNow() (keys []string, where []int32, base *itemBase[T]) {
	s.rlock()
	defer s.mu.RUnlock()
	n := s.items.len()
	keys, where = make([]string, 0, n), make([]int32, 0, n)
	for k, pos := range s.items.keys {
		keys, where = append(keys, k), append(where, int32(pos))
	}
	return keys, where, s.items.base
}

// getAll fills dst with the objects of keys, which keysNow returned with
// where and base, under one read lock, and runs also (if set) under the
// same lock; false if one of the keys is not there. While the base is the
// same, a key's object is read at its position, in order, without a
// lookup.
func (s *Indexer[T]) getAll(keys []string, where []int32, base *itemBase[T], dst []T, also func()) bool {
	s.rlock()
	defer s.mu.RUnlock()
	if also != nil {
		defer also()
	}
	same := base != nil && s.items.base == base
	var d inplace.Decoder[T]
	for n, k := range keys {
		if pos := int(where[n]); same && pos >= 0 {
			if base.isDead(pos) {
				return false
			}
			// A lazily loaded page stays lazy: the caller (a
			// checkpoint's write) holds dst only while it encodes it.
			dst[n] = base.peekObj(pos, &d)
			continue
		}
		obj, ok := s.items.get(k)
		if !ok {
			return false
		}
		dst[n] = obj
	}
	return true
}

// snapshot runs f under the read lock with the number of objects and a
// walk over them; f must not retain the walk or write to the indexer.
func (s *Indexer[T]) snapshot(f func(n int, all iter.Seq2[string, T])) {
	s.rlock()
	defer s.mu.RUnlock()
	f(s.items.len(), s.items.all)
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
	s.rlock()
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
	if len(vals) == 1 {
		return s.objectsLocked(idx, vals[0]), nil
	}
	ids := map[uint32]struct{}{}
	for _, v := range vals {
		if vs, ok := idx[v]; ok {
			vs.each(func(id uint32) { ids[id] = struct{}{} })
		}
	}
	out := make([]T, 0, len(ids))
	for id := range ids {
		out = append(out, s.items.at(s.keys.key(id)))
	}
	return out, nil
}

// ByIndex returns the objects whose index function produced value.
func (s *Indexer[T]) ByIndex(indexName, value string) ([]T, error) {
	s.rlock()
	defer s.mu.RUnlock()
	idx, ok := s.indices[indexName]
	if !ok {
		return nil, unknownIndex(indexName)
	}
	return s.objectsLocked(idx, value), nil
}

// objectsLocked returns the objects under one value of idx.
func (s *Indexer[T]) objectsLocked(idx index, value string) []T {
	vs, ok := idx[value]
	if !ok {
		return []T{}
	}
	if vs.set == nil {
		return []T{s.items.at(s.keys.key(vs.one - 1))}
	}
	out := make([]T, 0, vs.set.n)
	for _, v := range vs.set.slots {
		if v != emptySlot && v != tombSlot {
			out = append(out, s.items.at(s.keys.key(v-1)))
		}
	}
	return out
}

// IndexKeys returns the keys whose index function produced value, sorted.
func (s *Indexer[T]) IndexKeys(indexName, value string) ([]string, error) {
	s.rlock()
	defer s.mu.RUnlock()
	idx, ok := s.indices[indexName]
	if !ok {
		return nil, unknownIndex(indexName)
	}
	vs, ok := idx[value]
	if !ok {
		return []string{}, nil
	}
	out := make([]string, 0, vs.len())
	vs.each(func(id uint32) { out = append(out, s.keys.key(id)) })
	sort.Strings(out)
	return out, nil
}

// ListIndexFuncValues returns every value an index currently holds, sorted.
// An unknown index gives nil.
func (s *Indexer[T]) ListIndexFuncValues(indexName string) []string {
	s.rlock()
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
	s.settleLocked()
	for name := range newIndexers {
		if _, ok := s.indexers[name]; ok {
			return fmt.Errorf("dbinformer: indexer %q already exists", name)
		}
	}
	if b := s.items.base; b != nil {
		// The indexes keep keys and values, which must not share a
		// loaded checkpoint's blocks.
		b.unpinAll()
	}
	// Every value is computed before anything changes, so that a failing
	// function leaves the indexer as it was.
	type filed struct {
		key  string
		vals []string
	}
	computed := make(map[string][]filed, len(newIndexers))
	for name, f := range newIndexers {
		for key, obj := range s.items.all {
			vals, err := indexValuesOf(f, obj)
			if err != nil {
				return &IndexError{Index: name, Key: key, Err: err}
			}
			if len(vals) > 0 {
				computed[name] = append(computed[name], filed{key, vals})
			}
		}
	}
	ids := s.keys.ids()
	for name, f := range newIndexers {
		idx := index{}
		for _, fl := range computed[name] {
			h := keyHash(fl.key)
			id, ok := ids[fl.key]
			if !ok {
				id = s.keys.alloc(fl.key, h)
				ids[fl.key] = id
			}
			for _, v := range fl.vals {
				idx.add(v, h, id, s.keys, false)
			}
		}
		s.indexers[name] = f
		s.indices[name] = idx
	}
	s.refreshFns()
	return nil
}
