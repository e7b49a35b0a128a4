package workqueue

import "fmt"

// checkInvariants checks, under every lock, the bookkeeping the fast paths
// rely on: a state has a live ready-queue slot exactly when it is dirty and
// not processing; queued counts the slots, and dups the stale ones; the
// items taken and not finished are the states processing; a waiting state has a live delay entry; the
// states in use are the keys indexed; no two keys share a state.
func (q *Queue[K]) checkInvariants() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lockShards()
	defer q.unlockShards()
	live := map[int32]bool{}
	slots := 0
	for _, l := range q.levels {
		slots += l.r.n
		for i := range l.r.n {
			s := l.r.buf[(l.r.head+i)&(len(l.r.buf)-1)]
			if st := q.state(s.idx); s.seq != 0 && st.seq == s.seq {
				if live[s.idx] {
					return fmt.Errorf("key %v: two live slots", st.key)
				}
				live[s.idx] = true
			}
		}
	}
	if slots != q.queued {
		return fmt.Errorf("queued = %d, %d slots", q.queued, slots)
	}
	if dups := q.dups; slots-len(live) != dups {
		return fmt.Errorf("%d stale slots, dups = %d", slots-len(live), dups)
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
	processing, finished := 0, 0
	for i := range q.shards {
		sh := &q.shards[i]
		finished += sh.finished
		for _, s := range sh.index.slots {
			if s.ref == 0 {
				continue
			}
			keys++
			idx := s.ref - 1
			st := q.state(idx)
			if seen[idx] {
				return fmt.Errorf("key %v: state %d shared", st.key, idx)
			}
			seen[idx] = true
			if h := q.hash(st.key); shardIndex(h) != i || uint32(h) != s.hash {
				return fmt.Errorf("key %v in shard %d, hash says %d", st.key, i, shardIndex(h))
			}
			if got := sh.index.find(q.hash(st.key), st.key, &q.table); got != idx {
				return fmt.Errorf("key %v: find = %d, indexed at %d", st.key, got, idx)
			}
			queued := st.flags&(fDirty|fProcessing) == fDirty
			if (st.seq != 0) != queued || live[idx] != queued {
				return fmt.Errorf("key %v: flags %b, seq %d, live slot %v", st.key, st.flags, st.seq, live[idx])
			}
			if st.flags&fProcessing != 0 {
				processing++
			}
			if (st.flags&fWaiting != 0) != waits[idx] {
				return fmt.Errorf("key %v: flags %b, live delay entry %v", st.key, st.flags, waits[idx])
			}
		}
	}
	if q.taken-finished != processing {
		return fmt.Errorf("taken %d - finished %d, %d states processing", q.taken, finished, processing)
	}
	if keys != q.states {
		return fmt.Errorf("%d keys indexed, %d states in use", keys, q.states)
	}
	if int(q.table.next) != q.states+len(q.free) {
		return fmt.Errorf("%d states allocated, %d in use + %d free", q.table.next, q.states, len(q.free))
	}
	for _, idx := range q.free {
		if st := q.state(idx); *st != (itemState[K]{}) {
			return fmt.Errorf("free state %d not zero: %+v", idx, *st)
		}
	}
	return nil
}
