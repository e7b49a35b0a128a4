package natsinformer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/filter"
)

// Message is one event of an event stream, as a Reducer sees it. Data and
// Header belong to the client library: copy what the state keeps.
type Message struct {
	Subject  string
	Sequence uint64
	Time     time.Time
	Header   nats.Header
	Data     []byte
}

// Reducer folds one event into an entity's state. prev is the state so far
// and exists tells whether the entity has one. It returns the new state
// and keep=true, or keep=false to delete the entity. It must not modify
// prev in place (the informer's cache holds it): return a new value. An
// error leaves the entity's state as it was and is reported as the event's
// *driver.DecodeError; the stream goes on.
type Reducer[S any] func(prev S, exists bool, msg Message) (next S, keep bool, err error)

// EventStreamOptions configures an event-stream ListerWatcher. Reduce is
// required; the zero value of everything else means: every subject of the
// stream, the entity key is the subject's last token, replay from the
// stream's first message.
type EventStreamOptions[S any] struct {
	// Reduce folds events into entity state.
	Reduce Reducer[S]
	// Filter is a subject pattern within the stream ("orders.*.events");
	// empty means every subject of the stream.
	Filter string
	// Filters, instead of Filter, are several subject patterns within
	// the stream, consumed by one consumer (nats-server 2.10's
	// FilterSubjects): a relay Downstream that owns some shards reads
	// their subjects only. Not with Filter or Where.
	Filters []string
	// Where, when set, makes the informer a partial sync over the folded
	// entities (package filter): an Eq on filter.Key can narrow Filter
	// (see filter.go), the rest is evaluated on each folded state; an
	// entity that starts matching reaches handlers as an add, one that
	// stops as a delete carrying its last matching state.
	Where *filter.Filter[S]
	// KeyToken is the position of the subject token that names the entity:
	// 1 is the first token, -1 (and 0, the default) the last.
	KeyToken int
	// Key derives the entity key from a subject; it overrides KeyToken. An
	// error is reported like a reducer error.
	Key func(subject string) (string, error)
	// Snapshot and SnapshotSeq start the replay from stored state: the
	// entities as folded up to and including sequence SnapshotSeq. The map
	// is copied. The stream must still hold SnapshotSeq+1.
	Snapshot    map[string]S
	SnapshotSeq uint64
	// Stateless is for streams whose every message already is its
	// entity's whole state (one message kept per subject, as in a KV
	// bucket or a relay stream): Reduce only parses, and the informer's
	// cache is the only copy of the state. Reduce then sees every event
	// with exists false and the zero prev; a Watch keeps nothing per
	// entity and starts at its version without replaying the stream
	// before it; its puts are reported Added (the informer tells adds from
	// updates by its cache) and a keep=false result is a Deleted carrying
	// only the key; a List keeps each entity's last state only while it
	// lists. Not with Where or Snapshot, which need the folded state.
	Stateless bool
	// Compacted says that the stream removes a message only when later
	// ones of the same subject supersede it: limits retention, no age or
	// size limit, at most MaxMsgsPerSubject (NewEventStream checks the
	// stream's configuration), and nothing purged by hand. A Stateless
	// watch from before the first retained sequence then misses only
	// superseded messages (the superseding ones follow), so it starts
	// where the stream does instead of failing with driver.ErrExpired: a
	// List of a young stream whose first messages were superseded while it
	// read does not relist. Only with Stateless.
	Compacted bool
	// Logger receives debug lines; nil discards them.
	Logger *slog.Logger
	// BatchSize bounds buffered messages and events per batch; zero (or
	// negative) means 256.
	BatchSize int
	// IdleCheck: see KVOptions.IdleCheck; zero means 5s, negative off.
	IdleCheck time.Duration
}

// EventStream lists and watches entities folded from a JetStream stream of
// events. The resource version is the stream sequence.
type EventStream[S any] struct {
	streamReader
	opts    EventStreamOptions[S]
	residue *filter.Filter[S] // nil: unfiltered

	mu     sync.Mutex
	parked *streamPark[S]
}

var (
	_ driver.ListerWatcher[int] = (*EventStream[int])(nil)
	_ driver.HeadReader         = (*EventStream[int])(nil)
	_ driver.ProgressReporter   = (*EventStream[int])(nil)
	_ driver.SupersededSkipper  = (*EventStream[int])(nil)
)

type streamPark[S any] struct {
	rv    uint64
	state map[string]S
}

