package workqueue

import (
	"math"
	"time"

	"github.com/dbinformer/dbinformer/core/clock"
)

// now is the queue's time as an integer, so heap comparisons are plain
// integer compares rather than time.Time.Before.
func (q *Queue[K]) now() int64 { return int64(q.clock.Since(q.epoch)) }

// due reports whether a delayed item's time may have come. Add and Done
// check it before their lock-light paths: those do not promote, so when it
// is true they take mu and promote first, like every other operation.
func (q *Queue[K]) due() bool {
	d := q.nextDue.Load()
	return d != noDue && q.now() >= d
}

// syncDueLocked publishes the heap's top for due. A stale top only sends a
// few calls down the slow path, which pops it.
func (q *Queue[K]) syncDueLocked() {
	if len(q.waiting) == 0 {
		q.nextDue.Store(noDue)
	} else {
		q.nextDue.Store(q.waiting[0].at)
	}
}

func (q *Queue[K]) addAfter(item K, d time.Duration, prio int) {
	if d <= 0 {
		// No heap, no goroutine hop: client-go also adds these at once.
		if q.metrics != nil && !q.shutdown.Load() {
			q.metrics.retry()
		}
		q.add(item, prio)
		return
	}
	h := q.hash(item)
	s := shardIndex(h)
	sh := &q.shards[s]
	q.mu.Lock()
	if q.shutdown.Load() {
		q.unlock()
		return
	}
	if q.metrics != nil {
		q.metrics.retry()
	}
	now := q.now() // one clock read for both: it is not free
	if len(q.waiting) > 0 {
		q.promoteDueLocked(now)
	}
	at := int64(math.MaxInt64)
	if int64(d) < math.MaxInt64-now {
		at = now + int64(d)
	}
	sh.mu.Lock()
	idx := q.acquireLocked(sh, item, h)
	st := q.state(idx)
	if st.flags&fWaiting != 0 {
		st.wprio = max(st.wprio, prio)
		if at >= st.at {
			sh.mu.Unlock()
			q.unlock()
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
	sh.mu.Unlock()
	q.waiting.push(waitEntry{at: at, seq: q.seq, idx: idx, shard: int32(s)})
	if q.staleWaits > 1024 && q.staleWaits > len(q.waiting)/2 {
		q.compactWaitingLocked()
	}
	if q.waiting[0].seq == q.seq {
		// The new entry is the earliest: the loop must re-arm its timer.
		q.nextDue.Store(at)
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
	q.unlock()
}

func (q *Queue[K]) compactWaitingLocked() {
	q.lockShards()
	kept := q.waiting[:0]
	for _, e := range q.waiting {
		if st := q.state(e.idx); st.flags&fWaiting != 0 && st.wseq == e.seq {
			kept = append(kept, e)
		}
	}
	q.unlockShards()
	clear(q.waiting[len(kept):])
	q.waiting = kept
	q.waiting.init()
	q.staleWaits = 0
	q.syncDueLocked()
}

// promoteLocked moves every delayed item whose time has come into the ready
// queue. Every operation calls it first (Add and Done when due says so), so
// what a caller observes depends only on the clock, not on when the delay
// goroutine last ran; that is what makes fake-clock tests deterministic.
func (q *Queue[K]) promoteLocked() {
	// Small enough to inline: the common case of no delayed items costs a
	// length check, not a call.
	if len(q.waiting) > 0 {
		q.promoteDueLocked(q.now())
	}
}

func (q *Queue[K]) promoteDueLocked(now int64) {
	if q.waiting[0].at > now {
		return
	}
	for len(q.waiting) > 0 && q.waiting[0].at <= now {
		e := q.waiting.pop()
		sh := &q.shards[e.shard]
		sh.mu.Lock()
		st := q.state(e.idx)
		if st.flags&fWaiting == 0 || st.wseq != e.seq {
			sh.mu.Unlock()
			q.staleWaits--
			continue
		}
		st.flags &^= fWaiting
		q.addStateLocked(e.idx, int(e.shard), st.key, st.wprio)
		sh.mu.Unlock()
	}
	q.syncDueLocked()
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
		if q.shutdown.Load() {
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
