package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// Source is a ListerWatcher that passes on only the keys of the shards
// this replica owns, filtering at decode (before anything is cached) with
// the filter package's enter/leave semantics: a change of a key outside
// the owned shards reaches the informer as a delete without object (which
// it drops for a key it does not hold).
//
// When the owned set changes (a handoff), Source ends its watch with an
// error matching driver.ErrExpired, so the informer relists through the new
// set: the relist is what turns a handoff into events — the keys of a
// newly owned shard arrive as adds (enter), those of a shard that left as
// deletes with the last cached state (leave) — in one consistent snapshot
// at one source version, computed by the informer's own replace. Per-shard
// informers would do without the relist, but cost one list and one watch
// of the source per owned shard; a relist costs one list per handoff
// round (the Sharder batches the shards of a round), and no extra state.
//
// NewSource registers Source as a Hook of the Sharder: a Load or Drop
// returns once the informer (Bind) has applied the relist.
type Source[T any] struct {
	lw driver.ListerWatcher[T]
	sh *Sharder

	mu       sync.Mutex
	set      []bool        // by shard: passed on
	gen      uint64        // bumped at each change of set
	changed  chan struct{} // closed at each change of set
	listed   uint64        // the gen of the last complete List
	listedRV core.ResourceVersion
	listCond chan struct{} // closed when a List completes
	inf      Waiter
}

// ShardFilter is a ListerWatcher that can itself read only some shards'
// keys, so that they are filtered before they reach this process:
// relay.Downstream over a relay with Options.Shards consumes only the
// owned shards' subjects (JetStream does the filtering). Source finds it
// through Unwrap (driver.Capability) and calls it with the owned set before
// each List and Watch; it still drops other shards' keys at decode, which
// then finds none.
type ShardFilter interface {
	FilterShards(ctx context.Context, shards int, owned []int) error
}

// pushDown hands the set to the ListerWatcher when it filters by shard.
func (s *Source[T]) pushDown(ctx context.Context, set []bool) error {
	f, ok := driver.Capability[ShardFilter](s.lw)
	if !ok {
		return nil
	}
	var owned []int
	for sh, in := range set {
		if in {
			owned = append(owned, sh)
		}
	}
	return f.FilterShards(ctx, len(set), owned)
}

// Waiter is what Source needs of the informer over it: to wait until it
// applied a version (core.SharedIndexInformer).
type Waiter interface {
	WaitFor(ctx context.Context, rv core.ResourceVersion) error
}

// NewSource returns lw filtered to sh's shards, and adds it to sh as a
// Hook. Build the informer over it, Bind the informer, and start the
// informer before sh.Run.
func NewSource[T any](sh *Sharder, lw driver.ListerWatcher[T]) (*Source[T], error) {
	s := &Source[T]{lw: lw, sh: sh, set: make([]bool, sh.Shards()), changed: make(chan struct{}), listCond: make(chan struct{})}
	if err := sh.AddHook(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Bind tells s the informer over it.
func (s *Source[T]) Bind(inf Waiter) {
	s.mu.Lock()
	s.inf = inf
	s.mu.Unlock()
}

// Unwrap returns the ListerWatcher s filters: driver.Capability finds the
// optional interfaces of what it wraps through it (a Source passes every
// version and every Bookmark on, so their promises hold).
func (s *Source[T]) Unwrap() driver.ListerWatcher[T] { return s.lw }

// errSetChanged ends a watch when the owned set changed: the informer
// relists through the new set.
var errSetChanged = fmt.Errorf("shard: the owned shards changed, relisting through the new set: %w", driver.ErrExpired)

func (s *Source[T]) snapshot() ([]bool, uint64, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set, s.gen, s.changed
}

func (s *Source[T]) pass(set []bool, key string) bool { return set[Of(key, len(set))] }

func (s *Source[T]) List(ctx context.Context, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	set, gen, _ := s.snapshot()
	if err := s.pushDown(ctx, set); err != nil {
		return 0, err
	}
	emit := sink.Emit
	sink.Emit = func(ev driver.Event[T]) error {
		// An undecodable key is reported by its shard's owner alone (an
		// event without a key, by every replica).
		if ev.Key != "" && !s.pass(set, ev.Key) {
			return nil
		}
		return emit(ev)
	}
	rv, err := s.lw.List(ctx, sink)
	if err != nil {
		return rv, err
	}
	s.mu.Lock()
	if gen >= s.listed {
		s.listed, s.listedRV = gen, rv
		close(s.listCond)
		s.listCond = make(chan struct{})
	}
	s.mu.Unlock()
	return rv, nil
}

func (s *Source[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	set, gen, changed := s.snapshot()
	s.mu.Lock()
	stale := s.listed != gen
	s.mu.Unlock()
	if stale {
		return errSetChanged
	}
	if err := s.pushDown(ctx, set); err != nil {
		return err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-changed:
			cancel(errSetChanged)
		case <-wctx.Done():
		}
	}()
	emit := opts.Emit
	var zero T
	opts.Emit = func(batch []driver.Event[T]) error {
		for i := range batch {
			ev := &batch[i]
			if ev.Type == driver.Bookmark || ev.Key == "" || s.pass(set, ev.Key) {
				continue
			}
			// Outside the owned shards: a delete without object, which the
			// informer drops unless it holds the key (then: leave). A decode
			// error there is its owner's to report.
			ev.Type, ev.Object, ev.HasObject, ev.Err = driver.Deleted, zero, false, nil
		}
		return emit(batch)
	}
	err := s.lw.Watch(wctx, from, opts)
	if ctx.Err() == nil && errors.Is(context.Cause(wctx), errSetChanged) {
		return errSetChanged
	}
	return err
}

// Load passes on the keys of shards from now on and waits until the
// informer holds them.
func (s *Source[T]) Load(ctx context.Context, shards []int) error {
	return s.change(ctx, shards, true)
}

// Drop stops passing on the keys of shards and waits until the informer
// dropped them (leave events).
func (s *Source[T]) Drop(ctx context.Context, shards []int) error {
	return s.change(ctx, shards, false)
}

func (s *Source[T]) change(ctx context.Context, shards []int, in bool) error {
	s.mu.Lock()
	set := make([]bool, len(s.set))
	copy(set, s.set)
	for _, sh := range shards {
		set[sh] = in
	}
	s.set = set
	s.gen++
	gen := s.gen
	close(s.changed)
	s.changed = make(chan struct{})
	inf := s.inf
	s.mu.Unlock()
	if inf == nil {
		return fmt.Errorf("shard: Source of replica %q has no informer: call Bind before the Sharder runs", s.sh.ID())
	}
	for {
		s.mu.Lock()
		done, rv, wait := s.listed >= gen, s.listedRV, s.listCond
		s.mu.Unlock()
		if done {
			if err := inf.WaitFor(ctx, rv); err != nil {
				return fmt.Errorf("shard: wait for the informer to apply the relist at version %v: %w", rv, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shard: wait for the informer to relist through the new shards: %w", context.Cause(ctx))
		case <-wait:
		}
	}
}