// NewEventStream checks the options, reads the stream's info (I/O) and
// returns its ListerWatcher; a stream that does not exist is an error
// naming it. The connection behind js is the caller's.
func NewEventStream[S any](ctx context.Context, js jetstream.JetStream, stream string, opts EventStreamOptions[S]) (*EventStream[S], error) {
	source := fmt.Sprintf("nats stream %q", stream)
	if opts.Reduce == nil {
		return nil, fmt.Errorf("%s: EventStreamOptions.Reduce is required", source)
	}
	if err := checkPattern("stream name", stream, false); err != nil || strings.Contains(stream, ".") {
		return nil, fmt.Errorf("%s: invalid stream name", source)
	}
	if len(opts.Filters) > 0 && (opts.Filter != "" || opts.Where != nil) {
		return nil, fmt.Errorf("%s: EventStreamOptions.Filters is instead of Filter and Where: set one", source)
	}
	for _, p := range opts.Filters {
		if err := checkPattern("EventStreamOptions.Filters", p, true); err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
	}
	pattern := opts.Filter
	if len(opts.Filters) == 1 {
		pattern = opts.Filters[0]
	}
	if pattern == "" && len(opts.Filters) > 1 {
		pattern = ">" // unused: the consumer and the proofs take filters
	} else if pattern == "" {
		pattern = ">"
	} else if err := checkPattern("EventStreamOptions.Filter", pattern, true); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if opts.Stateless && (opts.Where != nil || opts.Snapshot != nil) {
		return nil, fmt.Errorf("%s: EventStreamOptions.Stateless keeps no folded state, which Where and Snapshot need: set one or the other", source)
	}
	if opts.Compacted && !opts.Stateless {
		return nil, fmt.Errorf("%s: EventStreamOptions.Compacted needs Stateless (a fold needs every message, superseded ones too)", source)
	}
	pattern, residue, err := streamWhere(source, pattern, &opts)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("%s does not exist: create it (jetstream.CreateStream, or `nats stream add %s`) before starting the informer: %w", source, stream, err)
		}
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if c := st.CachedInfo().Config; opts.Compacted && (c.Retention != jetstream.LimitsPolicy || c.MaxAge > 0 || c.MaxMsgs > 0 || c.MaxBytes > 0) {
		return nil, fmt.Errorf("%s: EventStreamOptions.Compacted, but the stream can remove a subject's last message (retention %v, MaxAge %v, MaxMsgs %d, MaxBytes %d): it needs limits retention and no age or size limit, or leave Compacted unset", source, c.Retention, c.MaxAge, c.MaxMsgs, c.MaxBytes)
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 256
	}
	if opts.IdleCheck == 0 {
		opts.IdleCheck = 5 * time.Second
	}
	opts.Snapshot = maps.Clone(opts.Snapshot)
	s := &EventStream[S]{opts: opts, residue: residue}
	s.init(js, st, source, pattern, opts.BatchSize, opts.IdleCheck, opts.Logger)
	if len(opts.Filters) > 1 {
		s.filters = slices.Clone(opts.Filters)
	}
	return s, nil
}

// Head returns the stream's last sequence, as its leader sees it.
func (s *EventStream[S]) Head(ctx context.Context) (core.ResourceVersion, error) {
	info, err := s.info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: read stream state: %w", s.source, err)
	}
	return core.ResourceVersion(info.State.LastSeq), nil
}

// ReportsProgress is true: see KV.ReportsProgress.
func (s *EventStream[S]) ReportsProgress() bool { return true }

// SkipsSuperseded is true when the stream keeps at most MaxMsgsPerSubject
// messages of a subject (as NewEventStream found its configuration): see
// KV.SkipsSuperseded.
func (s *EventStream[S]) SkipsSuperseded() bool { return s.supersedes }

