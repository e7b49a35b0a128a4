package natsinformer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// feed is one ephemeral, unacknowledged consumer whose messages are handed
// to a single reader in stream order, in batches: nats.go's consume
// callback appends each message to buf and the reader takes all of buf at
// once (take), so the reader pays one wake-up and one lock per batch
// rather than a channel receive in a select per message. (On
// bench.BenchmarkNATSKV, 100k keys: with a channel send per message the
// List's reader spent 0.10 s of its 1.16 s in the select and the stall
// timer's reset, decoding 0.70 s, over four Lists; batches also cut the
// process's voluntary context switches per List from ~650 to ~250.)
//
// Any consumer-level trouble (a gap in the consumer sequence, missed
// heartbeats, a consumer lost with a server or moved with a leader) ends
// the feed with a *feedError: a watch then opens a new one from the last
// sequence it emitted, after the same checks as at its start, which is
// cheaper to reason about than nats.go's ordered consumer silently
// recreating itself (it could skip past a purge without anyone noticing).
type feed struct {
	r    *streamReader
	cons jetstream.Consumer
	cc   jetstream.ConsumeContext
	errs chan error
	done chan struct{}

	window int // messages asked for at once, and the most buf holds

	mu  sync.Mutex
	buf []jetstream.Msg // delivered, not taken yet; at most window
	// spare is the batch the reader took last, reused as buf by the next
	// take once the reader is done with it.
	spare []jetstream.Msg
	ready chan struct{} // a token when buf became non-empty
	room  chan struct{} // a token when a full buf was taken

	// consumer sequence of the last message read; the next must be +1.
	cseq uint64
}

// feedError is a consumer-level failure: the stream is fine, only this
// consumer is not (lost, moved, behind a dropped connection).
type feedError struct{ err error }

func (e *feedError) Error() string { return e.err.Error() }
func (e *feedError) Unwrap() error { return e.err }

const feedHeartbeat = 2 * time.Second

// The window a feed asks for when the options left it to the adapter
// (BatchSize zero): as many messages as fit windowBytes at the stream's
// average message size, between minWindow and maxWindow. Up to two
// windows can be in the client at once (one delivered, one taken), and
// nats.go drops a subscription's messages past 64 MiB pending, so a fixed
// count is either slow for small values or unsafe for large ones:
// measured on bench.BenchmarkNATSKV (100k values of ~100 bytes, idle
// machine, five alternating runs each), 4096 against 1024 brought the
// 3-node cluster's List from 1.00–1.34x the raw KV watcher to 0.89–1.12x.
const (
	windowBytes = 16 << 20
	minWindow   = 64
	maxWindow   = 4096
)

// window returns how many messages a new feed asks for at once: the
// configured batch, or one sized by the stream's average message (from
// the last stream info read).
func (r *streamReader) window() int {
	if r.batch > 0 {
		return r.batch
	}
	st := r.stream.CachedInfo().State
	if st.Msgs == 0 || st.Bytes == 0 {
		return 1024
	}
	return int(min(max(windowBytes/(st.Bytes/st.Msgs+1), minWindow), maxWindow))
}

