package relay

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/internal/keyshard"
	"github.com/dbinformer/dbinformer/leader"
)

// Options configures a Relay.
type Options[T any] struct {
	// Stream is the JetStream stream the relay writes; it must exist with
	// StreamConfig's shape. Required.
	Stream string
	// Prefix is the subject prefix (the stream's subjects are Prefix.>).
	// Required.
	Prefix string
	// Codec encodes the objects; downstreams decode with the same. Nil
	// means codec.JSON.
	Codec codec.Codec[T]
	// Elector decides which relay reads the source. Required.
	Elector leader.Elector
	// ProgressInterval is how often the relay asks the source for its head
	// and publishes it as progress, so that a downstream WaitFor of a
	// version that touched no relayed key returns. Zero means 1s; negative
	// turns it off.
	ProgressInterval time.Duration
	// MaxInFlight bounds the messages published and not yet acknowledged
	// by JetStream: the relay keeps publishing the next source changes
	// while earlier ones await their acknowledgements, in order, up to
	// this many. Zero means DefaultMaxInFlight. (The relay publishes
	// through a JetStream context of its own on the connection of the one
	// New is given, whose bound on pending asynchronous publishes fits
	// this window and the copies sent after a loss.)
	MaxInFlight int
	// Logger receives the relay's transitions and errors; nil discards
	// them.
	Logger *slog.Logger
	// Metrics receives the relay's counters; nil means none. A status
	// page and Prometheus read the relay itself instead
	// (statuspage.Page.AddRelay, prommetrics.Provider.TrackRelay).
	Metrics Metrics
	// Name names the relay on a status page and in metrics; "" means the
	// stream's name.
	Name string
	// Shards, when positive, publishes each key's changes on a subject
	// that carries its shard (ShardKeySubject: shard.Of(key, Shards), the
	// hash package shard assigns keys with), so that a Downstream owning
	// some shards (DownstreamOptions.Shards, or a shard.Source over it)
	// consumes only their subjects and JetStream does the filtering. It
	// must equal the sharders' shard count. Zero keeps one subject per key
	// without its shard (KeySubject). A stream holds one layout: a relay
	// that finds keys of another layout in its stream refuses to lead and
	// says how to move (purge the stream, so that it relists into it).
	Shards int
}

// Relay reads one source ListerWatcher while its process is the leader
// and publishes every change, in source order, into a JetStream stream.
type Relay[T any] struct {
	js     jetstream.JetStream // publishes (see publisher)
	ownJS  bool                // js is the relay's own: Run cleans its publisher up
	src    driver.ListerWatcher[T]
	opts   Options[T]
	down   *Downstream[T] // reads the stream back at the start of a term
	source string
	name   string
	log    *slog.Logger
	status relayState

	durable driver.DurableAcknowledger // src, when it acknowledges positions to its server

	leading   atomic.Bool
	published atomic.Uint64 // messages published and acknowledged, for tests and metrics
	relists   atomic.Uint64 // source relists published
	repairs   atomic.Uint64 // repairs from the source published (see repair)
}

