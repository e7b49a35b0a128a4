package core

// Lister reads an informer's cache. It is a small value type; copy it
// freely.
type Lister[T any] struct{ indexer *Indexer[T] }

// NewLister returns a Lister over indexer.
func NewLister[T any](indexer *Indexer[T]) Lister[T] { return Lister[T]{indexer: indexer} }

// Get returns the object under key.
func (l Lister[T]) Get(key string) (T, bool) { return l.indexer.Get(key) }

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

// ByIndex returns the objects whose index function produced value.
func (l Lister[T]) ByIndex(indexName, value string) ([]T, error) {
	return l.indexer.ByIndex(indexName, value)
}
