package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
)

// DownstreamOptions configures a Downstream.
type DownstreamOptions[T any] struct {
	// Codec decodes the relayed objects; it must be the relay's. Nil means
	// codec.JSON.
	Codec codec.Codec[T]
	// Logger receives debug lines; nil discards them.
	Logger *slog.Logger
	// IdleCheck is how often an idle watch reads the stream's head to
	// send a Bookmark (natsinformer.EventStreamOptions.IdleCheck); zero
	// means 5s.
	IdleCheck time.Duration
	// Metrics receives the Downstream's own counters (its informer's go
	// through core.InformerMetrics); nil means none.
	Metrics DownstreamMetrics
	// Shards is the relay's Options.Shards, and Owned the shards this
	// Downstream reads: only their subjects are consumed (see
	// FilterShards, which a shard.Source calls with its owned set; Owned
	// nil with Shards set reads no key until then). Zero Shards reads
	// every key.
	Shards int
	Owned  []int
}

// Downstream is a driver.ListerWatcher over a relay's stream whose resource
// version is the source's own version (the Postgres commit LSN, the etcd
// revision, the Kubernetes resourceVersion): WaitFor(ctx, v) after a write
// at v to the source means the same thing here as next to the source.
type Downstream[T any] struct {
	es     *natsinformer.EventStream[entry]
	stream jetstream.Stream
	prefix string
	source string
	codec  codec.Codec[T]
	log    *slog.Logger
	met    DownstreamMetrics

	// For the views of FilterShards.
	js         jetstream.JetStream
	streamName string
	logger     *slog.Logger
	idle       time.Duration
	shards     int
	logLayout  sync.Once

	read atomic.Uint64 // messages parsed: MessagesRead

	mu       sync.Mutex
	view     *view // nil: every key
	parked   *downPark
	catchUps catchUpStats // since the last summary logged

	audit auditWatch[T] // what the watches delivered, for AuditList
}

// downPark remembers the stream sequence of the commit point at which
// the last List or watch ended, so that Watch(version) starts there
// without searching.
type downPark struct{ version, seq uint64 }

var (
	_ driver.ListerWatcher[int]   = (*Downstream[int])(nil)
	_ driver.HeadReader           = (*Downstream[int])(nil)
	_ driver.ProgressReporter     = (*Downstream[int])(nil)
	_ driver.ProgressIntervaler   = (*Downstream[int])(nil)
	_ driver.HealWaiter           = (*Downstream[int])(nil)
	_ driver.CodecProvider[int]   = (*Downstream[int])(nil)
	_ driver.AuditLister[int]     = (*Downstream[int])(nil)
	_ natsinformer.Reducer[entry] = (*Downstream[int])(nil).reduce
)