// New checks the options and the stream (I/O) and returns the relay; Run
// starts it.
func New[T any](ctx context.Context, js jetstream.JetStream, src driver.ListerWatcher[T], opts Options[T]) (*Relay[T], error) {
	if src == nil {
		return nil, errors.New("relay: New needs a source ListerWatcher")
	}
	if opts.Elector == nil {
		return nil, errors.New("relay: Options.Elector is required (leader.NewEtcd, leader.NewPostgres or leader.NewKube): exactly one relay may read the source")
	}
	if opts.Codec == nil {
		opts.Codec = codec.JSON[T]{}
	}
	if opts.ProgressInterval == 0 {
		opts.ProgressInterval = time.Second
	}
	if opts.MaxInFlight < 0 {
		return nil, fmt.Errorf("relay: Options.MaxInFlight is %d; use zero for the default (%d) or a positive bound", opts.MaxInFlight, DefaultMaxInFlight)
	}
	if opts.MaxInFlight == 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.Metrics == nil {
		opts.Metrics = NoopMetrics{}
	}
	if opts.Shards < 0 {
		return nil, fmt.Errorf("relay: Options.Shards is %d; use zero for subjects without shards or the sharders' shard count", opts.Shards)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	down, err := NewDownstream(ctx, js, opts.Stream, opts.Prefix, DownstreamOptions[T]{Codec: opts.Codec, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	pub, own := publisher(js, opts.MaxInFlight)
	r := &Relay[T]{js: pub, ownJS: own, src: src, opts: opts, down: down, log: log, name: cmp.Or(opts.Name, opts.Stream),
		source: fmt.Sprintf("relay to stream %q", opts.Stream)}
	if a, ok := driver.Capability[driver.DurableAcknowledger](src); ok {
		r.durable = a
	}
	return r, nil
}

// publisher returns the JetStream context the relay publishes through: one
// of its own on js's connection, whose pending asynchronous publishes time
// out after ackTimeout and whose bound on them fits window. nats.go keeps
// a publish's future until it is answered, times out or the connection
// reconnects; the acknowledgements lost with a stream leader (the
// pipeline settles those messages by sending them again) would otherwise
// stay pending in the caller's context for good, and after a few such
// losses fill its bound (4000 by default) and stall every publish. js
// itself (own false) when its connection is not at hand.
func publisher(js jetstream.JetStream, window int) (pub jetstream.JetStream, own bool) {
	nc := js.Conn()
	if nc == nil {
		return js, false
	}
	// The window, the copies of it sent after a loss, and the lost ones
	// until they time out.
	pub, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(ackTimeout), jetstream.WithPublishAsyncMaxPending(4*window))
	if err != nil {
		return js, false
	}
	return pub, true
}

// subject is the subject of key's changes; tok is encodeKey(key).
func (r *Relay[T]) subject(key, tok string) string {
	if r.opts.Shards > 0 {
		return shardPrefix(r.opts.Prefix, r.opts.Shards, keyshard.Of(key, r.opts.Shards)) + tok
	}
	return r.opts.Prefix + "." + tokKey + "." + tok
}

// Leading reports whether this relay is the elected leader now.
func (r *Relay[T]) Leading() bool { return r.leading.Load() }

// Published returns how many messages this relay has published and
// JetStream has acknowledged.
func (r *Relay[T]) Published() uint64 { return r.published.Load() }

// Relists returns how many relists of the source this relay has published.
func (r *Relay[T]) Relists() uint64 { return r.relists.Load() }

// Run campaigns through the Elector and relays while leader, until ctx
// ends (then nil) or the source fails permanently (that error).
func (r *Relay[T]) Run(ctx context.Context) error {
	if r.ownJS {
		// Its reply subscription and the goroutine that watches the
		// connection for it, and what is still pending (a publish of an
		// ended term): the connection may outlive the relay.
		defer r.js.CleanupPublisher()
	}
	return r.opts.Elector.Run(ctx, r.lead)
}

// ackTimeout bounds the wait for each acknowledgement of a publish.
const ackTimeout = 10 * time.Second

var (
	errDeposed = errors.New("a relay with a later term has written to the stream")
	errFenced  = errors.New("the stream did not end where the relay expected: another relay published meanwhile, or an earlier message of this relay was not stored")
)

// publishError is a failed publish: what landed is unknown until the
// stream is read again.
type publishError struct{ err error }

func (e *publishError) Error() string { return "publish: " + e.err.Error() }
func (e *publishError) Unwrap() error { return e.err }

func (r *Relay[T]) lead(ctx context.Context, t leader.Term) error {
	if r.durable != nil {
		// Emit's return no longer means the batch is in the stream (the
		// pipeline keeps it in flight): from the first term on, the source
		// may discard only what JetStream has acknowledged. (Not before:
		// a relay that never leads must not hold back a source that other
		// tables of the same slot share.)
		r.durable.GateAcknowledgements(true)
	}
	r.status.leading(t, true)
	r.leading.Store(true)
	r.opts.Metrics.Leading(true, t.Epoch)
	defer func() {
		r.leading.Store(false)
		r.status.leading(t, false)
		r.opts.Metrics.Leading(false, t.Epoch)
	}()
	backoff := 100 * time.Millisecond
	var ts termState
	for {
		err := r.term(ctx, t, &ts)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case errors.Is(err, driver.ErrPermanent):
			r.log.Error("relay source failed permanently", "relay", r.source, "err", err)
			return err
		case errors.Is(err, errDeposed):
			// The election has granted a later term: ours ends soon.
			r.log.Warn("relay deposed; waiting for the election to notice", "relay", r.source, "epoch", t.Epoch)
			<-ctx.Done()
			return nil
		}
		r.log.Warn("relay restarts from the stream", "relay", r.source, "err", err, "retry_in", backoff)
		r.status.restarted(err)
		r.opts.Metrics.TermRestarted(err)
		tm := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			tm.Stop()
			return nil
		case <-tm.C:
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// term relays from what the stream holds until something fails. state
// carries what one attempt of an election term tells the next.
func (r *Relay[T]) term(ctx context.Context, t leader.Term, ts *termState) (err error) {
	st, partialV, partial, err := r.read(ctx, t.Epoch, ts.wrote, ts.acked)
	if err != nil {
		return err
	}
	var acked atomic.Uint64
	p := newPipeline(ctx, r.js, r.source, r.opts.MaxInFlight, &r.published, func(v uint64) {
		r.acknowledge(v)
		acked.Store(v)
	})
	before := r.published.Load()
	defer func() {
		// Whatever ended the term, what is in flight is settled first;
		// a publish failure explains the end better than the watch's
		// stop it caused.
		if perr := p.close(); perr != nil && ctx.Err() == nil {
			err = perr
		}
		ts.wrote = ts.wrote || r.published.Load() > before
		ts.acked = max(ts.acked, acked.Load())
		if p.brokenChain() {
			r.log.Warn("relay message stored after one that failed; the next attempt repairs the stream from the source, or relists", "relay", r.source, "epoch", t.Epoch, "acknowledged", ts.acked)
			ts.broken = true
		}
	}()
	relist := st.carry(ts, st.committed == 0 || partial != nil)
	first, ack := r.first(st, partialV, partial != nil, relist)
	// The term's first message: from here on a relay of an earlier term
	// finds a later epoch in the stream and stops.
	if err := p.send(st, []*nats.Msg{first}, ack); err != nil {
		return err
	}
	if err := r.takeOver(p); err != nil {
		return err
	}
	if !relist {
		relist, err = r.restore(p.ctx, st)
		if err != nil {
			return err
		}
	}
	st.puts = nil
	r.log.Info("relay term starts", "relay", r.source, "epoch", t.Epoch, "from", st.committed, "relist", relist, "repair", st.repair != nil)
	for {
		if relist {
			force := partial
			if st.late != nil {
				force = maps.Clone(st.late)
				maps.Copy(force, partial)
				st.late = nil
			}
			if err := r.relist(p.ctx, p, st, force); err != nil {
				return err
			}
			partial, relist, ts.repair, ts.late = nil, false, nil, nil
		}
		err := r.watch(p.ctx, p, st)
		if ctx.Err() != nil {
			return err
		}
		if perr := p.failure(); perr != nil {
			return perr
		}
		if errors.Is(err, driver.ErrExpired) {
			r.expired(st, err)
			relist = true
			continue
		}
		var pe *publishError
		if errors.Is(err, errFenced) || errors.As(err, &pe) || errors.Is(err, driver.ErrPermanent) {
			return err
		}
		// The source failed; the stream is as we left it.
		r.log.Warn("relay source watch failed; watching again", "relay", r.source, "from", st.committed, "err", err)
		tm := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			tm.Stop()
			return err
		case <-tm.C:
		}
	}
}

// relist lists the source and publishes what differs from the stream as
// one group at the list's version: puts for new and changed keys, deletes
// for keys gone, and every key of an aborted group.
func (r *Relay[T]) relist(ctx context.Context, p *pipeline, st *state, force map[string]bool) error {
	objs := map[string]change{}
	v, err := r.src.List(ctx, driver.ListSink[T]{Emit: func(ev driver.Event[T]) error {
		objs[ev.Key] = r.change(ev)
		return nil
	}})
	if err != nil {
		return fmt.Errorf("list the source: %w", err)
	}
	ver := uint64(v)
	if ver < st.committed {
		return fmt.Errorf("the source listed at version %d, before version %d the stream already holds", ver, st.committed)
	}
	var changes []change
	for _, key := range slices.Sorted(maps.Keys(objs)) {
		c := objs[key]
		if old, had := st.hashes[key]; c.op == opPut && had && old == sha256.Sum256(c.data) && !force[key] {
			continue
		}
		changes = append(changes, c)
	}
	gone := map[string]bool{}
	for key := range st.hashes {
		if _, ok := objs[key]; !ok {
			gone[key] = true
		}
	}
	for key := range force {
		if _, ok := objs[key]; !ok {
			gone[key] = true
		}
	}
	for _, key := range slices.Sorted(maps.Keys(gone)) {
		changes = append(changes, change{key: key, op: opDel})
	}
	if ver == st.committed && len(changes) > 0 {
		// A downstream that confirmed ver would take the group for one
		// it delivered: it waits for the source's next version (see
		// repair.listed).
		st.repair = &repair{from: ver, to: ver, listed: changes, nListed: len(objs)}
		r.log.Info("relay source listed at the version the stream ends at; its relist's group waits for the source's next version", "relay", r.source, "version", ver, "changed", len(changes))
		return nil
	}
	msgs := r.group(st, ver, changes, true)
	if len(msgs) == 0 {
		msgs = append(msgs, r.progress(st, ver))
	}
	if err := p.send(st, msgs, ver); err != nil {
		return err
	}
	if len(changes) > 0 {
		st.applied(ver, changes)
	} else {
		st.committed = ver
	}
	// A relist is rare and may be large: it counts once it is stored.
	if err := p.sync(); err != nil {
		return err
	}
	r.relists.Add(1)
	r.opts.Metrics.Relisted(len(changes), len(objs))
	r.log.Info("relay published a relist of the source", "relay", r.source, "version", ver, "changed", len(changes), "listed", len(objs))
	return nil
}

// watch relays the source's changes after st.committed, or, while the
// term repairs, after the version the repair replays from.
func (r *Relay[T]) watch(ctx context.Context, p *pipeline, st *state) error {
	from := st.committed
	if st.repair != nil {
		from, st.repair.changes = st.repair.from, slices.Clone(st.repair.listed)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var progress chan struct{}
	if pr, ok := driver.Capability[driver.ProgressReporter](r.src); ok && pr.ReportsProgress() && r.opts.ProgressInterval > 0 {
		progress = make(chan struct{}, 1)
		go func() {
			tk := time.NewTicker(r.opts.ProgressInterval)
			defer tk.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case <-tk.C:
					select {
					case progress <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return r.src.Watch(wctx, core.ResourceVersion(from), driver.WatchOptions[T]{
		Progress: progress,
		Emit: func(batch []driver.Event[T]) error {
			for i := 0; i < len(batch); {
				v := uint64(batch[i].RV)
				j := i
				var changes []change
				for ; j < len(batch) && uint64(batch[j].RV) == v; j++ {
					if batch[j].Type != driver.Bookmark {
						changes = append(changes, r.change(batch[j]))
					}
				}
				i = j
				if st.repair != nil {
					if err := r.repairStep(p, st, v, changes); err != nil {
						return err
					}
					continue
				}
				if len(changes) == 0 {
					// A bookmark: the source's head, published as progress
					// when it moved.
					if v > st.committed {
						if err := p.send(st, []*nats.Msg{r.progress(st, v)}, v); err != nil {
							return err
						}
						st.committed = v
					}
					continue
				}
				if v <= st.committed {
					return fmt.Errorf("the source delivered a change of %q at version %d, not after version %d", changes[0].key, v, st.committed)
				}
				if err := p.send(st, r.group(st, v, changes, false), v); err != nil {
					return err
				}
				st.applied(v, changes)
			}
			return nil
		},
	})
}

// acknowledge is the pipeline's report that JetStream stored everything
// up to source version v: only now may the source discard it.
func (r *Relay[T]) acknowledge(v uint64) {
	if r.durable != nil {
		r.durable.AcknowledgeDurable(core.ResourceVersion(v))
	}
	r.status.stored(v)
	r.opts.Metrics.Stored(core.ResourceVersion(v))
}
