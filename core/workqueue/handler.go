package workqueue

// KeyEnqueuer is the stock informer event handler of a controller, after
// controller-runtime's EnqueueRequestForObject: every add, update and
// delete adds the object's key to the queue, and the worker reads the
// current state back from the informer's cache. Changes to one key made
// before a worker takes it cost one reconcile (the queue deduplicates),
// and a key is never reconciled by two workers at once.
//
// It implements core.ResourceEventHandler[T] (OnAdd, OnUpdate, OnDelete)
// without this package importing core:
//
//	inf.AddEventHandler(workqueue.EnqueueKeys[App](q))
//
// Objects of the initial list, resync and relist replays (an update with
// an unchanged object) and deletes whose final state is unknown are all
// enqueued: each is a reason to reconcile. A controller that wants them
// behind live changes, or that queues something other than the key, writes
// its own three-line handler with AddWithOpts.
type KeyEnqueuer[T any] struct {
	q *Queue[string]
}

// EnqueueKeys returns the handler that adds every changed key to q.
func EnqueueKeys[T any](q *Queue[string]) KeyEnqueuer[T] { return KeyEnqueuer[T]{q: q} }

// OnAdd adds key.
func (e KeyEnqueuer[T]) OnAdd(key string, _ T, _ bool) { e.q.Add(key) }

// OnUpdate adds key.
func (e KeyEnqueuer[T]) OnUpdate(key string, _, _ T) { e.q.Add(key) }

// OnDelete adds key: the reconcile finds it gone from the cache and cleans
// up after it.
func (e KeyEnqueuer[T]) OnDelete(key string, _ T, _ bool) { e.q.Add(key) }
