package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/internal/keyshard"
)

// A Downstream that owns some shards (DownstreamOptions.Shards and Owned,
// or FilterShards: what shard.Source calls) reads only their subjects:
// one JetStream consumer with a filter per owned shard, so that the
// server does the filtering and a replica's network and decode work
// shrink with the number of replicas.
//
// The messages it reads are no longer the whole stream, so nothing in them
// tells it where the source's versions stand: the group metadata (index,
// count, prev) chains every message of the stream, and the chain runs
// through other shards' messages it never sees. It does not guess from
// them. It confirms a version C only when it has proof that every key of
// its shards holds, in what it delivered, its last state as of a stream
// position P whose messages make the stream complete up to C:
//
//   - the event stream sent a Bookmark at P, the stream's head as read
//     from the leader, once nothing its filters match lay between its
//     position and P;
//   - then, asked of the leader for each filter, no message exists after
//     P at all (quiet): every key of the owned shards has its last
//     message, the one that superseded any it missed, at or before P, and
//     it existed when the consumer passed it, so it was delivered;
//   - the message at P, any subject, says how far the stream is complete
//     (entry.committed): C.
//
// Until then it holds what it read, in stream order (past maxHeld
// changes, each key's last only, like a catch-up), and asks the event
// stream for the next bookmark; at the proof it delivers every change at
// the first version after the last confirmed (a message may stand for
// changes of its key it superseded unseen, at any version since: at its
// own version, WaitFor of one of those could return before the message
// was applied), then a Bookmark at C — so WaitFor never returns for a
// change of its shards it did not deliver, and a cache may hold a key's
// change newer than its version, never an older one. Progress and abort messages are
// not read: the relay's progress message is the stream's head when the
// source is idle, read as the message at P, and an aborted group's keys
// are republished by the next term, superseding what it delivered.
//
// The cost: a confirmation needs the shards quiet for the moment of one
// round of reads (one per owned shard, concurrently), so under writes to
// its shards that never pause for that long, WaitFor and new changes wait.

// view is the set of shards a Downstream reads.
type view struct {
	shards int    // the relay's Options.Shards
	owned  []bool // by shard
	// filters are the owned shards' subjects; es consumes them. Nil es
	// with all: the stream is laid out without shards (a relay without
	// Options.Shards), read whole and filtered by the caller (shard.Source
	// drops other shards' keys at decode).
	filters []string
	es      *natsinformer.EventStream[entry]
	all     bool
	unknown bool // all because the stream held no key yet: look again
}

// keeps reports whether key belongs to the view's shards.
func (v *view) keeps(key string) bool {
	return v == nil || v.owned[keyshard.Of(key, v.shards)]
}

