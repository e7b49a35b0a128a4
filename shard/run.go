package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Observer sees what a Sharder does; package shard/shardstatus shows it on
// the status page and in metrics. Calls come from the Sharder's loop, one
// at a time; they must not block.
type Observer interface {
	// Members is called after each read of the live members.
	Members(members []Member)
	// Owned is called when the shards active here change, with their
	// terms.
	Owned(shards map[int]uint64)
	// HandoffStarted is called when a shard starts moving here (in true:
	// assigned here, not yet loaded) or away (in false: draining).
	HandoffStarted(shard int, in bool)
	// HandoffDone is called when that handoff ends: for in, from the
	// first time the shard was seen assigned here until its keys were
	// loaded; for out, from the start of the drain until the release.
	HandoffDone(shard int, in bool, d time.Duration, err error)
}

// observers fans out to every Observer.
type observers []Observer

func (os observers) Members(m []Member) {
	for _, o := range os {
		o.Members(m)
	}
}

func (os observers) Owned(sh map[int]uint64) {
	for _, o := range os {
		o.Owned(sh)
	}
}

func (os observers) HandoffStarted(sh int, in bool) {
	for _, o := range os {
		o.HandoffStarted(sh, in)
	}
}

func (os observers) HandoffDone(sh int, in bool, d time.Duration, err error) {
	for _, o := range os {
		o.HandoffDone(sh, in, d, err)
	}
}

// observer: the list is fixed once Run started.
func (s *Sharder) observer() Observer { return observers(s.observers) }

// Run takes part in sharding until ctx ends: it joins, renews its lease
// every third of it, follows the membership, takes the shards assigned
// here and hands off those that move away. When ctx ends it hands every
// shard off (drain, Drop, release: the other replicas take them without
// waiting for the lease), leaves and returns nil. Errors of the backend
// are logged and retried; a lease that ran out drops every shard here
// (Drop without drain: other replicas may own them already) and joins
// again.
func (s *Sharder) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return fmt.Errorf("shard: replica %q: Run called twice", s.opts.ID)
	}
	s.started = true
	s.mu.Unlock()
	period := s.opts.Lease / 3
	fast := min(period, 100*time.Millisecond)
	var sess Session
	var lost <-chan struct{}
	var stopRenew func()
	pending := map[int]time.Time{} // shards assigned here, not yet owned: since when
	leave := func() {
		stopRenew()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), period)
		defer cancel()
		if err := sess.Close(cctx); err != nil {
			s.log.Warn("shard: leave", "err", err)
		}
		sess = nil
	}
	defer func() {
		if sess != nil {
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.DrainTimeout+period)
			defer cancel()
			s.handOff(lctx, sess, s.ownedShards())
			leave()
			s.lose()
		}
	}()
	for ctx.Err() == nil {
		wait := period
		if sess == nil {
			jctx, cancel := context.WithTimeout(ctx, period)
			sent := time.Now()
			var err error
			sess, err = s.b.Join(jctx, Member{ID: s.opts.ID, Weight: s.opts.Weight}, s.opts.Lease)
			cancel()
			if err != nil {
				sess = nil
				if ctx.Err() == nil {
					s.log.Warn("shard: join failed; retrying", "err", err, "retry_in", period)
				}
			} else {
				s.mu.Lock()
				s.deadline = sent.Add(s.opts.Lease)
				s.mu.Unlock()
				lost, stopRenew = s.renew(ctx, sess)
				s.log.Info("shard: joined", "lease", s.opts.Lease, "shards", s.opts.Shards)
				wait = 0
			}
		} else {
			select {
			case <-lost:
				s.dropLost(ctx)
				leave()
				clear(pending)
				wait = 0
			default:
				s.step(ctx, sess, pending)
				if len(pending) > 0 {
					wait = fast
				}
			}
		}
		var changed <-chan struct{}
		if sess != nil {
			changed = sess.Changed()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-changed:
		case <-lost:
		}
		t.Stop()
	}
	return nil
}

