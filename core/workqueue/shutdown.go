package workqueue

// drainedLocked wakes ShutDownWithDrain once nothing is queued or being
// processed. It holds mu and no shard lock.
func (q *Queue[K]) drainedLocked() {
	if q.drain && q.queued == 0 && q.processingLocked() == 0 {
		q.cond.Broadcast()
	}
}

// processingLocked counts the items handed out and not yet Done, holding
// mu and no shard lock. Only shutdown needs the figure, so Get counts its
// hand-outs under mu and Done its ends under the shard's lock, rather than
// both writing one counter.
func (q *Queue[K]) processingLocked() int {
	n := q.taken
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		n -= sh.finished
		sh.mu.Unlock()
	}
	return n
}

// ShutDown stops the queue: Add and AddAfter are ignored from now on,
// delayed items are dropped, workers blocked in Get return once the queued
// items are handed out. It waits for the queue's own goroutines, not for
// the workers; it may be called more than once.
func (q *Queue[K]) ShutDown() {
	q.mu.Lock()
	q.shutDownLocked()
	q.drain = false
	q.draining.Store(false)
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
	q.draining.Store(true)
	q.cond.Broadcast()
	for q.drain && (q.queued > 0 || q.processingLocked() > 0) {
		q.cond.Wait()
	}
	q.unlock()
	q.wg.Wait()
}

// ShuttingDown reports whether ShutDown or ShutDownWithDrain was called.
func (q *Queue[K]) ShuttingDown() bool { return q.shutdown.Load() }

func (q *Queue[K]) shutDownLocked() {
	if q.shutdown.Load() {
		return
	}
	// Items whose time has already come count as queued: they are handed
	// out (and drained) like the rest; only the future ones are dropped.
	q.promoteLocked()
	q.shutdown.Store(true)
	close(q.stop)
	processing := q.taken
	q.lockShards()
	for i := range q.shards {
		processing -= q.shards[i].finished
	}
	if q.queued == 0 && processing == 0 {
		// Every key left is idle or only waiting: forget them all at once.
		// No slot is left. (An Add
		// racing with this saw shutdown unset, but all it can do without mu
		// is mark an item being processed, and there is none.)
		for i := range q.shards {
			q.shards[i].index.reset()
		}
		q.levels = nil
		q.table, q.free, q.states = stateTable[K]{}, nil, 0
	} else {
		for _, e := range q.waiting {
			if st := q.state(e.idx); st.flags&fWaiting != 0 && st.wseq == e.seq {
				st.flags &^= fWaiting
			}
		}
	}
	q.unlockShards()
	q.waiting = nil
	q.staleWaits = 0
	q.nextDue.Store(noDue)
}
