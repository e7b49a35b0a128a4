package core

// Lister reads an informer's cache: everything a program needs to read,
// nothing that writes. It is a small value type; copy it freely. Obtain it
// from SharedIndexInformer.Lister or NewLister; the zero Lister has no
// cache and panics when used.
type Lister[T any] struct{ indexer *Indexer[T] }

// NewLister returns a Lister over indexer.
func NewLister[T any](indexer *Indexer[T]) Lister[T] { return Lister[T]{indexer: indexer} }

// Get returns the object under key.
func (l Lister[T]) Get(key string) (T, bool) { return l.indexer.Get(key) }

// Len returns the number of cached objects.
func (l Lister[T]) Len() int { return l.indexer.Len() }

// List returns the objects for which keep returns true (all of them when
// keep is nil), in no particular order. keep runs under the cache's read
// lock: it must be quick and must not write to the cache.
func (l Lister[T]) List(keep func(T) bool) []T {
	if keep == nil {
		return l.indexer.List()
	}
	var out []T
	l.indexer.Range(func(_ string, obj T) bool {
		if keep(obj) {
			out = append(out, obj)
		}
		return true
	})
	return out
}

// ByIndex returns the objects whose index function produced value. An
// unknown index is an error matching ErrUnknownIndex.
func (l Lister[T]) ByIndex(indexName, value string) ([]T, error) {
	return l.indexer.ByIndex(indexName, value)
}

// Index returns the objects that share an index value with obj.
func (l Lister[T]) Index(indexName string, obj T) ([]T, error) {
	return l.indexer.Index(indexName, obj)
}

// IndexKeys returns the keys whose index function produced value, sorted.
func (l Lister[T]) IndexKeys(indexName, value string) ([]string, error) {
	return l.indexer.IndexKeys(indexName, value)
}

// ListIndexFuncValues returns every value an index currently holds,
// sorted; nil for an unknown index.
func (l Lister[T]) ListIndexFuncValues(indexName string) []string {
	return l.indexer.ListIndexFuncValues(indexName)
}