// openFeed creates the consumer (retrying what a cluster recovers from:
// the consumer's name makes a repeated create idempotent) and starts
// consuming.
func (r *streamReader) openFeed(ctx context.Context, cfg jetstream.ConsumerConfig) (*feed, error) {
	cfg.Name = consumerName()
	cfg.AckPolicy = jetstream.AckNonePolicy
	cfg.MemoryStorage = true
	cfg.Replicas = 1
	if cfg.InactiveThreshold == 0 {
		// Cleans up after a process that died without stopping.
		cfg.InactiveThreshold = 2 * time.Minute
	}
	if len(r.filters) > 0 && cfg.FilterSubject == "" && len(cfg.FilterSubjects) == 0 {
		cfg.FilterSubjects = r.filters
	} else if cfg.FilterSubject == "" && len(cfg.FilterSubjects) == 0 {
		cfg.FilterSubject = r.filter
	}
	create := func(ctx context.Context) (jetstream.Consumer, error) { return r.stream.CreateConsumer(ctx, cfg) }
	cons, err := retry(ctx, r.nc, create)
	if err != nil {
		return nil, r.fatal(err)
	}
	for range r.relocations(cons.CachedInfo()) {
		// The server placed the consumer on a random replica: try again
		// for one on the connected server (see localReplica).
		cfg.Name = consumerName()
		next, err := create(ctx)
		if err != nil {
			break // keep the one that works
		}
		r.deleteConsumer(cons.CachedInfo().Name)
		cons = next
		if r.local(cons.CachedInfo()) {
			r.log.Debug("nats consumer placed on the connected server", "source", r.source, "server", cons.CachedInfo().Cluster.Leader)
			break
		}
	}
	window := r.window()
	f := &feed{
		r:      r,
		cons:   cons,
		window: window,
		errs:   make(chan error, 1),
		done:   make(chan struct{}),
		buf:    make([]jetstream.Msg, 0, window),
		spare:  make([]jetstream.Msg, 0, window),
		ready:  make(chan struct{}, 1),
		room:   make(chan struct{}, 1),
	}
	cc, err := cons.Consume(f.put,
		jetstream.PullMaxMessages(window),
		jetstream.PullExpiry(10*time.Second),
		jetstream.PullHeartbeat(feedHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			select {
			case f.errs <- err:
			default:
			}
		}),
	)
	if err != nil {
		f.deleteConsumer()
		return nil, err
	}
	f.cc = cc
	return f, nil
}

// put is the consume callback: it appends m to buf, waiting while buf is
// full (the reader is behind by a whole batch), which holds nats.go's
// delivery back and with it the pull requests. It runs on nats.go's
// subscription goroutine, one message at a time.
func (f *feed) put(m jetstream.Msg) {
	f.mu.Lock()
	for len(f.buf) >= f.window {
		f.mu.Unlock()
		select {
		case <-f.room:
		case <-f.done:
			return
		}
		f.mu.Lock()
	}
	f.buf = append(f.buf, m)
	first := len(f.buf) == 1
	f.mu.Unlock()
	if first {
		select {
		case f.ready <- struct{}{}:
		default: // a token is there already
		}
	}
}

// take returns the messages delivered since the last take, in order,
// possibly none (a token on ready can outlive the messages it announced).
// The slice is the reader's until its next take.
func (f *feed) take() []jetstream.Msg {
	clear(f.spare) // the reader is done with the last batch: let it go
	f.mu.Lock()
	got := f.buf
	f.buf, f.spare = f.spare[:0], got
	f.mu.Unlock()
	if len(got) >= f.window {
		select {
		case f.room <- struct{}{}:
		default:
		}
	}
	return got
}

// pending reports whether messages wait to be taken.
func (f *feed) pending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.buf) > 0
}

func consumerName() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "dbinformer_" + hex.EncodeToString(b[:])
}

// info returns what the server said when the consumer was created.
func (f *feed) info() *jetstream.ConsumerInfo { return f.cons.CachedInfo() }

// check validates the next message's metadata: the consumer sequence must
// follow the previous one, or a message was lost in flight.
func (f *feed) check(m jetstream.Msg) (ackMeta, error) {
	meta, err := parseAck(m.Reply())
	if err != nil {
		return ackMeta{}, &feedError{fmt.Errorf("message on %q without JetStream metadata: %w", m.Subject(), err)}
	}
	if meta.cseq != f.cseq+1 {
		return ackMeta{}, &feedError{fmt.Errorf("consumer sequence jumped from %d to %d (stream sequence %d): a message was lost in flight", f.cseq, meta.cseq, meta.sseq)}
	}
	f.cseq = meta.cseq
	return meta, nil
}

// ackMeta is what a reader needs of a message's JetStream metadata.
type ackMeta struct {
	sseq, cseq uint64 // stream and consumer sequence
	pending    uint64 // messages the consumer has yet to deliver
}

var errAckSubject = errors.New("reply subject is not a JetStream ack subject")

