package workqueue

import "fmt"

// checkInvariants checks, under every lock, the bookkeeping the fast paths
// rely on: a state has a live ready-queue slot exactly when it is dirty and
// not processing; queued counts the live slots; each shard's processing
// count matches its states; a waiting state has a live delay entry; the
// states in use are the keys indexed; no two keys share a state.
func (q *Queue[K]) checkInvariants() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lockShards()
	defer q.unlockShards()
	live := map[int32]bool{}
	for _, l := range q.levels {
		for i := range l.r.n {
			s := l.r.buf[(l.r.head+i)&(len(l.r.buf)-1)]
			if st := q.state(s.idx); s.seq != 0 && st.seq == s.seq {
				if live[s.idx] {
					return fmt.Errorf("key %v: two live slots", s.key)
				}
				live[s.idx] = true
			}
		}
	}
	if len(live) != q.queued {
		return fmt.Errorf("queued = %d, %d live slots", q.queued, len(live))
	}
	waits := map[int32]bool{}
	for _, e := range q.waiting {
		if st := q.state(e.idx); st.flags&fWaiting != 0 && st.wseq == e.seq {
			waits[e.idx] = true
		}
	}
	if stale := len(q.waiting) - len(waits); stale != q.staleWaits {
		return fmt.Errorf("%d stale delay entries, staleWaits = %d", stale, q.staleWaits)
	}
	keys := 0
	seen := map[int32]bool{}
	for i := range q.shards {
		sh := &q.shards[i]
		processing := 0
		for _, s := range sh.index.slots {
			if s.ref == 0 {
				continue
			}
			keys++
			idx := s.ref - 1
			if seen[idx] {
				return fmt.Errorf("key %v: state %d shared", s.key, idx)
			}
			seen[idx] = true
			if shardIndex(s.hash) != i {
				return fmt.Errorf("key %v in shard %d, hash says %d", s.key, i, shardIndex(s.hash))
			}
			st := q.state(idx)
			queued := st.flags&(fDirty|fProcessing) == fDirty
			if (st.seq != 0) != queued || live[idx] != queued {
				return fmt.Errorf("key %v: flags %b, seq %d, live slot %v", s.key, st.flags, st.seq, live[idx])
			}
			if st.flags&fProcessing != 0 {
				processing++
			}
			if (st.flags&fWaiting != 0) != waits[idx] {
				return fmt.Errorf("key %v: flags %b, live delay entry %v", s.key, st.flags, waits[idx])
			}
		}
		if processing != sh.processing {
			return fmt.Errorf("shard %d: processing = %d, %d states processing", i, sh.processing, processing)
		}
	}
	if keys != q.states {
		return fmt.Errorf("%d keys indexed, %d states in use", keys, q.states)
	}
	if int(q.nextState) != q.states+len(q.free) {
		return fmt.Errorf("%d states allocated, %d in use + %d free", q.nextState, q.states, len(q.free))
	}
	return nil
}