// NewDownstream reads the relay stream (I/O) and returns its
// ListerWatcher. A stream that does not exist or cannot hold a relay is
// refused with the fix. The connection behind js is the caller's.
func NewDownstream[T any](ctx context.Context, js jetstream.JetStream, stream, prefix string, opts DownstreamOptions[T]) (*Downstream[T], error) {
	st, err := checkStream(ctx, js, stream, prefix)
	if err != nil {
		return nil, err
	}
	if opts.Codec == nil {
		opts.Codec = codec.JSON[T]{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NoopMetrics{}
	}
	if opts.Shards < 0 {
		return nil, fmt.Errorf("relay stream %q: DownstreamOptions.Shards is %d", stream, opts.Shards)
	}
	d := &Downstream[T]{stream: st, prefix: prefix, codec: opts.Codec, log: log, met: opts.Metrics,
		source: fmt.Sprintf("relay stream %q", stream),
		js:     js, streamName: stream, logger: opts.Logger, idle: opts.IdleCheck, shards: opts.Shards}
	d.es, err = natsinformer.NewEventStream(ctx, js, stream, natsinformer.EventStreamOptions[entry]{
		// The stream holds each key's last change: the informer's cache
		// is the only copy of the state a Downstream needs, and a Watch
		// starts at its sequence without replaying the stream.
		Stateless: true,
		// checkStream refused age and size limits: a message leaves
		// the stream only when a later one of its subject supersedes it.
		Compacted: true,
		Reduce:    d.reduce,
		Filter:    prefix + ".>",
		Key:       func(subject string) (string, error) { return subject, nil },
		Logger:    opts.Logger,
		IdleCheck: opts.IdleCheck,
	})
	if err != nil {
		return nil, err
	}
	if opts.Shards > 0 {
		if err := d.FilterShards(ctx, opts.Shards, opts.Owned); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// MessagesRead returns how many messages this Downstream has read from
// the stream (Lists, watches, audits): with owned shards, only theirs.
func (d *Downstream[T]) MessagesRead() uint64 { return d.read.Load() }

// reduce parses every message as the state of its subject: the relay
// stream is already the per-key state (the event stream is Stateless).
func (d *Downstream[T]) reduce(_ entry, _ bool, m natsinformer.Message) (entry, bool, error) {
	d.read.Add(1)
	e, err := parse(d.prefix, m.Subject, m.Sequence, m.Header, m.Data)
	return e, err == nil, err
}

// ReportsProgress is true: a progress request is answered with a Bookmark
// at the last version the relay completed, once the watch has read the
// stream up to its head. WaitFor of a source version that touched no
// relayed key returns once the relay has published the source's head as
// progress (Options.ProgressInterval).
func (d *Downstream[T]) ReportsProgress() bool { return true }

// ProgressInterval is the idle check's: see natsinformer.
func (d *Downstream[T]) ProgressInterval() time.Duration { return d.es.ProgressInterval() }

// Codec is the one the Downstream decodes with (driver.CodecProvider):
// an informer with checkpoints over it saves its objects with the same,
// with no option to set by hand.
func (d *Downstream[T]) Codec() codec.Codec[T] { return d.codec }

// WaitHealed is the event stream's: an informer backing off after the NATS
// connection dropped retries as soon as it is back, not at the end of its
// sleep.
func (d *Downstream[T]) WaitHealed(ctx context.Context) error { return d.es.WaitHealed(ctx) }

// Head returns the last source version the stream holds completely.
func (d *Downstream[T]) Head(ctx context.Context) (core.ResourceVersion, error) {
	e, ok, err := d.last(ctx)
	if err != nil || !ok {
		return 0, err
	}
	return core.ResourceVersion(e.committed()), nil
}

// last reads the stream's last message.
func (d *Downstream[T]) last(ctx context.Context) (entry, bool, error) {
	m, err := d.stream.GetLastMsgForSubject(ctx, d.prefix+".>")
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return entry{}, false, nil
	}
	if err != nil {
		return entry{}, false, fmt.Errorf("%s: read the last message: %w", d.source, err)
	}
	e, err := parse(d.prefix, m.Subject, m.Sequence, m.Header, nil)
	return e, err == nil, err
}

// List reads the stream (one pass: it keeps one message per key), goes on
// reading what was appended meanwhile until it has caught up at a point
// where the relay completed a group (a later change of a key removes its
// earlier message, so a read that stopped at an older head could miss
// it), and emits every key whose last change is a put, at that version.
func (d *Downstream[T]) List(ctx context.Context, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	if v := d.currentView(); v != nil && !v.all {
		if v.es == nil {
			return d.listNone(ctx)
		}
		return d.listPartial(ctx, v, sink)
	}
	state := map[string]entry{}
	var bad []driver.Event[entry]
	var last entry
	fold := func(ev driver.Event[entry]) {
		if ev.Err != nil {
			bad = append(bad, ev)
			return
		}
		state[ev.Key] = ev.Object
		if ev.Object.seq > last.seq {
			last = ev.Object
		}
	}
	top, err := d.es.List(ctx, driver.ListSink[entry]{Emit: func(ev driver.Event[entry]) error {
		fold(ev)
		return nil
	}})
	if err != nil {
		return 0, err
	}
	pos := uint64(top)
	if pos > 0 {
		last, pos, err = d.readOn(ctx, pos, last, true, func(ev driver.Event[entry]) error {
			fold(ev)
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	return d.emitListed(sink, bad, state, last.version, pos)
}

// emitListed ends a List at source version v, read up to stream sequence
// pos: the undecodable keys first (events with Err), then every key's
// state, and v parked for the Watch that follows.
func (d *Downstream[T]) emitListed(sink driver.ListSink[T], bad []driver.Event[entry], state map[string]entry, v, pos uint64) (core.ResourceVersion, error) {
	rv := core.ResourceVersion(v)
	for _, ev := range bad {
		if err := sink.Emit(driver.Event[T]{Type: driver.Added, Key: ev.Key, RV: rv, Err: ev.Err}); err != nil {
			return 0, err
		}
	}
	for _, e := range state {
		if e.kind != kindKey || e.op == opDel {
			continue
		}
		if err := sink.Emit(d.event(driver.Added, e, rv)); err != nil {
			return 0, err
		}
	}
	d.park(v, pos)
	return rv, nil
}

// listCatchUp bounds how long a List waits for the relay to complete the
// group the stream ends in.
const listCatchUp = 30 * time.Second

var errCatchUp = errors.New("relay group not completed")

// readOn reads the stream after sequence after, handing fn every message
// (parsed, or with Err set), until it has read up to the stream's head at
// a point where the relay completed a group: a watch asked for a
// bookmark, which it sends once it has read up to the head, asked again
// while the last message read (last, the one given if none) is inside a
// group, for at most listCatchUp from the first such bookmark (from the
// start with bounded: List's read of what came after its own is short,
// while an audit's read of the whole stream is paced). It returns the last message read and the
// head's sequence; every message up to it that the stream still held was
// handed over, and one it no longer held was removed by a later one of the
// same subject, also at or before the head. Nothing after the head is
// handed over. List uses it to catch up after its read; AuditList reads
// the whole stream through it.
func (d *Downstream[T]) readOn(ctx context.Context, after uint64, last entry, bounded bool, fn func(driver.Event[entry]) error) (entry, uint64, error) {
	pos := after
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var stuck *time.Timer
	if bounded {
		stuck = time.AfterFunc(listCatchUp, func() { cancel(errCatchUp) })
	}
	defer func() {
		if stuck != nil {
			stuck.Stop()
		}
	}()
	progress := make(chan struct{}, 1)
	progress <- struct{}{}
	caught := false
	err := d.es.Watch(cctx, core.ResourceVersion(after), driver.WatchOptions[entry]{Progress: progress, Emit: func(batch []driver.Event[entry]) error {
		if caught {
			return nil // past the head the read stopped at
		}
		for _, ev := range batch {
			if ev.Type == driver.Bookmark {
				pos = uint64(ev.RV)
				if last.seq == 0 || last.commitPoint() {
					caught = true
					cancel(nil)
					return nil
				}
				// The relay is inside a group: wait for its end.
				if stuck == nil {
					stuck = time.AfterFunc(listCatchUp, func() { cancel(errCatchUp) })
				}
				select {
				case progress <- struct{}{}:
				default:
				}
				continue
			}
			if err := fn(ev); err != nil {
				return err
			}
			if ev.Err == nil && ev.Object.seq > last.seq {
				last = ev.Object
			}
			pos = max(pos, uint64(ev.RV))
		}
		return nil
	}})
	if caught {
		return last, pos, nil
	}
	if ctx.Err() != nil {
		return last, pos, ctx.Err()
	}
	if errors.Is(context.Cause(cctx), errCatchUp) {
		return last, pos, fmt.Errorf("%s ends inside the changes of source version %d (sequence %d) and stayed so for %v: is a relay leader running? A new one closes the group", d.source, last.version, last.seq, listCatchUp)
	}
	return last, pos, fmt.Errorf("%s: read up to the head: %w", d.source, err)
}

// event turns a key message into an event at rv.
func (d *Downstream[T]) event(typ driver.EventType, e entry, rv core.ResourceVersion) driver.Event[T] {
	ev := driver.Event[T]{Type: typ, Key: e.key, RV: rv}
	switch e.op {
	case opDel:
		ev.Type = driver.Deleted
	case opErr:
		ev.Err = &driver.DecodeError{Source: d.source + " (relayed)", Key: e.key, RV: rv, Err: errors.New(e.errText)}
	default:
		obj, err := codec.Decode(d.codec, e.data)
		if err != nil {
			ev.Err = &driver.DecodeError{Source: d.source, Key: e.key, RV: rv, Err: err}
		} else {
			ev.Object, ev.HasObject = obj, true
		}
	}
	return ev
}

func (d *Downstream[T]) park(version, seq uint64) {
	d.mu.Lock()
	d.parked = &downPark{version: version, seq: seq}
	d.mu.Unlock()
}

// Watch delivers the changes after source version from, one batch per
// source transaction (or several), in source order. A position the stream
// no longer holds is driver.ErrExpired (the informer relists from the
// stream, never from the source).
func (d *Downstream[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	if opts.Emit == nil {
		return fmt.Errorf("%s: WatchOptions.Emit is required", d.source)
	}
	if v := d.currentView(); v != nil && !v.all {
		if v.es == nil {
			return d.watchNone(ctx, from, opts)
		}
		return d.watchPartial(ctx, v, from, opts)
	}
	seq, err := d.seqFor(ctx, uint64(from))
	if err != nil {
		if ctx.Err() != nil {
			return driver.Stopped(ctx)
		}
		return err
	}
	d.audit.started(uint64(from))
	t := &translator[T]{ctx: ctx, d: d, emit: opts.Emit, lastV: uint64(from), lastSeq: seq, lastChange: uint64(from),
		takenV: uint64(from), takenSeq: seq, takenChange: uint64(from)}
	err = d.es.Watch(ctx, core.ResourceVersion(seq), driver.WatchOptions[entry]{Emit: t.take, Progress: opts.Progress})
	d.park(t.lastV, t.lastSeq)
	return err
}

// seqFor returns the stream sequence after which the changes past source
// version from begin.
func (d *Downstream[T]) seqFor(ctx context.Context, from uint64) (uint64, error) {
	d.mu.Lock()
	p := d.parked
	if p != nil && p.version == from {
		d.parked = nil
	}
	d.mu.Unlock()
	if p != nil && p.version == from {
		return p.seq, nil
	}
	if from == 0 {
		return 0, nil
	}
	last, ok, err := d.last(ctx)
	if err != nil {
		return 0, err
	}
	if !ok || last.committed() < from {
		return 0, fmt.Errorf("%s: source version %d is past the last version the stream holds (was the stream purged or recreated?): %w", d.source, from, driver.ErrExpired)
	}
	if last.version <= from {
		return last.seq, nil
	}
	// The first message whose version is past from: the versions rise
	// with the sequence, so search; GetMsg with a subject returns the
	// first message at or after a sequence (skipping removed ones).
	info, err := d.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", d.source, err)
	}
	lo, hi := info.State.FirstSeq, last.seq // pred(hi) holds
	var found entry
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := d.at(ctx, mid)
		if err != nil {
			return 0, err
		}
		if e.version > from {
			hi, found = mid, e
		} else {
			lo = e.seq + 1
		}
	}
	if found.seq == 0 || found.seq > hi {
		if found, err = d.at(ctx, hi); err != nil {
			return 0, err
		}
	}
	return found.seq - 1, nil
}

// at reads the first message at or after seq.
func (d *Downstream[T]) at(ctx context.Context, seq uint64) (entry, error) {
	m, err := d.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(d.prefix+".>"))
	if err != nil {
		return entry{}, fmt.Errorf("%s: read the message at or after sequence %d: %w", d.source, seq, err)
	}
	return parse(d.prefix, m.Subject, m.Sequence, m.Header, nil)
}