// List replays the stream (from the snapshot, if any) up to its head, read
// from the stream leader first (or further, if more arrives meanwhile),
// and emits every entity's state. The version is the last sequence folded
// or that head, whichever is higher. Reducer errors are emitted first, as
// events with Err set.
func (s *EventStream[S]) List(ctx context.Context, sink driver.ListSink[S]) (core.ResourceVersion, error) {
	f := &folder[S]{es: s, state: maps.Clone(s.opts.Snapshot)}
	if f.state == nil {
		f.state = make(map[string]S)
	}
	var errs []driver.Event[S]
	top, err := s.replay(ctx, s.opts.SnapshotSeq, 0, func(m jetstream.Msg, seq uint64) {
		errs = f.fold(m, seq, errs, false)
	})
	if err != nil {
		return 0, err
	}
	for _, ev := range errs {
		if err := sink.Emit(ev); err != nil {
			return 0, err
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
	if !s.opts.Stateless {
		s.park(top, f.state)
	}
	s.log.Debug("nats event stream listed", "stream", s.name, "entities", len(f.state), "rv", top)
	return core.ResourceVersion(top), nil
}

// replay reads the messages after `after` in order and hands each to fn:
// with upTo == 0 up to the stream's head (or further, see feed.drain),
// otherwise up to sequence upTo exactly. It returns the position reached.
func (s *EventStream[S]) replay(ctx context.Context, after, upTo uint64, fn func(jetstream.Msg, uint64)) (uint64, error) {
	info, err := s.info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: read stream state: %w", s.source, err)
	}
	if upTo == 0 {
		s.id.reset(info)
	} else if err := s.id.check(s.source, info); err != nil {
		return 0, err
	}
	st := info.State
	if after > 0 && st.FirstSeq > after+1 {
		// The snapshot can never be replayed again: no relist can help.
		return 0, driver.Permanent(fmt.Errorf("%s: cannot replay from the snapshot at sequence %d: the stream's first retained sequence is %d", s.source, after, st.FirstSeq))
	}
	to := st.LastSeq
	if upTo > 0 {
		if upTo > to {
			return 0, fmt.Errorf("%s: cannot rebuild the state at sequence %d: the stream's last sequence is %d (was it deleted and created again?): %w", s.source, upTo, to, driver.ErrExpired)
		}
		to = upTo
	}
	if to <= after {
		return max(to, after), nil
	}
	// A consumer lost midway (a node restarted, the consumer moved) is
	// replaced from the last message handed over.
	pos := after
	start := time.Now()
	for attempt := 1; ; attempt++ {
		last, err := s.replayFrom(ctx, pos, to, upTo > 0, fn)
		if err == nil {
			return max(to, last), nil
		}
		if !startOver(ctx, start, attempt, err) {
			return 0, fmt.Errorf("replay: %w", err)
		}
		s.log.Debug("nats event stream replay reopens its consumer", "stream", s.name, "after", last, "err", err)
		pos = last
	}
}

// replayFrom is one consumer of replay, from after+1.
func (s *EventStream[S]) replayFrom(ctx context.Context, after, to uint64, strict bool, fn func(jetstream.Msg, uint64)) (uint64, error) {
	cfg := jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if after > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = after + 1
	}
	f, err := s.openFeed(ctx, cfg)
	if err != nil {
		return after, fmt.Errorf("%s: create replay consumer: %w", s.source, err)
	}
	defer f.close()
	// From a position (a snapshot, a resumed replay), a purge since the
	// state check moves the consumer's start without telling anyone.
	if d := f.info().Delivered.Stream; after > 0 && d > after {
		return after, fmt.Errorf("%s: the replay consumer starts after sequence %d, not at %d: messages were removed meanwhile: %w", s.source, d, after+1, driver.ErrExpired)
	}
	return f.drain(ctx, after, to, false, strict, func(m jetstream.Msg, seq uint64) error {
		fn(m, seq)
		return nil
	})
}

// Watch continues the fold after from, through opts.Emit, until ctx ends
// (driver.Stopped), the stream no longer holds what from needs
// (driver.ErrExpired), the stream is deleted (driver.ErrPermanent) or
// something else fails. The state at from comes from the List or watch
// that ended there; otherwise Watch replays up to from first.
func (s *EventStream[S]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[S]) error {
	f := &folder[S]{es: s}
	if s.opts.Stateless {
		// Nothing to rebuild: the watch starts at from.
		return watch[S](ctx, &s.streamReader, uint64(from), f, opts)
	}
	s.mu.Lock()
	if p := s.parked; p != nil && p.rv == uint64(from) {
		f.state = p.state
		s.parked = nil
	}
	s.mu.Unlock()
	if f.state == nil {
		f.state = maps.Clone(s.opts.Snapshot)
		if f.state == nil {
			f.state = make(map[string]S)
		}
		if uint64(from) < s.opts.SnapshotSeq {
			return fmt.Errorf("%s: cannot watch from sequence %d, before the snapshot at %d: %w", s.source, from, s.opts.SnapshotSeq, driver.ErrExpired)
		}
		if uint64(from) > s.opts.SnapshotSeq {
			if _, err := s.replay(ctx, s.opts.SnapshotSeq, uint64(from), func(m jetstream.Msg, seq uint64) {
				f.fold(m, seq, nil, false)
			}); err != nil {
				if ctx.Err() != nil {
					return driver.Stopped(ctx)
				}
				return fmt.Errorf("rebuild the state at %d: %w", from, err)
			}
		}
	}
	return watch[S](ctx, &s.streamReader, uint64(from), f, opts)
}