// renew renews sess's lease every third of it, apart from the handoffs
// (a load may take longer than a lease), and closes lost when the lease
// is gone: the backend says so, or the local deadline passed.
func (s *Sharder) renew(ctx context.Context, sess Session) (lost <-chan struct{}, stop func()) {
	period := s.opts.Lease / 3
	ch := make(chan struct{})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			cctx, ccancel := context.WithTimeout(rctx, period)
			sent := time.Now()
			err := sess.Renew(cctx)
			ccancel()
			s.mu.Lock()
			if err == nil {
				s.deadline = sent.Add(s.opts.Lease)
			}
			expired := !time.Now().Before(s.deadline)
			s.mu.Unlock()
			if err == nil || rctx.Err() != nil {
				continue
			}
			if errors.Is(err, ErrSessionLost) || expired {
				s.log.Warn("shard: lease lost: dropping every shard and joining again", "err", err)
				close(ch)
				return
			}
			s.log.Warn("shard: renew failed; retrying", "err", err)
		}
	}()
	return ch, func() { cancel(); <-done }
}

// step is one round: read members, hand off what moved away, take what
// moved here.
func (s *Sharder) step(ctx context.Context, sess Session, pending map[int]time.Time) {
	period := s.opts.Lease / 3
	obs := s.observer()
	mctx, cancel := context.WithTimeout(ctx, period)
	defer cancel()
	members, err := sess.Members(mctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("shard: read members", "err", err)
		}
		return
	}
	owners, err := Assign(s.opts.Shards, members)
	if err != nil {
		s.log.Error("shard: assignment", "err", err)
		return
	}
	s.mu.Lock()
	s.members = members
	s.mu.Unlock()
	obs.Members(members)
	want := map[int]bool{}
	for _, sh := range Owned(owners, s.opts.ID) {
		want[sh] = true
	}
	var leaving []int
	for _, sh := range s.ownedShards() {
		if !want[sh] {
			leaving = append(leaving, sh)
		}
	}
	if len(leaving) > 0 {
		hctx, cancel := context.WithTimeout(ctx, s.opts.LoadTimeout)
		s.handOff(hctx, sess, leaving)
		cancel()
	}
	for sh := range pending {
		if !want[sh] {
			obs.HandoffDone(sh, true, time.Since(pending[sh]), errors.New("assigned elsewhere before it was taken"))
			delete(pending, sh)
		}
	}
	var got []int
	for sh := range want {
		if s.owns(sh) {
			continue
		}
		if _, ok := pending[sh]; !ok {
			pending[sh] = time.Now()
			obs.HandoffStarted(sh, true)
		}
		term, ok, err := sess.Acquire(mctx, sh)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("shard: acquire", "shard", sh, "err", err)
			}
			continue
		}
		if ok {
			s.mu.Lock()
			s.slots[sh] = &slot{term: term, since: pending[sh]}
			s.mu.Unlock()
			got = append(got, sh)
		}
	}
	if len(got) > 0 {
		hctx, cancel := context.WithTimeout(ctx, s.opts.LoadTimeout)
		s.load(hctx, sess, got, pending)
		cancel()
	}
}

// load runs the hooks' Load for newly taken shards, then activates them.
// A failed Load hands them back (they are retried next round).
func (s *Sharder) load(ctx context.Context, sess Session, shards []int, pending map[int]time.Time) {
	slices.Sort(shards)
	var err error
	for _, h := range s.hooks {
		if err = h.Load(ctx, shards); err != nil {
			break
		}
	}
	if err != nil {
		s.log.Warn("shard: loading taken shards failed; handing them back", "shards", shards, "err", err)
		s.handOff(ctx, sess, shards)
		return
	}
	s.mu.Lock()
	for _, sh := range shards {
		s.slots[sh].state = active
	}
	owned := s.ownedLocked()
	s.notifyLocked()
	s.mu.Unlock()
	for _, sh := range shards {
		s.observer().HandoffDone(sh, true, time.Since(pending[sh]), nil)
		delete(pending, sh)
	}
	s.observer().Owned(owned)
	s.log.Info("shard: took shards", "shards", shards, "owned", len(owned))
}

