package workqueue

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"sync"
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

const (
	fDirty      uint8 = 1 << iota // needs processing: queued, or re-added while processing
	fProcessing                   // handed out by Get, Done not yet called
	fWaiting                      // has a live entry in the delay heap
)

// itemState is everything the queue knows about one key. States live in a
// slab indexed through one keyIndex, and ready-queue slots and delay entries
// carry the slab index: an Add/Get/Done cycle costs 3 index probes
// (client-go's dirty and processing sets cost 7 map operations), Get none at
// all. A key with no flags left is removed from the index and its slab
// entry reused.
type itemState struct {
	seq   uint64 // seq of the live ready-queue slot
	wseq  uint64 // seq of the live delay-heap entry
	at    int64  // ready time of the live delay-heap entry
	prio  int    // priority the item is queued, or will be re-queued, at
	wprio int    // priority the delayed add will use
	flags uint8
}

type level[K comparable] struct {
	prio int
	r    ring[K]
}

// Queue is a work queue of keys: client-go's workqueue, delaying queue and
// rate-limiting queue in one type, plus priorities.
//
// An item added several times before a worker takes it is processed once; an
// item is never handed to two workers at once; an item added while being
// processed is handed out again after Done. Items come out highest priority
// first and, within a priority, in the order they were added.
type Queue[K comparable] struct {
	mu   sync.Mutex
	cond sync.Cond

	index   keyIndex[K]
	slab    [][]itemState // fixed-size chunks: growing never copies states
	slabLen int32
	free    []int32
	// levels holds one FIFO per priority in use, highest first. There are
	// normally one or two, so a linear scan beats any map.
	levels     []level[K]
	queued     int // live slots across levels
	processing int
	seq        uint64
	signals    int // pushes not yet signalled; see unlock

	waiting     waitHeap[K]
	staleWaits  int
	loopStarted bool
	kick        chan struct{}

	shuttingDown bool
	drain        bool
	stop         chan struct{}
	wg           sync.WaitGroup

	clock   clock.Clock
	epoch   time.Time
	limiter RateLimiter[K]
	metrics *queueMetrics[K]
}

