package natsinformer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// AuditList implements driver.AuditLister: List's read of the bucket (a
// consumer delivering the last message per subject, drained up to the
// stream's head as its leader reported it), streamed to sink as it arrives
// instead of folded first, so that an audit holds no copy of the bucket:
// a value is an Added event, a delete or purge marker a Deleted one, and a
// key the consumer delivers again later (a replica that caught up while it
// delivered) is emitted again, its last event holding its state at the
// version returned, as driver.AuditLister allows. It parks nothing for
// watches. A consumer lost midway ends it with the error; the next audit
// reads again.
//
// A consumer that fails before it delivered anything with an error that
// passes (on a cluster, a new consumer whose leader is not elected yet
// answers "no responders") is opened again, as List's is.
func (k *KV[T]) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		emitted := false
		s := sink
		s.Emit = func(ev driver.Event[T]) error { emitted = true; return sink.Emit(ev) }
		rv, err := k.auditRead(ctx, atLeast, s)
		if err == nil || emitted || ctx.Err() != nil || !transient(err) || time.Since(start) > clusterRetry {
			return rv, err
		}
		k.log.Debug("nats kv audit opens its consumer again", "bucket", k.bucket, "attempt", attempt, "err", err)
		if !pauseBeforeRetry(ctx, attempt) {
			return 0, ctx.Err()
		}
	}
}

// AuditUnchanged implements driver.AuditRechecker: a bucket's MaxAge, or a
// purge below a sequence, removes a key's value without a message the
// watch delivers, so a key an audit read may be gone by the time the cache
// is compared. It reports whether the key's last message is still the one
// at sequence rv, read from the stream's leader.
func (k *KV[T]) AuditUnchanged(ctx context.Context, key string, rv core.ResourceVersion) (bool, error) {
	seq, found, err := k.get(ctx, msgGetRequest{LastFor: k.subject + key})
	if err != nil {
		return false, fmt.Errorf("%s: read the last message of key %q: %w", k.source, key, err)
	}
	return found && seq == uint64(rv), nil
}

func (k *KV[T]) auditRead(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	info, err := k.info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: audit: read stream state: %w", k.source, err)
	}
	if err := k.id.check(k.source, info); err != nil {
		return 0, err
	}
	top := info.State.LastSeq
	if top == 0 {
		return 0, nil
	}
	f, err := k.openFeed(ctx, jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy})
	if err != nil {
		return 0, fmt.Errorf("%s: audit: create consumer: %w", k.source, err)
	}
	defer f.close()
	if n := f.info().NumPending; n > 0 && sink.Estimate != nil {
		sink.Estimate(int64(n))
	}
	var prev uint64
	last, err := f.drain(ctx, 0, top, true, false, func(m jetstream.Msg, seq uint64) error {
		key, ok := k.key(m.Subject())
		if !ok {
			return fmt.Errorf("%s: audit: message %d on unexpected subject %q", k.source, seq, m.Subject())
		}
		if seq < info.State.FirstSeq {
			return fmt.Errorf("%s: audit: message %d delivered, below the stream's first sequence %d as its leader reported it: the consumer's node lags", k.source, seq, info.State.FirstSeq)
		}
		if seq <= prev {
			return fmt.Errorf("%s: audit: message %d delivered after message %d: out of stream order", k.source, seq, prev)
		}
		prev = seq
		var ev driver.Event[T]
		if isDelete(m) {
			ev = driver.Event[T]{Type: driver.Deleted, Key: key, RV: core.ResourceVersion(seq)}
		} else {
			k.fill(&ev, driver.Added, key, seq, m.Data())
			if !k.residue.Keep(&ev) {
				// Outside the filter at this version: absent for the
				// informer, which a delete says if the key was emitted
				// before.
				ev = driver.Event[T]{Type: driver.Deleted, Key: key, RV: core.ResourceVersion(seq)}
			}
		}
		return sink.Emit(ev)
	})
	if err != nil {
		return 0, fmt.Errorf("%s: audit: %w", k.source, err)
	}
	rv := core.ResourceVersion(max(top, last))
	if rv < atLeast {
		return 0, fmt.Errorf("%s: audit read the bucket at sequence %d, older than the cache's %d", k.source, rv, atLeast)
	}
	return rv, nil
}

// AuditList implements driver.AuditLister: the fold List makes (from the
// snapshot, if any, up to the stream's head as its leader reported it when
// the audit began), into a state of its own, streamed to sink. The fold
// needs each entity's previous state, so the audit holds one S per entity
// while it reads; a Stateless stream's state is each message alone, and
// its audit emits every message as it arrives instead (a key emitted again
// later: its last event stands, as driver.AuditLister allows), holding
// nothing. A reducer error is an event with Err set, as in List. It
// parks nothing for watches and leaves the stream's identity as the
// watches last saw it.
func (s *EventStream[S]) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[S]) (core.ResourceVersion, error) {
	info, err := s.info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: audit: read stream state: %w", s.source, err)
	}
	if err := s.id.check(s.source, info); err != nil {
		return 0, err
	}
	top := max(info.State.LastSeq, s.opts.SnapshotSeq)
	if top < uint64(atLeast) {
		return 0, fmt.Errorf("%s: audit: the stream's head %d, as its leader reported it, is older than the cache's %d", s.source, top, atLeast)
	}
	f := &folder[S]{es: s} // Stateless: no state, each message stands alone
	if !s.opts.Stateless {
		f.state = maps.Clone(s.opts.Snapshot)
		if f.state == nil {
			f.state = make(map[string]S)
		}
	}
	var emitErr error
	var evs []driver.Event[S]
	fold := func(m jetstream.Msg, seq uint64) {
		evs = f.fold(m, seq, evs[:0], s.opts.Stateless) // a fold's own: reducer errors only
		for _, ev := range evs {
			if ev.Err == nil && ev.Type != driver.Deleted && !s.residue.Keep(&ev) {
				ev = driver.Event[S]{Type: driver.Deleted, Key: ev.Key, RV: ev.RV} // outside the filter at this version
			}
			if emitErr == nil {
				emitErr = sink.Emit(ev)
			}
		}
	}
	if top > s.opts.SnapshotSeq {
		_, err = s.replay(ctx, s.opts.SnapshotSeq, top, fold)
		if err == nil {
			err = emitErr
		}
		if err != nil {
			return 0, fmt.Errorf("%s: audit: %w", s.source, err)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(f.state)) {
		ev := driver.Event[S]{Type: driver.Added, Key: key, Object: f.state[key], HasObject: true, RV: core.ResourceVersion(top)}
		if !s.residue.Keep(&ev) {
			continue
		}
		if err := sink.Emit(ev); err != nil {
			return 0, err
		}
	}
	return core.ResourceVersion(top), nil
}