func (s *EventStream[S]) park(rv uint64, state map[string]S) {
	s.mu.Lock()
	s.parked = &streamPark[S]{rv: rv, state: state}
	s.mu.Unlock()
}

func (s *EventStream[S]) key(subject string) (string, error) {
	if s.opts.Key != nil {
		var k string
		err := guard("key function", func() (err error) { k, err = s.opts.Key(subject); return err })
		if err == nil && k == "" {
			err = errors.New("the key function returned an empty key")
		}
		return k, err
	}
	toks := strings.Split(subject, ".")
	i := s.opts.KeyToken
	switch {
	case i == 0:
		i = len(toks) - 1
	case i > 0:
		i--
	default:
		i += len(toks)
	}
	if i < 0 || i >= len(toks) {
		return "", fmt.Errorf("subject %q has no token %d", subject, s.opts.KeyToken)
	}
	return toks[i], nil
}

// folder is the per-entity state of one List or watch; a stateless
// stream's watch has none (state nil).
type folder[S any] struct {
	es    *EventStream[S]
	state map[string]S
}

// fold applies one event. In a watch (events=true) it appends the change
// to out; in a List only errors are appended.
func (f *folder[S]) fold(m jetstream.Msg, seq uint64, out []driver.Event[S], events bool) []driver.Event[S] {
	rv := core.ResourceVersion(seq)
	subject := m.Subject()
	key, err := f.es.key(subject)
	if err != nil {
		return append(out, driver.Event[S]{Type: driver.Modified, Key: subject, RV: rv,
			Err: &driver.DecodeError{Source: f.es.source, Key: subject, RV: rv, Err: err}})
	}
	var prev S
	var exists bool
	if !f.es.opts.Stateless {
		prev, exists = f.state[key]
	}
	msg := Message{Subject: subject, Sequence: seq, Header: m.Headers(), Data: m.Data()}
	if meta, err := m.Metadata(); err == nil {
		msg.Time = meta.Timestamp
	}
	var next S
	var keep bool
	err = guard("reducer", func() (err error) { next, keep, err = f.es.opts.Reduce(prev, exists, msg); return err })
	if err != nil {
		typ := driver.Added
		if exists {
			typ = driver.Modified
		}
		return append(out, driver.Event[S]{Type: typ, Key: key, RV: rv,
			Err: &driver.DecodeError{Source: fmt.Sprintf("%s subject %q", f.es.source, subject), Key: key, RV: rv, Err: err}})
	}
	switch {
	case keep:
		if f.state != nil {
			f.state[key] = next
		}
		if events {
			typ := driver.Added
			if exists {
				typ = driver.Modified
			}
			out = append(out, driver.Event[S]{Type: typ, Key: key, Object: next, HasObject: true, RV: rv})
		}
	case f.es.opts.Stateless:
		if f.state != nil {
			delete(f.state, key)
		}
		if events {
			out = append(out, driver.Event[S]{Type: driver.Deleted, Key: key, RV: rv})
		}
	case exists:
		delete(f.state, key)
		if events {
			out = append(out, driver.Event[S]{Type: driver.Deleted, Key: key, Object: prev, HasObject: true, RV: rv})
		}
	}
	return out
}

func (f *folder[S]) apply(m jetstream.Msg, seq uint64, out []driver.Event[S]) []driver.Event[S] {
	return rewriteLast(f.es.residue, f.fold(m, seq, out, true), len(out))
}

// lost: the folded state does not depend on old events staying in the
// stream, so nothing is lost once it has been read.
func (f *folder[S]) lost(context.Context, uint64) (string, error) { return "", nil }

func (f *folder[S]) park(rv uint64) {
	if f.state != nil {
		f.es.park(rv, f.state)
	}
}

// complete is false: a replayed fold needs every event after from.
func (f *folder[S]) complete() bool { return f.es.opts.Compacted }

// skipsSafe: the folded state does not hold values the stream could take
// back, and skipped sequences are the filter's doing: nothing to check.
func (f *folder[S]) skipsSafe() bool { return true }

func (f *folder[S]) expect(uint64) {}