// handOff stops handing out work for shards, waits for the work in flight
// (up to DrainTimeout), runs the hooks' Drop and releases them.
func (s *Sharder) handOff(ctx context.Context, sess Session, shards []int) {
	if len(shards) == 0 {
		return
	}
	slices.Sort(shards)
	start := time.Now()
	obs := s.observer()
	for _, sh := range shards {
		obs.HandoffStarted(sh, false)
	}
	s.mu.Lock()
	for _, sh := range shards {
		s.slots[sh].state = draining
	}
	s.notifyLocked()
	owned := s.ownedLocked()
	drained := s.waitDrained(shards, start.Add(s.opts.DrainTimeout))
	s.mu.Unlock()
	obs.Owned(owned)
	var err error
	if !drained {
		err = fmt.Errorf("work in flight outlived the drain timeout %v (fencing by term refuses its writes)", s.opts.DrainTimeout)
		s.log.Warn("shard: handing off with work in flight", "shards", shards, "err", err)
	}
	for _, h := range s.hooks {
		if derr := h.Drop(ctx, shards); derr != nil {
			s.log.Warn("shard: dropping the keys of handed-off shards", "shards", shards, "err", derr)
		}
	}
	for _, sh := range shards {
		s.mu.Lock()
		term := s.slots[sh].term
		delete(s.slots, sh)
		s.mu.Unlock()
		if rerr := sess.Release(ctx, sh, term); rerr != nil {
			// It expires with the lease: the new owner waits for that.
			s.log.Warn("shard: release", "shard", sh, "err", rerr)
		}
		obs.HandoffDone(sh, false, time.Since(start), err)
	}
	s.log.Info("shard: handed off shards", "shards", shards, "took", time.Since(start))
}

// waitDrained waits, s.mu held, until no work is in flight on shards or
// until deadline; it reports whether they drained.
func (s *Sharder) waitDrained(shards []int, deadline time.Time) bool {
	t := time.AfterFunc(time.Until(deadline), func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer t.Stop()
	for {
		busy := false
		for _, sh := range shards {
			if s.slots[sh].inflight > 0 {
				busy = true
			}
		}
		if !busy {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		s.cond.Wait()
	}
}

// dropLost forgets every shard after the lease ran out: no drain (others
// may own them already; Begin refuses since two thirds of the lease) and
// no release (the lease took them).
func (s *Sharder) dropLost(ctx context.Context) {
	shards := s.ownedShards()
	s.lose()
	if len(shards) == 0 {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.DrainTimeout)
	defer cancel()
	for _, h := range s.hooks {
		if err := h.Drop(dctx, shards); err != nil {
			s.log.Warn("shard: dropping the keys of lost shards", "shards", shards, "err", err)
		}
	}
	for _, sh := range shards {
		s.observer().HandoffDone(sh, false, 0, ErrSessionLost)
	}
}

// lose forgets every shard and the lease.
func (s *Sharder) lose() {
	s.mu.Lock()
	clear(s.slots)
	s.deadline = time.Time{}
	s.notifyLocked()
	s.mu.Unlock()
	s.observer().Owned(map[int]uint64{})
}

func (s *Sharder) owns(sh int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slots[sh] != nil
}

func (s *Sharder) ownedShards() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.slots))
	for sh := range s.slots {
		out = append(out, sh)
	}
	slices.Sort(out)
	return out
}

func (s *Sharder) ownedLocked() map[int]uint64 {
	out := map[int]uint64{}
	for sh, sl := range s.slots {
		if sl.state == active {
			out[sh] = sl.term
		}
	}
	return out
}