// parseAck reads the stream and consumer sequences and the pending count
// from a message's reply subject, as nats.go's Msg.Metadata does
// (jetstream/internal/parser: "$JS.ACK.<stream>.<consumer>.<delivered>.
// <sseq>.<cseq>.<time>.<pending>", or with "<domain>.<account hash>."
// before the stream name and possibly a token after the pending count),
// without allocating: Metadata (a MsgMetadata allocated per message, its
// time and strings) was 0.19 s of a List reader's 1.16 s in the profile
// above, and our allocations per key one more than the raw KV watcher's.
func parseAck(reply string) (ackMeta, error) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return ackMeta{}, errAckSubject
	}
	// Tokens after "$JS.ACK.": 7 in the old form, 9 or more in the new.
	// Token i ends at the i-th dot (or the end of the subject) and starts
	// after the one before: one scan for the dots, no strings.Cut per token
	// nor strconv.ParseUint per number (BenchmarkParseAck: 120 ns to 75 ns
	// a message; parseAck was 0.51 s of 4.2 s of List readers in a
	// bench.BenchmarkNATSKV profile).
	var dots [9]int
	n, at := 0, 0
	for n < len(dots) {
		i := strings.IndexByte(rest[at:], '.')
		if i < 0 {
			break
		}
		dots[n] = at + i
		at += i + 1
		n++
	}
	token := func(i int) string {
		from, to := 0, len(rest)
		if i > 0 {
			from = dots[i-1] + 1
		}
		if i < n {
			to = dots[i]
		}
		return rest[from:to]
	}
	// base: the index of the stream's token.
	var base int
	switch {
	case n == 6:
		base = 0 // no domain and account hash
	case n >= 8:
		base = 2
	default:
		return ackMeta{}, errAckSubject
	}
	// From base: stream, consumer, delivered, sseq, cseq, time, pending.
	var m ackMeta
	var ok1, ok2, ok3 bool
	m.sseq, ok1 = parseDecimal(token(base + 3))
	m.cseq, ok2 = parseDecimal(token(base + 4))
	m.pending, ok3 = parseDecimal(token(base + 6))
	if !ok1 || !ok2 || !ok3 {
		return ackMeta{}, errAckSubject
	}
	return m, nil
}

