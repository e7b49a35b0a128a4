package workqueue

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
)

// ErrShutDown is returned by GetContext once the queue is shut down and
// holds nothing more to hand out.
var ErrShutDown = errors.New("workqueue: shut down")

// Options configures New. The zero value is a working unnamed queue on the
// wall clock, without metrics, retrying with DefaultControllerRateLimiter;
// every field's zero value means its default.
type Options[K comparable] struct {
	// Name is passed to every MetricsProvider constructor.
	Name string
	// Clock drives delays, the default rate limiter and metrics; nil means
	// the wall clock.
	Clock clock.Clock
	// MetricsProvider receives the queue's metrics; nil means none, and then
	// no metrics goroutine is started.
	MetricsProvider MetricsProvider
	// RateLimiter decides AddRateLimited's delays; nil means
	// DefaultControllerRateLimiter on Clock.
	RateLimiter RateLimiter[K]
}

// AddOpts qualifies AddWithOpts, as in controller-runtime's priority queue.
type AddOpts struct {
	// After delays the add, like AddAfter.
	After time.Duration
	// RateLimited delays the add by the rate limiter's answer too; with After
	// set as well, the later of the two wins.
	RateLimited bool
	// Priority: higher is taken first; the default is 0 and negative values
	// are allowed.
	Priority int
}

// shardBits: 16 shards. Only GOMAXPROCS goroutines run at once, so a
// handful of shards already makes two Adds on one shard rare; more would
// only cost memory in small queues.
const (
	shardBits = 4
	numShards = 1 << shardBits
)

func shardIndex(h uint64) int { return int(h >> (64 - shardBits)) }

// noDue is nextDue when nothing is delayed.
const noDue = math.MaxInt64

// Queue is a work queue of keys: client-go's workqueue, delaying queue and
// rate-limiting queue in one type, plus priorities.
//
// An item added several times before a worker takes it is processed once; an
// item is never handed to two workers at once; an item added while being
// processed is handed out again after Done. Items come out highest priority
// first and, within a priority, in the order they were added.
type Queue[K comparable] struct {
	// mu guards the ready order, the delay heap and the fields up to the
	// padding. Key state is in the shards, under their own locks.
	mu   sync.Mutex
	cond sync.Cond
	// levels holds one FIFO per priority in use, highest first. There are
	// normally one or two, so a linear scan beats any map.
	levels      []level
	queued      int // slots across levels, stale ones (dups) included
	seq         uint64
	signals     int // pushes not yet signalled; see unlock
	waiting     waitHeap
	staleWaits  int
	loopStarted bool
	drain       bool
	// State allocation (see newStateLocked and sweepLocked). A chunk's
	// slice header is written once, under mu, before any index to it is
	// handed out.
	table    stateTable[K]
	free     []int32
	states   int // allocated and not freed
	sweepAt  int
	slack    int // sweepSlack; tests lower it to sweep often
	sweepDue bool
	// dups counts the stale slots still queued (an item re-added at a
	// higher priority leaves its old slot behind).
	dups int
	// taken counts the items Get ever marked processing; with each shard's
	// finished count it gives the items being processed (see
	// processingLocked).
	taken int
	_     [64]byte

	// Read without mu; the atomics are only written under mu.
	shutdown atomic.Bool
	draining atomic.Bool  // drain, for Done
	nextDue  atomic.Int64 // ready time of the delay heap's top, or noDue
	seed     maphash.Seed
	clock    clock.Clock
	epoch    time.Time
	limiter  RateLimiter[K]
	metrics  *queueMetrics[K]
	kick     chan struct{}
	stop     chan struct{}
	wg       sync.WaitGroup
	// noTryLock makes every TryLock of mu fail, so that tests run the
	// fallback paths.
	noTryLock bool

	shards [numShards]shard[K]
}