// FilterShards makes the Downstream read only the given shards' keys
// (among shards, the relay's Options.Shards) from the next List or Watch
// on; shard.Source calls it with the owned set before each. It is how a
// handoff reaches the consumer: the informer relists through the new set
// (its keys enter and leave as partial sync's), and the watch after it
// consumes the new filters. It reads the stream (I/O) to check that the
// relay publishes with the same count. A stream laid out without shards
// (a relay without Options.Shards) is read whole, as before; a stream
// laid out with another count is an error naming the fix.
func (d *Downstream[T]) FilterShards(ctx context.Context, shards int, owned []int) error {
	if shards <= 0 {
		return fmt.Errorf("%s: FilterShards with %d shards", d.source, shards)
	}
	if d.shards > 0 && d.shards != shards {
		return fmt.Errorf("%s: FilterShards with %d shards, but DownstreamOptions.Shards is %d: the relay, the sharders and the downstreams need one count", d.source, shards, d.shards)
	}
	v := &view{shards: shards, owned: make([]bool, shards)}
	for _, s := range owned {
		if s < 0 || s >= shards {
			return fmt.Errorf("%s: shard %d is not among %d", d.source, s, shards)
		}
		v.owned[s] = true
	}
	d.mu.Lock()
	same := d.view != nil && !d.view.unknown && d.view.shards == shards && slices.Equal(d.view.owned, v.owned)
	d.mu.Unlock()
	if same {
		// The List's view, now for its Watch: keep its parked position.
		return nil
	}
	relayShards, known, err := d.layout(ctx)
	if err != nil {
		return err
	}
	switch {
	case !known && d.shards == 0, known && relayShards == 0:
		// Without shards in the subjects (or nothing published yet and no
		// declared count): read everything.
		v.all, v.unknown = true, !known
		if known {
			d.logLayout.Do(func() {
				d.log.Info("relay stream is laid out without shards: this downstream reads every key and its caller filters at decode; set the relay's Options.Shards to let JetStream filter",
					"stream", d.source, "shards", shards)
			})
		}
	case known && relayShards != shards:
		return fmt.Errorf("%s holds keys published %s, not %s: set the relay's Options.Shards to the sharders' count (%d), stop the relays, purge the stream and start them again (the first leader relists into it)", d.source, layout(relayShards), layout(shards), shards)
	default:
		var want []int
		for s, in := range v.owned {
			if in {
				want = append(want, s)
			}
		}
		v.filters = ShardSubjects(d.prefix, shards, want)
		if len(v.filters) > 0 {
			es, err := natsinformer.NewEventStream(ctx, d.js, d.streamName, natsinformer.EventStreamOptions[entry]{
				Stateless: true,
				Reduce:    d.reduce,
				Filters:   v.filters,
				Key:       func(subject string) (string, error) { return subject, nil },
				Logger:    d.logger,
				IdleCheck: d.idle,
			})
			if err != nil {
				return err
			}
			v.es = es
		}
	}
	d.mu.Lock()
	d.view = v
	d.parked = nil // a position of another set of shards
	d.mu.Unlock()
	return nil
}

// currentView is the view of the next List or Watch; nil: everything.
func (d *Downstream[T]) currentView() *view {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.view
}

// layout reads how the stream lays keys out: the count of shards in its
// key subjects (0: none), known false for a stream holding no key. A relay
// refuses a stream that holds both, so its last key message says.
func (d *Downstream[T]) layout(ctx context.Context) (shards int, known bool, err error) {
	for _, filter := range []string{d.prefix + "." + tokShard + ".>", d.prefix + "." + tokKey + ".>"} {
		m, err := d.stream.GetLastMsgForSubject(ctx, filter)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("%s: read the last key message: %w", d.source, err)
		}
		e, err := parse(d.prefix, m.Subject, m.Sequence, m.Header, nil)
		if err != nil {
			return 0, false, err
		}
		return e.shards, true, nil
	}
	if d.shards > 0 {
		return d.shards, false, nil
	}
	return 0, false, nil
}

// confirm is the proof above: the event stream's bookmark said that it
// delivered every message of the owned shards up to p (the head it read);
// confirm asks the leader whether any message of them exists after p, and
// reads the message at p. ok false: not now (a message after p, or the
// one at p gone).
func (d *Downstream[T]) confirm(ctx context.Context, v *view, p uint64) (c uint64, ok bool, err error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		found bool
		ferr  error
	)
	for _, f := range v.filters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := d.stream.GetMsg(ctx, p+1, jetstream.WithGetMsgSubject(f))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
			case err != nil:
				ferr = err
			default:
				found = true
			}
		}()
	}
	wg.Wait()
	if ferr != nil {
		return 0, false, fmt.Errorf("%s: look for the owned shards' messages after sequence %d: %w", d.source, p, ferr)
	}
	if found {
		return 0, false, nil
	}
	if p == 0 {
		return 0, true, nil // an empty stream
	}
	// The message at p, or, if a later one of its subject superseded it,
	// the closest before it that is still there: the stream was complete
	// up to what it says when it was stored, before p.
	var m *jetstream.RawStreamMsg
	for q := p; q > 0 && q+maxWalkBack > p; q-- {
		m, err = d.stream.GetMsg(ctx, q)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			m = nil
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("%s: read the message at sequence %d: %w", d.source, q, err)
		}
		break
	}
	if m == nil {
		return 0, false, nil // the next bookmark
	}
	e, err := parse(d.prefix, m.Subject, m.Sequence, m.Header, nil)
	if err != nil {
		return 0, false, err
	}
	if e.kind == kindKey && e.shards != v.shards {
		return 0, false, fmt.Errorf("%s: the message at sequence %d was published %s, this downstream reads %s (a relay with another Options.Shards writes the stream): %w", d.source, e.seq, layout(e.shards), layout(v.shards), driver.ErrExpired)
	}
	return e.committed(), true, nil
}

