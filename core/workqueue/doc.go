// Package workqueue is the queue controllers drain: client-go's
// util/workqueue, generic over the key type, with its semantics kept and
// its three queue types folded into one.
//
// Most programs need only New, EnqueueKeys (the informer handler that feeds
// the queue), and a worker loop of Get, AddRateLimited or Forget, and Done.
//
// An item added many times before a worker takes it is processed once. An
// item is never handed to two workers at once. An item added while it is
// being processed is handed out again after Done. Otherwise items come out
// in the order they were added, highest priority first. Get blocks until an
// item is ready or the queue is shut down.
//
// # For client-go users
//
// client-go builds a rate-limiting queue on a delaying queue on a plain
// queue, each with its own constructors. Here one Queue does all of it,
// configured by Options whose zero value is usable:
//
//	client-go                                   here
//	workqueue.NewTyped[K]()                     workqueue.New(workqueue.Options[K]{})
//	NewTypedDelayingQueueWithConfig(cfg)        New(Options[K]{...}), then AddAfter
//	NewTypedRateLimitingQueueWithConfig(rl, c)  New(Options[K]{RateLimiter: rl, ...})
//	TypedRateLimitingInterface[K]               *Queue[K]
//	TypedRateLimiter[K]                         RateLimiter[K]
//	TypedBucketRateLimiter[K]                   BucketRateLimiter[K] (with a Clock)
//	NewTypedItemExponentialFailureRateLimiter   NewItemExponentialFailureRateLimiter
//	NewTypedItemFastSlowRateLimiter             NewItemFastSlowRateLimiter
//	NewTypedMaxOfRateLimiter                    NewMaxOfRateLimiter
//	NewTypedWithMaxWaitRateLimiter              NewWithMaxWaitRateLimiter
//	DefaultTypedControllerRateLimiter[K]()      DefaultControllerRateLimiter[K](clock)
//	DefaultTypedItemBasedRateLimiter[K]()       DefaultItemBasedRateLimiter[K]()
//	MetricsProvider, SetProvider (global)       Options.MetricsProvider (per queue)
//	controller-runtime EnqueueRequestForObject  EnqueueKeys[T](q)
//	clock.WithTicker                            core/clock.Clock
//
// Add, Len, Get, Done, ShutDown, ShutDownWithDrain, ShuttingDown, AddAfter,
// AddRateLimited, Forget and NumRequeues keep their client-go meaning, with
// four deliberate differences: Done for an item that is not being
// processed does nothing; ShutDownWithDrain also waits for items still
// queued, not only for those being processed; delayed items already due at
// shutdown are queued rather than dropped with the rest; and metrics are
// emitted whenever a provider is given, named or not.
//
// # Additions
//
// Priorities, after controller-runtime's priority queue: AddWithOpts takes a
// Priority (higher first, equal in FIFO order), a delay and a rate-limited
// flag. Re-adding a queued item with a higher priority moves it up; it is
// still processed once and never concurrently with itself.
//
// GetContext is Get that also returns when a context ends. Take is
// GetContext returning a Taken, whose Done goes straight to the item's
// state instead of hashing the item and probing the index: on a queue of
// many keys that lookup is most of a Done (package controller's workers
// use it; BenchmarkController in bench/ measures the difference).
//
// EnqueueKeys is the stock handler between an informer and a queue, after
// controller-runtime's EnqueueRequestForObject: every add, update and
// delete adds the key (see ExampleEnqueueKeys).
//
// # Cost
//
// Steady Add/Get/Done does not allocate: the ready queue is a ring buffer
// per priority, delayed items sit by value in a hand-written heap, and key
// state lives in never-moving chunks behind open-addressing indexes hashed
// before any lock is taken. A key's state stays after its Done, ready for
// its next Add, until idle states could make up half of all states and the
// queue holds more than 1,024 states beyond what its last sweep left; then
// they are swept, at a cost constant per Add. So a queue that has seen at
// most about a thousand keys never sweeps, and keeps the states of keys it
// no longer sees (a few dozen bytes each) until it does.
//
// Key state is split into 16 shards by hash, each with its own lock; one
// queue lock guards only the ready order and the delays. An Add of an item
// already queued or being processed (most Adds, in a controller whose
// informer reports a key many times before a worker takes it) and a Done
// that queues nothing take only their shard's lock, so producers and
// workers queue behind each other only to push and to pop. AddAfter with a
// positive delay costs a heap push under the queue lock, with no channel
// send to a goroutine; with d <= 0 it is an Add. Indexes and rings keep
// their high-water size, as Go maps do.
//
// # Time
//
// Every delay, the default rate limiter's token bucket and the metrics take
// their time from Options.Clock. Delayed items are moved into the queue by
// whichever call looks at the queue first after their time has come (Add
// and Done check the earliest ready time before their lock-light paths),
// and by a goroutine that wakes blocked workers, so with a fake clock what
// Len and Get see right after a Step depends only on the clock.
package workqueue