// New returns a running queue. Call ShutDown (or ShutDownWithDrain) when
// done with it: it stops the queue's goroutines. New does no I/O.
func New[K comparable](opts Options[K]) *Queue[K] {
	c := clock.Or(opts.Clock)
	q := &Queue[K]{
		seed:    maphash.MakeSeed(),
		kick:    make(chan struct{}, 1),
		sweepAt: sweepSlack,
		slack:   sweepSlack,
		stop:    make(chan struct{}),
		clock:   c,
		epoch:   c.Now(),
		limiter: opts.RateLimiter,
		metrics: newQueueMetrics[K](opts.MetricsProvider, opts.Name, c),
	}
	q.cond.L = &q.mu
	q.nextDue.Store(noDue)
	if q.limiter == nil {
		q.limiter = DefaultControllerRateLimiter[K](c)
	}
	if q.metrics != nil {
		// Created here rather than in the goroutine so that a test holding a
		// fake clock can step it as soon as New returns.
		t := c.NewTicker(UnfinishedWorkUpdatePeriod)
		q.wg.Add(1)
		go q.metricsLoop(t)
	}
	return q
}

// Add marks item as needing processing. After ShutDown it does nothing.
func (q *Queue[K]) Add(item K) { q.add(item, 0) }

// AddAfter adds item once d has passed; d <= 0 adds it now. An item already
// waiting keeps the earlier of its two ready times. Each call counts as a
// retry in the metrics.
func (q *Queue[K]) AddAfter(item K, d time.Duration) { q.addAfter(item, d, 0) }

// AddRateLimited adds item when the rate limiter says it may be retried.
func (q *Queue[K]) AddRateLimited(item K) { q.addAfter(item, q.limiter.When(item), 0) }

// AddWithOpts adds items with a priority, a delay, rate limiting or any mix.
// Re-adding a queued item with a higher priority moves it to the back of
// that priority; an equal or lower one leaves it where it is. An item being
// processed keeps the highest priority it was re-added with for when it is
// queued again at Done.
func (q *Queue[K]) AddWithOpts(opts AddOpts, items ...K) {
	for _, item := range items {
		if opts.After == 0 && !opts.RateLimited {
			q.add(item, opts.Priority)
			continue
		}
		d := opts.After
		if opts.RateLimited {
			d = max(d, q.limiter.When(item))
		}
		q.addAfter(item, d, opts.Priority)
	}
}

// Forget tells the rate limiter that item is done being retried, after
// success or after giving up. It does not replace Done.
func (q *Queue[K]) Forget(item K) { q.limiter.Forget(item) }

// NumRequeues is how many times the rate limiter has delayed item since it
// was last forgotten.
func (q *Queue[K]) NumRequeues(item K) int { return q.limiter.NumRequeues(item) }

// Len is the number of items ready to be taken. It is for information only:
// it can change before the caller acts on it.
func (q *Queue[K]) Len() int {
	q.mu.Lock()
	q.promoteLocked()
	n := q.queued - q.dups
	q.unlock()
	return n
}

// Get blocks until an item is ready and returns it; the caller must call
// Done with it. shutdown is true, and item the zero value, once the queue is
// shut down and empty. Items queued before ShutDown are still handed out.
func (q *Queue[K]) Get() (item K, shutdown bool) {
	item, _, err := q.getContext(context.Background())
	return item, err != nil
}

// GetContext is Get that also gives up when ctx is done, returning
// ctx.Err(); it returns ErrShutDown where Get reports shutdown.
func (q *Queue[K]) GetContext(ctx context.Context) (K, error) {
	item, _, err := q.getContext(ctx)
	return item, err
}