// parseDecimal reads s as strconv.ParseUint(s, 10, 64) does (digits only,
// at least one, no overflow), without its error values.
func parseDecimal(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		d := uint64(s[i] - '0')
		if d > 9 || v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// close stops consuming, waits for nats.go's consume goroutines to let go of
// the handler, and deletes the consumer (best effort: InactiveThreshold
// removes it anyway).
func (f *feed) close() {
	select {
	case <-f.done:
		return
	default:
	}
	close(f.done)
	if f.cc != nil {
		f.cc.Stop()
		select {
		case <-f.cc.Closed():
		case <-time.After(5 * time.Second):
		}
	}
	f.deleteConsumer()
}

func (f *feed) deleteConsumer() { f.r.deleteConsumer(f.cons.CachedInfo().Name) }

func (r *streamReader) deleteConsumer(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = r.stream.DeleteConsumer(ctx, name)
}

// A consumer of a replicated stream runs on one of the stream's replicas,
// which the server picks at random; on any other server than the one the
// client is connected to, every message crosses a route first. For a feed
// with at least relocateMin messages to deliver at once (an initial list,
// a watch far behind), openFeed creates the consumer again, up to
// maxRelocations times, until it lands on the connected server, when that
// server holds a current replica. Measured on bench.BenchmarkNATSKVCluster
// (100k keys, 3 nodes in one process, 42 Lists): a List whose consumer was
// on another node took 0.62 s (median), on the connected node 0.42 s,
// and the random placement was most of the run-to-run spread of the
// ratio to the raw KV watcher. A create and a delete cost two meta-layer
// requests, a few milliseconds: not worth it for a short feed.
const (
	relocateMin    = 10_000
	maxRelocations = 5
)

// relocations returns how many times openFeed may create a consumer again
// for one on the connected server (see relocateMin): none when ci is on
// it already, the feed is short, or the connected server holds no current
// replica of the stream.
func (r *streamReader) relocations(ci *jetstream.ConsumerInfo) int {
	if ci.NumPending < r.relocateAt || r.local(ci) || !r.localReplica() {
		return 0
	}
	return maxRelocations
}

// local reports whether the consumer runs on the connected server (or
// the stream is not clustered, which is the same).
func (r *streamReader) local(ci *jetstream.ConsumerInfo) bool {
	if ci.Cluster == nil || ci.Cluster.Leader == "" || r.nc == nil {
		return true
	}
	return ci.Cluster.Leader == r.nc.ConnectedServerName()
}

// localReplica reports whether the connected server holds a current,
// online replica of the stream (from the last stream info read): only
// then can a consumer be placed there.
func (r *streamReader) localReplica() bool {
	si := r.stream.CachedInfo()
	if si == nil || si.Cluster == nil || r.nc == nil {
		return false
	}
	here := r.nc.ConnectedServerName()
	if here == "" {
		return false
	}
	if si.Cluster.Leader == here {
		return true
	}
	for _, p := range si.Cluster.Replicas {
		if p != nil && p.Name == here {
			return p.Current && !p.Offline
		}
	}
	return false
}

// feedStall is how long a reader that expects more messages waits before
// asking the server again whether any are still pending.
const feedStall = 2 * time.Second

// drained asks the consumer whether it has nothing pending and every
// message it delivered has been read: messages counted as pending can
// vanish before delivery (a purge), and then no message would ever carry
// NumPending 0.
func (f *feed) drained(ctx context.Context) (bool, error) {
	ci, err := retry(ctx, f.r.nc, func(ctx context.Context) (*jetstream.ConsumerInfo, error) { return f.cons.Info(ctx) })
	if err != nil {
		return false, f.r.fatal(err)
	}
	return ci.NumPending == 0 && ci.Delivered.Consumer == f.cseq, nil
}

// drain reads the feed in order and hands each message to fn until
// everything the filter matches up to sequence to has been handed over,
// and returns the last sequence handed over (after, if none).
//
// after is the position before the consumer's first message (its start
// sequence minus one; 0 for a last-per-subject consumer). A consumer that
// delivers the last message per subject first delivers its initial set
// (the last value of each subject in its node's store), in sequence order,
// then every later message; a consumer from a start sequence delivers
// every message from there. Either way, once the initial set is out (no
// pending count at once for the second kind), having handed over sequence
// s means having handed over everything matched up to s; what lies in
// (s, to] is asked of the stream leader (reader.covered), because the
// consumer may sit on a replica that has not stored it yet: then drain
// waits for the consumer to catch up.
//
// With strict, a message past to ends the drain without being handed
// over; otherwise messages delivered before the proof are handed over too
// and the caller's version is max(to, the returned sequence). On failure
// the returned sequence is still the last one handed over.
func (f *feed) drain(ctx context.Context, after, to uint64, lastPerSubject, strict bool, fn func(m jetstream.Msg, seq uint64) error) (uint64, error) {
	last := after
	initialDone := !lastPerSubject || f.info().NumPending == 0
	prove := initialDone
	stall := time.NewTimer(feedStall)
	defer stall.Stop()
	for {
		if prove {
			prove = false
			if ok, err := f.r.covered(ctx, last, to); err != nil {
				return last, err
			} else if ok {
				return last, nil
			}
		}
		select {
		case <-stall.C:
			if !initialDone {
				done, err := f.drained(ctx)
				if err != nil {
					return last, fmt.Errorf("%s: %w", f.r.source, err)
				}
				initialDone = done
			}
			prove = initialDone
			stall.Reset(feedStall)
		case <-f.ready:
			batch := f.take()
			if len(batch) == 0 {
				continue
			}
			stall.Reset(feedStall)
			for _, m := range batch {
				meta, err := f.check(m)
				if err != nil {
					return last, fmt.Errorf("%s: %w", f.r.source, err)
				}
				seq := meta.sseq
				if strict && seq > to {
					return last, nil // delivered in order: nothing matched in (last, to]
				}
				if err := fn(m, seq); err != nil {
					return last, err
				}
				last = seq
				if meta.pending == 0 {
					initialDone = true
				}
				if initialDone && last >= to {
					return last, nil
				}
				// Proved after the batch: a later position proves as much.
				prove = meta.pending == 0
			}
		case err := <-f.errs:
			return last, fmt.Errorf("%s: %w", f.r.source, f.r.fatal(&feedError{err}))
		case <-ctx.Done():
			return last, ctx.Err()
		}
	}
}
