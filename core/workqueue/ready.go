package workqueue

import "sync/atomic"

// The ready order: one FIFO per priority, guarded by the queue's lock.

type level struct {
	prio int
	r    ring
}

func (q *Queue[K]) pushLocked(st *itemState[K], s int, idx int32) {
	q.seq++
	st.seq = q.seq
	q.levelLocked(st.prio).r.push(slot{seq: q.seq, idx: idx, shard: int32(s)})
	q.queued++
	q.signals++
}

// unlock releases mu, holding no shard lock, and then wakes one blocked
// Get per item pushed meanwhile. Signalling after the unlock spares the
// woken worker from running straight into the lock we still held; no
// wakeup is lost because a Get only waits after finding the queue empty
// under the lock. A sweep that came due meanwhile runs first.
func (q *Queue[K]) unlock() {
	if q.sweepDue {
		q.sweepLocked()
	}
	n := q.signals
	q.signals = 0
	q.mu.Unlock()
	for ; n > 0; n-- {
		q.cond.Signal()
	}
}

// levelLocked finds or inserts the FIFO for prio, keeping levels sorted.
func (q *Queue[K]) levelLocked(prio int) *level {
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
	q.levels = append(q.levels, level{})
	copy(q.levels[i+1:], q.levels[i:])
	q.levels[i] = level{prio: prio}
	return &q.levels[i]
}

// popLocked takes the first slot of the highest non-empty priority. The
// caller has checked q.queued > 0 and calls takeLocked before it lets go
// of mu.
func (q *Queue[K]) popLocked() slot {
	for i := range q.levels {
		if r := &q.levels[i].r; r.n > 0 {
			q.queued--
			return r.pop()
		}
	}
	panic("workqueue: queued count out of step with the ready queues")
}

// takeLocked marks the item of a popped slot processing, holding mu and not
// its shard's lock. It reports false for a stale slot: the item was
// re-added at a higher priority meanwhile and sits in a newer slot.
//
// mu is enough: a live slot means the item is dirty and not processing,
// and while it is, only holders of mu write its state (an Add under the
// shard lock alone only reads it then: dedup; a Done under the shard lock
// alone finds it not processing). The flags are stored atomically because
// such shard-lock readers may look at them meanwhile. Taking the item
// under mu rather than under its shard's lock after letting mu go saves a
// lock and the two atomic updates of an in-transit count per Get: a third
// of a single worker's Add-Get-Done (issue 40).
func (q *Queue[K]) takeLocked(s slot) (item K, live bool) {
	st := q.state(s.idx)
	if st.seq != s.seq {
		q.dups--
		return item, false
	}
	item = st.key
	st.seq = 0
	q.taken++
	if q.metrics != nil {
		// Before the flags: an Add that sees the item processing counts
		// its add after this get.
		q.metrics.get(item)
	}
	atomic.StoreUint32(&st.flags, st.flags&^fDirty|fProcessing)
	return item, true
}