func (q *Queue[K]) getContext(ctx context.Context) (K, slot, error) {
	var zero K
	if ctx.Done() == nil {
		for {
			q.mu.Lock()
			q.drainedLocked()
			q.promoteLocked()
			for q.queued == 0 && !q.shutdown.Load() {
				q.cond.Wait()
			}
			if q.queued == 0 {
				q.unlock()
				return zero, slot{}, ErrShutDown
			}
			s := q.popLocked()
			item, ok := q.takeLocked(s)
			q.unlock()
			if ok {
				return item, s, nil
			}
		}
	}
	// The wake-up at ctx's end is registered only before a wait: a worker
	// that finds an item queued pays no registration (context.AfterFunc
	// allocates and takes ctx's lock, shared by every worker; it was a
	// sixth of a busy worker's time). The broadcast takes the lock, so it
	// cannot fall between a waiter's check of ctx.Err and its Wait; the
	// callback always runs on a goroutine of its own, so registering it
	// while holding the lock cannot deadlock.
	var stop func() bool
	for {
		q.mu.Lock()
		q.drainedLocked()
		q.promoteLocked()
		for q.queued == 0 && !q.shutdown.Load() && ctx.Err() == nil {
			if stop == nil {
				stop = context.AfterFunc(ctx, func() {
					q.mu.Lock()
					q.cond.Broadcast()
					q.mu.Unlock()
				})
				continue // ctx may have ended before the registration
			}
			q.cond.Wait()
		}
		if err := ctx.Err(); err != nil {
			q.unlock()
			unregister(stop)
			return zero, slot{}, err
		}
		if q.queued == 0 {
			q.unlock()
			unregister(stop)
			return zero, slot{}, ErrShutDown
		}
		s := q.popLocked()
		item, ok := q.takeLocked(s)
		q.unlock()
		if ok {
			unregister(stop)
			return item, s, nil
		}
	}
}

// unregister undoes a context.AfterFunc registration, if one was made.
func unregister(stop func() bool) {
	if stop != nil {
		stop()
	}
}

// Done marks item as processed. If it was added again meanwhile it is
// queued again. Done for an item that is not being processed does nothing
// (client-go would queue a duplicate).
func (q *Queue[K]) Done(item K) {
	h := q.hash(item)
	q.done(shardIndex(h), item, h, -1)
}

// done is Done of item in shard s, whose state index is idx (Taken's), or
// is looked up by its hash h when idx is -1.
func (q *Queue[K]) done(s int, item K, h uint64, idx int32) {
	sh := &q.shards[s]
	// With a delayed item due, take the slow path, which promotes first:
	// promotion may mark this very item dirty.
	if !q.due() {
		sh.mu.Lock()
		idx := q.inProcessLocked(sh, h, item, idx)
		if idx < 0 {
			sh.mu.Unlock()
			return
		}
		st := q.state(idx)
		// Nothing to queue again: the shard's lock is enough. While
		// draining, the slow path tells the drainer when the last item is
		// done; ShutDownWithDrain sets draining before it counts the shards'
		// processing, under their locks, so no Done slips between the two.
		if st.flags&fDirty == 0 && !q.draining.Load() {
			q.doneStateLocked(sh, s, item, idx)
			sh.mu.Unlock()
			return
		}
		if q.tryLock() {
			q.doneStateLocked(sh, s, item, idx)
			sh.mu.Unlock()
			q.drainedLocked()
			q.unlock()
			return
		}
		sh.mu.Unlock()
	}
	q.mu.Lock()
	q.promoteLocked()
	sh.mu.Lock()
	if idx := q.inProcessLocked(sh, h, item, idx); idx >= 0 {
		q.doneStateLocked(sh, s, item, idx)
	}
	sh.mu.Unlock()
	q.drainedLocked()
	q.unlock()
}

// inProcessLocked is item's state index if item is being processed, else
// -1. idx ≥ 0 is the index Take handed out: states never move, and one
// being processed is never swept, so it is still item's while that Take's
// processing lasts. A handle kept past its Done (Taken.Done is Done of the
// item, whichever round it is in) may find its state swept and reused by
// another key, or the table emptied by a ShutDown (which holds every
// shard's lock), while the item is processed again under a state of its
// own: then the item is looked up by its hash, as Done does.
func (q *Queue[K]) inProcessLocked(sh *shard[K], h uint64, item K, idx int32) int32 {
	if idx >= 0 {
		if q.table.has(idx) {
			if st := q.state(idx); st.loadFlags()&fProcessing != 0 && st.key == item {
				return idx
			}
		}
		h = q.hash(item)
	}
	idx = sh.index.find(h, item, &q.table)
	if idx < 0 {
		return -1
	}
	if st := q.state(idx); st.loadFlags()&fProcessing == 0 || st.key != item {
		return -1
	}
	return idx
}