// maxWalkBack bounds how many sequences confirm looks back from a
// bookmark's for a message still in the stream.
const maxWalkBack = 16

// readToBookmark reads the owned shards after sequence after, handing fn
// every message, until the event stream sends a Bookmark (asked for at
// once), whose sequence it returns.
func (d *Downstream[T]) readToBookmark(ctx context.Context, v *view, after uint64, fn func(driver.Event[entry])) (uint64, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	progress := make(chan struct{}, 1)
	progress <- struct{}{}
	var (
		at  uint64
		got bool
	)
	err := v.es.Watch(cctx, core.ResourceVersion(after), driver.WatchOptions[entry]{Progress: progress, Emit: func(batch []driver.Event[entry]) error {
		for _, ev := range batch {
			if ev.Type == driver.Bookmark {
				at, got = uint64(ev.RV), true
				cancel()
				return nil
			}
			fn(ev)
		}
		return nil
	}})
	if got {
		return at, nil
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return 0, fmt.Errorf("%s: read the owned shards up to the head: %w", d.source, err)
}

// listPartial lists the owned shards' keys at a version confirmed as
// above: one read of their subjects (the last message of each), then, if
// the proof fails at its end, reads on to the next bookmark and tries
// again, for at most listCatchUp.
func (d *Downstream[T]) listPartial(ctx context.Context, v *view, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	state := map[string]entry{}
	var bad []driver.Event[entry]
	fold := func(ev driver.Event[entry]) {
		if ev.Err != nil {
			bad = append(bad, ev)
			return
		}
		state[ev.Key] = ev.Object
	}
	top, err := v.es.List(ctx, driver.ListSink[entry]{Emit: func(ev driver.Event[entry]) error {
		fold(ev)
		return nil
	}})
	if err != nil {
		return 0, err
	}
	pos := uint64(top)
	deadline := time.Now().Add(listCatchUp)
	var c uint64
	for {
		var ok bool
		if c, ok, err = d.confirm(ctx, v, pos); err != nil {
			return 0, err
		} else if ok {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: the owned shards were never quiet for a round of reads within %v: their list cannot be confirmed at a version", d.source, listCatchUp)
		}
		if pos, err = d.readToBookmark(ctx, v, pos, fold); err != nil {
			return 0, err
		}
	}
	return d.emitListed(sink, bad, state, c, pos)
}

// ownedKeys is for AuditList: a key it may emit.
func (d *Downstream[T]) auditKeeps(v *view, key string) bool {
	return v == nil || v.keeps(key)
}

// listNone lists a Downstream that owns no shard: nothing, at the version
// the stream is complete up to.
func (d *Downstream[T]) listNone(ctx context.Context) (core.ResourceVersion, error) {
	return d.Head(ctx)
}

// watchNone watches no shard: it answers progress requests, and every
// idle check, with a Bookmark at the version the stream is complete up to.
func (d *Downstream[T]) watchNone(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	last := from
	every := d.ProgressInterval()
	if every <= 0 {
		every = 5 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return driver.Stopped(ctx)
		case <-opts.Progress:
		case <-tick.C:
		}
		v, err := d.Head(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return driver.Stopped(ctx)
			}
			return err
		}
		last = max(last, v)
		if err := opts.Emit([]driver.Event[T]{{Type: driver.Bookmark, RV: last}}); err != nil {
			return err
		}
	}
}