// New returns a running queue. Call ShutDown (or ShutDownWithDrain) when
// done with it: it stops the queue's goroutines.
func New[K comparable](opts Options[K]) *Queue[K] {
	c := clock.Or(opts.Clock)
	q := &Queue[K]{
		index:   keyIndex[K]{seed: maphash.MakeSeed()},
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		clock:   c,
		epoch:   c.Now(),
		limiter: opts.RateLimiter,
		metrics: newQueueMetrics[K](opts.MetricsProvider, opts.Name, c),
	}
	q.cond.L = &q.mu
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
func (q *Queue[K]) Add(item K) {
	h := q.index.hash(item)
	q.mu.Lock()
	if !q.shuttingDown {
		q.promoteLocked()
		q.addLocked(item, h, 0)
	}
	q.unlock()
}

// AddAfter adds item once d has passed; d <= 0 adds it now. An item already
// waiting keeps the earlier of its two ready times. Each call counts as a
// retry in the metrics.
func (q *Queue[K]) AddAfter(item K, d time.Duration) {
	h := q.index.hash(item)
	q.mu.Lock()
	q.addAfterLocked(item, h, d, 0)
	q.unlock()
}

// AddRateLimited adds item when the rate limiter says it may be retried.
func (q *Queue[K]) AddRateLimited(item K) {
	d := q.limiter.When(item)
	h := q.index.hash(item)
	q.mu.Lock()
	q.addAfterLocked(item, h, d, 0)
	q.unlock()
}

// AddWithOpts adds items with a priority, a delay, rate limiting or any mix.
// Re-adding a queued item with a higher priority moves it to the back of
// that priority; an equal or lower one leaves it where it is. An item being
// processed keeps the highest priority it was re-added with for when it is
// queued again at Done.
func (q *Queue[K]) AddWithOpts(opts AddOpts, items ...K) {
	for _, item := range items {
		d := opts.After
		if opts.RateLimited {
			d = max(d, q.limiter.When(item))
		}
		h := q.index.hash(item)
		q.mu.Lock()
		if opts.After == 0 && !opts.RateLimited {
			if !q.shuttingDown {
				q.promoteLocked()
				q.addLocked(item, h, opts.Priority)
			}
		} else {
			q.addAfterLocked(item, h, d, opts.Priority)
		}
		q.unlock()
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
	n := q.queued
	q.unlock()
	return n
}

// Get blocks until an item is ready and returns it; the caller must call
// Done with it. shutdown is true, and item the zero value, once the queue is
// shut down and empty. Items queued before ShutDown are still handed out.
func (q *Queue[K]) Get() (item K, shutdown bool) {
	q.mu.Lock()
	q.promoteLocked()
	for q.queued == 0 && !q.shuttingDown {
		q.cond.Wait()
	}
	if q.queued == 0 {
		q.unlock()
		return item, true
	}
	item = q.popLocked()
	q.unlock()
	return item, false
}

// GetContext is Get that also gives up when ctx is done, returning
// ctx.Err(); it returns ErrShutDown where Get reports shutdown.
func (q *Queue[K]) GetContext(ctx context.Context) (K, error) {
	var zero K
	if ctx.Done() == nil {
		item, shutdown := q.Get()
		if shutdown {
			return zero, ErrShutDown
		}
		return item, nil
	}
	// The broadcast takes the lock, so it cannot fall between a waiter's
	// check of ctx.Err and its Wait.
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.cond.Broadcast()
		q.mu.Unlock()
	})
	defer stop()
	q.mu.Lock()
	defer q.unlock()
	q.promoteLocked()
	for q.queued == 0 && !q.shuttingDown && ctx.Err() == nil {
		q.cond.Wait()
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if q.queued == 0 {
		return zero, ErrShutDown
	}
	return q.popLocked(), nil
}

// Done marks item as processed. If it was added again meanwhile it is
// queued again. Done for an item that is not being processed does nothing
// (client-go would queue a duplicate).
func (q *Queue[K]) Done(item K) {
	h := q.index.hash(item)
	q.mu.Lock()
	// Promote first: promotion may mark this very item dirty.
	q.promoteLocked()
	idx := q.index.find(h, item)
	if idx < 0 || q.state(idx).flags&fProcessing == 0 {
		q.unlock()
		return
	}
	if q.metrics != nil {
		q.metrics.done(item)
	}
	st := q.state(idx)
	st.flags &^= fProcessing
	q.processing--
	if st.flags&fDirty != 0 {
		q.pushLocked(item, idx)
	} else if q.drain && q.processing == 0 {
		q.cond.Broadcast()
	}
	if st.flags == 0 {
		q.releaseLocked(item, h, idx)
	}
	q.unlock()
}

// ShutDown stops the queue: Add and AddAfter are ignored from now on,
// delayed items are dropped, workers blocked in Get return once the queued
// items are handed out. It waits for the queue's own goroutines, not for
// the workers; it may be called more than once.
func (q *Queue[K]) ShutDown() {
	q.mu.Lock()
	q.shutDownLocked()
	q.drain = false
	q.cond.Broadcast()
	q.unlock()
	q.wg.Wait()
}

// ShutDownWithDrain is ShutDown that then waits until every queued item has
// been handed out and marked Done. Unlike client-go, which only waits for the
// items being processed, it also waits for items still queued, which a worker
// between Done and its next Get would otherwise lose. Workers must keep
// calling Get and Done; a ShutDown from another goroutine stops the wait.
func (q *Queue[K]) ShutDownWithDrain() {
	q.mu.Lock()
	q.shutDownLocked()
	q.drain = true
	q.cond.Broadcast()
	for q.drain && (q.queued > 0 || q.processing > 0) {
		q.cond.Wait()
	}
	q.unlock()
	q.wg.Wait()
}

// ShuttingDown reports whether ShutDown or ShutDownWithDrain was called.
func (q *Queue[K]) ShuttingDown() bool {
	q.mu.Lock()
	defer q.unlock()
	return q.shuttingDown
}

func (q *Queue[K]) shutDownLocked() {
	if q.shuttingDown {
		return
	}
	// Items whose time has already come count as queued: they are handed
	// out (and drained) like the rest; only the future ones are dropped.
	q.promoteLocked()
	q.shuttingDown = true
	close(q.stop)
	if q.queued == 0 && q.processing == 0 {
		// Every key left is only waiting: forget them all at once rather
		// than one map delete per key.
		// Any slot left in the ready queues is stale, so drop them too.
		q.index.reset()
		q.slab, q.free, q.slabLen = nil, nil, 0
		q.levels = nil
	} else {
		for _, e := range q.waiting {
			if st := q.state(e.idx); st.flags&fWaiting != 0 && st.wseq == e.seq {
				st.flags &^= fWaiting
				if st.flags == 0 {
					q.releaseLocked(e.key, q.index.hash(e.key), e.idx)
				}
			}
		}
	}
	q.waiting = nil
	q.staleWaits = 0
}

// addLocked is the dedup rule: an item already dirty is not queued twice.
func (q *Queue[K]) addLocked(item K, h uint64, prio int) {
	q.addIdxLocked(item, q.acquireLocked(item, h), prio)
}

func (q *Queue[K]) addIdxLocked(item K, idx int32, prio int) {
	st := q.state(idx)
	if st.flags&fDirty != 0 {
		if prio > st.prio {
			st.prio = prio
			if st.flags&fProcessing == 0 {
				// Leave the old slot behind as stale; popLocked skips it.
				q.queued--
				q.pushLocked(item, idx)
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
		q.pushLocked(item, idx)
	}
}

func (q *Queue[K]) pushLocked(item K, idx int32) {
	q.seq++
	st := q.state(idx)
	st.seq = q.seq
	q.levelLocked(st.prio).r.push(slot[K]{key: item, seq: q.seq, idx: idx})
	q.queued++
	q.signals++
}

// unlock releases the lock and then wakes one blocked Get per item pushed
// meanwhile. Signalling after the unlock spares the woken worker from
// running straight into the lock we still held; no wakeup is lost because a
// Get only waits after finding the queue empty under the lock.
func (q *Queue[K]) unlock() {
	n := q.signals
	q.signals = 0
	q.mu.Unlock()
	for ; n > 0; n-- {
		q.cond.Signal()
	}
}

const (
	slabChunkBits = 10
	slabChunk     = 1 << slabChunkBits
	slabChunkMask = slabChunk - 1
)

func (q *Queue[K]) state(idx int32) *itemState {
	return &q.slab[idx>>slabChunkBits][idx&slabChunkMask]
}

// acquireLocked returns item's slab index, allocating a zero state for a
// key the queue does not track yet.
func (q *Queue[K]) acquireLocked(item K, h uint64) int32 {
	slot, found := q.index.findOrInsert(h, item)
	if found {
		return slot.ref - 1
	}
	var idx int32
	if n := len(q.free); n > 0 {
		idx = q.free[n-1]
		q.free = q.free[:n-1]
	} else {
		idx = q.slabLen
		switch {
		case idx < slabChunk:
			// The first chunk grows by append so a queue of a few keys
			// does not pay for a whole chunk.
			if len(q.slab) == 0 {
				q.slab = append(q.slab, nil)
			}
			q.slab[0] = append(q.slab[0], itemState{})
		case idx&slabChunkMask == 0:
			q.slab = append(q.slab, make([]itemState, slabChunk))
		}
		q.slabLen++
	}
	slot.ref = idx + 1
	return idx
}

// releaseLocked forgets a key that has no flags left. Zeroing the state
// also invalidates any stale slot or heap entry still pointing at idx,
// since no live seq is 0.
func (q *Queue[K]) releaseLocked(item K, h uint64, idx int32) {
	q.index.delete(h, item)
	*q.state(idx) = itemState{}
	q.free = append(q.free, idx)
}

// levelLocked finds or inserts the FIFO for prio, keeping levels sorted.
func (q *Queue[K]) levelLocked(prio int) *level[K] {
	i := 0
	for ; i < len(q.levels); i++ {
		if q.levels[i].prio == prio {
			return &q.levels[i]
		}
		if q.levels[i].prio < prio {
			break
		}
	}
	if len(q.levels) >= 8 {
		// Many priorities have been used: drop the empty FIFOs rather than
		// scan them forever.
		kept := q.levels[:0]
		for _, l := range q.levels {
			if l.r.n > 0 {
				kept = append(kept, l)
			}
		}
		if len(kept) < len(q.levels) {
			clear(q.levels[len(kept):])
			q.levels = kept
			return q.levelLocked(prio)
		}
	}
	q.levels = append(q.levels, level[K]{})
	copy(q.levels[i+1:], q.levels[i:])
	q.levels[i] = level[K]{prio: prio}
	return &q.levels[i]
}

// popLocked takes the first live slot of the highest non-empty priority.
// The caller has checked q.queued > 0.
func (q *Queue[K]) popLocked() K {
	for i := range q.levels {
		r := &q.levels[i].r
		for r.n > 0 {
			s := r.pop()
			st := q.state(s.idx)
			if st.seq != s.seq || st.flags&(fDirty|fProcessing) != fDirty {
				continue
			}
			q.queued--
			q.processing++
			st.flags = st.flags&^fDirty | fProcessing
			if q.metrics != nil {
				q.metrics.get(s.key)
			}
			return s.key
		}
	}
	panic("workqueue: queued count out of step with the ready queues")
}

// now is the queue's time as an integer, so heap comparisons are plain
// integer compares rather than time.Time.Before.
func (q *Queue[K]) now() int64 { return int64(q.clock.Since(q.epoch)) }

func (q *Queue[K]) addAfterLocked(item K, h uint64, d time.Duration, prio int) {
	if q.shuttingDown {
		return
	}
	if q.metrics != nil {
		q.metrics.retries.Inc()
	}
	q.promoteLocked()
	if d <= 0 {
		// No heap, no goroutine hop: client-go also adds these at once.
		q.addLocked(item, h, prio)
		return
	}
	now := q.now()
	at := int64(math.MaxInt64)
	if int64(d) < math.MaxInt64-now {
		at = now + int64(d)
	}
	idx := q.acquireLocked(item, h)
	st := q.state(idx)
	if st.flags&fWaiting != 0 {
		st.wprio = max(st.wprio, prio)
		if at >= st.at {
			return
		}
		q.staleWaits++
	} else {
		st.wprio = prio
	}
	q.seq++
	st.flags |= fWaiting
	st.wseq = q.seq
	st.at = at
	q.waiting.push(waitEntry[K]{at: at, seq: q.seq, idx: idx, key: item})
	if q.staleWaits > 1024 && q.staleWaits > len(q.waiting)/2 {
		q.compactWaitingLocked()
	}
	if q.waiting[0].seq == q.seq {
		// The new entry is the earliest: the loop must re-arm its timer.
		if !q.loopStarted {
			q.loopStarted = true
			q.wg.Add(1)
			go q.delayLoop()
		}
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
}

func (q *Queue[K]) compactWaitingLocked() {
	kept := q.waiting[:0]
	for _, e := range q.waiting {
		if st := q.state(e.idx); st.flags&fWaiting != 0 && st.wseq == e.seq {
			kept = append(kept, e)
		}
	}
	clear(q.waiting[len(kept):])
	q.waiting = kept
	q.waiting.init()
	q.staleWaits = 0
}

// promoteLocked moves every delayed item whose time has come into the ready
// queue. Every operation calls it first, so what a caller observes depends
// only on the clock, not on when the delay goroutine last ran; that is what
// makes fake-clock tests deterministic.
func (q *Queue[K]) promoteLocked() {
	// Small enough to inline: the common case of no delayed items costs a
	// length check, not a call.
	if len(q.waiting) > 0 {
		q.promoteDueLocked()
	}
}

func (q *Queue[K]) promoteDueLocked() {
	now := q.now()
	for len(q.waiting) > 0 && q.waiting[0].at <= now {
		e := q.waiting.pop()
		st := q.state(e.idx)
		if st.flags&fWaiting == 0 || st.wseq != e.seq {
			q.staleWaits--
			continue
		}
		// Still tracked: addIdxLocked marks it dirty, so no release.
		st.flags &^= fWaiting
		q.addIdxLocked(e.key, e.idx, st.wprio)
	}
}

// delayLoop wakes blocked workers when a delayed item becomes ready. It is
// started by the first AddAfter with a positive delay and ends at shutdown.
func (q *Queue[K]) delayLoop() {
	defer q.wg.Done()
	var t clock.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		q.mu.Lock()
		if q.shuttingDown {
			q.unlock()
			return
		}
		q.promoteLocked()
		wait, armed := time.Duration(0), len(q.waiting) > 0
		if armed {
			wait = max(0, time.Duration(q.waiting[0].at-q.now()))
		}
		q.unlock()

		var fire <-chan time.Time
		switch {
		case armed && t == nil:
			t = q.clock.NewTimer(wait)
			fire = t.C()
		case armed:
			t.Reset(wait)
			fire = t.C()
		case t != nil:
			t.Stop()
		}
		select {
		case <-q.stop:
			return
		case <-fire:
		case <-q.kick:
		}
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
			q.mu.Lock()
			if !q.shuttingDown {
				q.metrics.updateUnfinishedWork()
			}
			q.unlock()
		}
	}
}
