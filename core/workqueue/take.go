package workqueue

import "context"

// Take is GetContext returning the item as a Taken, whose Done finds the
// item's state without hashing the item and probing the index again: on a
// queue of many keys that lookup is the larger part of a Done. Worker loops
// that own the whole Get-process-Done cycle (package controller's) use it.
func (q *Queue[K]) Take(ctx context.Context) (Taken[K], error) {
	item, s, err := q.getContext(ctx)
	if err != nil {
		return Taken[K]{}, err
	}
	return Taken[K]{Item: item, q: q, ref: s.idx + 1, shard: s.shard}, nil
}

// Taken is an item handed out by Take, being processed until its Done.
type Taken[K comparable] struct {
	Item  K
	q     *Queue[K]
	ref   int32 // the item's state index + 1; 0 in the zero Taken
	shard int32
}

// Done is Queue.Done(t.Item) without the lookup. Like Queue.Done it does
// nothing for an item no longer being processed, and nothing for the zero
// Taken.
func (t Taken[K]) Done() {
	if t.ref == 0 {
		return
	}
	t.q.done(int(t.shard), t.Item, 0, t.ref-1)
}