// doneStateLocked ends the processing of item, holding its shard's lock,
// and mu too if the item is dirty: it is queued again.
func (q *Queue[K]) doneStateLocked(sh *shard[K], s int, item K, idx int32) {
	if q.metrics != nil {
		q.metrics.done(item)
	}
	st := q.state(idx)
	st.flags &^= fProcessing
	sh.finished++
	switch {
	case st.flags&fDirty != 0:
		q.pushLocked(st, s, idx)
	case st.flags == 0:
		sh.idled++
	}
}

func (q *Queue[K]) hash(item K) uint64 { return maphash.Comparable(q.seed, item) }

func (q *Queue[K]) tryLock() bool { return !q.noTryLock && q.mu.TryLock() }

// add is Add with a priority. The common cases — the item is already
// queued, or is being processed — only need its shard's lock; queueing it
// needs mu too, taken with TryLock while holding the shard, or else in
// order after letting the shard go.
func (q *Queue[K]) add(item K, prio int) {
	h := q.hash(item)
	s := shardIndex(h)
	sh := &q.shards[s]
	// With a delayed item due, take the slow path, which promotes first, so
	// that what a caller sees depends only on the clock.
	if !q.due() {
		sh.mu.Lock()
		if q.shutdown.Load() {
			sh.mu.Unlock()
			return
		}
		idx := sh.index.find(h, item, &q.table)
		if idx >= 0 && q.addShardLocked(q.state(idx), item, prio) {
			sh.mu.Unlock()
			return
		}
		if q.tryLock() {
			if !q.shutdown.Load() {
				if idx < 0 {
					idx = q.acquireLocked(sh, item, h)
				}
				q.addStateLocked(idx, s, item, prio)
			}
			sh.mu.Unlock()
			q.unlock()
			return
		}
		sh.mu.Unlock()
	}
	q.mu.Lock()
	if !q.shutdown.Load() {
		q.promoteLocked()
		sh.mu.Lock()
		q.addStateLocked(q.acquireLocked(sh, item, h), s, item, prio)
		sh.mu.Unlock()
	}
	q.unlock()
}

// addShardLocked does, holding only the shard's lock, the adds that queue
// nothing: false means this one needs mu.
func (q *Queue[K]) addShardLocked(st *itemState[K], item K, prio int) bool {
	// Loaded atomically: Get marks a queued item processing holding mu
	// alone (see takeLocked). What this path writes, it writes only once
	// the item is processing, when no Get touches it.
	flags := st.loadFlags()
	switch {
	case flags&fDirty != 0:
		if prio <= st.prio {
			return true // the dedup rule: an item already dirty is not queued twice
		}
		if flags&fProcessing != 0 {
			st.prio = prio
			return true
		}
		return false // a raise: queued again at the higher priority
	case flags&fProcessing != 0:
		if q.metrics != nil {
			q.metrics.add(item)
		}
		st.flags |= fDirty
		st.prio = prio
		return true
	}
	return false
}

// addStateLocked is the full add, holding mu and the shard's lock.
func (q *Queue[K]) addStateLocked(idx int32, s int, item K, prio int) {
	st := q.state(idx)
	if st.flags&fDirty != 0 {
		if prio > st.prio {
			st.prio = prio
			if st.flags&fProcessing == 0 {
				// Leave the old slot behind as stale; takeLocked skips
				// it.
				q.dups++
				q.pushLocked(st, s, idx)
			}
		}
		return
	}
	if q.metrics != nil {
		q.metrics.add(item)
	}
	st.flags |= fDirty
	st.prio = prio
	if st.flags&fProcessing == 0 {
		q.pushLocked(st, s, idx)
	}
}

func (q *Queue[K]) metricsLoop(t clock.Ticker) {
	defer q.wg.Done()
	defer t.Stop()
	for {
		select {
		case <-q.stop:
			return
		case <-t.C():
			if !q.shutdown.Load() {
				q.metrics.updateUnfinishedWork()
			}
		}
	}
}
