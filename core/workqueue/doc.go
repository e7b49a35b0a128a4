// Package workqueue is the queue controllers drain: client-go's
// util/workqueue, generic over the key type, with its semantics kept and
// its three queue types folded into one.
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
// GetContext is Get that also returns when a context ends.
//
// # Cost
//
// Steady Add/Get/Done does not allocate: the ready queue is a ring buffer
// per priority, delayed items sit by value in a hand-written heap, and key
// state lives in a slab behind an open-addressing index hashed before the
// lock is taken. AddAfter with a positive delay costs a heap push under the
// lock, with no channel send to a goroutine; with d <= 0 it is an Add. The
// index, slab and rings keep their high-water size, as Go maps do.
//
// # Time
//
// Every delay, the default rate limiter's token bucket and the metrics take
// their time from Options.Clock. Delayed items are moved into the queue by
// whichever call looks at the queue first after their time has come, and
// by a goroutine that wakes blocked workers, so with a fake clock what Len
// and Get see right after a Step depends only on the clock.
package workqueue
