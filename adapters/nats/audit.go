package natsinformer

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core"
)

// AuditList implements core.AuditLister: List's read of the bucket (a
// consumer delivering the last message per subject, drained up to the
// stream's head as its leader reported it), streamed to sink as it arrives
// instead of folded first, so that an audit holds no copy of the bucket:
// a value is an Added event, a delete or purge marker a Deleted one, and a
// key the consumer delivers again later (a replica that caught up while it
// delivered) is emitted again, its last event holding its state at the
// version returned, as core.AuditLister allows. It parks nothing for
// watches. A consumer lost midway ends it with the error; the next audit
// reads again.
func (k *KV[T]) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink core.ListSink[T]) (core.ResourceVersion, error) {
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
		var ev core.Event[T]
		if isDelete(m) {
			ev = core.Event[T]{Type: core.Deleted, Key: key, RV: core.ResourceVersion(seq)}
		} else {
			k.fill(&ev, core.Added, key, seq, m.Data())
			if !k.residue.Keep(&ev) {
				// Outside the filter at this version: absent for the
				// informer, which a delete says if the key was emitted
				// before.
				ev = core.Event[T]{Type: core.Deleted, Key: key, RV: core.ResourceVersion(seq)}
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
