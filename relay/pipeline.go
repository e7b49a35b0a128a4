package relay

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultMaxInFlight is Options.MaxInFlight's default: how many published
// messages may await JetStream's acknowledgement at once.
const DefaultMaxInFlight = 1024

// pipeline publishes the messages of one term in source order, keeping up
// to a window of them in flight (published, not yet acknowledged by
// JetStream) instead of waiting for each group's acknowledgements before
// the next group.
//
// Fencing: every message expects the stream's last sequence to be the one
// before the sequence computed for it (Nats-Expected-Last-Sequence), a
// check the stream's leader makes before it proposes the message to the
// replicas, so that a message another relay slipped in makes ours fail
// instead of landing behind it. A position alone does not chain the
// window, though: if another writer's message takes the sequence message
// n expected, n fails, but n+1, which expects the stream to end at that
// very sequence, is stored. The pipeline notices (an acknowledgement after
// a failure: brokenChain) and the relay then relists the source, which
// republishes whatever the stream lacks.
//
// The chain cannot be made by message id (Nats-Expected-Last-Msg-Id): on
// a replicated stream nats-server checks that header only when the
// replicas apply the message, and a mismatch there is a "critical write
// error" that takes the stream down on every replica, leaderless until an
// operator intervenes (nats-server 2.15.2: one publish with a wrong
// expected id is enough; a relay leader restarted in TestFaults hung the
// suite that way, its successor retrying STREAM.INFO for good).
//
// A message whose acknowledgement does not come within resendAfter (lost
// with a stream leader that went down, or published while the stream had
// none), or that failed in a way that says nothing of the stream (no
// responders, a lost connection), is sent again unchanged: its
// Nats-Msg-Id makes a copy of a stored message a duplicate, answered with
// its sequence, and its expected last sequence keeps a copy from being
// stored anywhere but where the message belongs (see wait). The messages
// in flight behind a lost one are sent again at once (resendAhead). So a
// stream leader's election costs the relay the election, not ackTimeout
// and a restart of the term.
//
// An acknowledgement is awaited in order, by one goroutine; once the last
// message of a source version is acknowledged, so is every message before
// it, and the source is acknowledged up to that version (onAck). The first
// failure cancels the term's context with itself as the cause, so that the
// source watch stops at once; the pipeline then waits, for up to
// ackTimeout, until every message still in flight is settled (acknowledged
// or failed) so that the term that follows reads the stream as it will
// stay, and resumes from the last version the stream holds completely.
type pipeline struct {
	js     jetstream.JetStream
	source string
	onAck  func(version uint64) // the source is acknowledged up to version
	count  *atomic.Uint64       // messages acknowledged

	parent context.Context         // the term's
	ctx    context.Context         // parent, cancelled with the first failure
	cancel context.CancelCauseFunc //
	queue  chan inflight           // published, in order; closed by close
	room   chan struct{}           // a token per message published and not yet settled by ack: the window
	done   chan struct{}           // closed when ack has returned

	mu     sync.Mutex
	err    error // the first failure
	broken bool  // a message sent after a failed one was stored
}

// inflight is one published message awaiting its acknowledgement.
type inflight struct {
	fut     jetstream.PubAckFuture
	seq     uint64                 // the sequence JetStream must give it
	version uint64                 // a source version complete once it is stored; 0 inside a group
	resent  jetstream.PubAckFuture // the message sent again (see wait), if it was
}

// newPipeline starts a term's pipeline; window bounds the messages in
// flight. close must be called once the term stops publishing.
func newPipeline(ctx context.Context, js jetstream.JetStream, source string, window int, count *atomic.Uint64, onAck func(uint64)) *pipeline {
	p := &pipeline{js: js, source: source, onAck: onAck, count: count, parent: ctx,
		queue: make(chan inflight, window+1), room: make(chan struct{}, max(window, 1)), done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancelCause(ctx)
	go p.ack()
	return p
}

// brokenChain reports whether a message sent after one that failed was
// stored: the stream then lacks a message of the term but holds later
// ones, which no reading of the stream can tell.
func (p *pipeline) brokenChain() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.broken
}

// failure returns the first failure, if any.
func (p *pipeline) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *pipeline) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	err = p.err
	p.mu.Unlock()
	p.cancel(err)
}

// send publishes msgs after everything sent before, each expecting the
// stream to end at the sequence before its own (see pipeline), and advances
// st.lastSeq as if they were stored; version is the source version
// complete once the last of them is (0: none). A message without a
// Nats-Msg-Id gets one from its sequence and the term's epoch. It blocks
// while the window is full and returns the pipeline's failure, if there
// is one, without sending.
func (p *pipeline) send(st *state, msgs []*nats.Msg, version uint64) error {
	for i, m := range msgs {
		if err := p.failure(); err != nil {
			return err
		}
		id := m.Header.Get(jetstream.MsgIDHeader)
		if id == "" {
			// Unique: a later term (or a later attempt of this one)
			// reads a stream whose last sequence is at least this one.
			id = "s" + strconv.FormatUint(st.lastSeq+1, 10) + "-" + strconv.FormatUint(st.epoch, 10)
			m.Header.Set(jetstream.MsgIDHeader, id)
		}
		// The window: ack gives the token back once the message is
		// settled (queue alone would not bound it: ack takes messages
		// from it ahead of their turn, see resendAhead).
		select {
		case p.room <- struct{}{}:
		case <-p.ctx.Done():
			return p.stopped()
		}
		f, err := p.js.PublishMsgAsync(m, jetstream.WithExpectLastSequence(st.lastSeq))
		if err != nil {
			<-p.room
			err = &publishError{fmt.Errorf("%s: %w", p.source, err)}
			p.fail(err)
			return err
		}
		in := inflight{fut: f, seq: st.lastSeq + 1}
		if i == len(msgs)-1 {
			in.version = version
		}
		st.lastSeq++
		select {
		case p.queue <- in:
		case <-p.ctx.Done():
			// Not queued: the ack goroutine has stopped waiting (a
			// failure, or the term ends); what it settles is unknown
			// until the stream is read again.
			<-p.room
			if err := p.failure(); err != nil {
				return err
			}
			return &publishError{context.Cause(p.ctx)}
		}
	}
	return nil
}

// sync waits until everything sent so far is acknowledged.
func (p *pipeline) sync() error {
	done := make(chan struct{})
	select {
	case p.queue <- inflight{fut: syncMark(done)}:
	case <-p.ctx.Done():
		return p.stopped()
	}
	select {
	case <-done:
		return p.failure()
	case <-p.ctx.Done():
		return p.stopped()
	}
}

func (p *pipeline) stopped() error {
	if err := p.failure(); err != nil {
		return err
	}
	return &publishError{context.Cause(p.ctx)}
}

// close stops the pipeline after what was sent is settled and returns its
// failure, if any. Only the goroutine that sends may call it, once.
func (p *pipeline) close() error {
	close(p.queue)
	<-p.done
	p.cancel(nil)
	return p.failure()
}

// ack awaits the acknowledgements in order until close; after a failure
// (or once the term's context ends) it settles what is left.
func (p *pipeline) ack() {
	defer close(p.done)
	var drainBy time.Time // set once failed
	// A message of this queue failed (not a publish that never entered
	// it, nor the term's end): what follows it and is stored breaks the
	// chain.
	var failedInQueue bool
	// Messages taken from the queue ahead of their turn, in order: the
	// ones in flight when a message turned out lost, all sent again.
	var ahead []inflight
	closed := false
	next := func() (inflight, bool) {
		if len(ahead) > 0 {
			in := ahead[0]
			ahead = ahead[1:]
			return in, true
		}
		if closed {
			return inflight{}, false
		}
		in, ok := <-p.queue
		return in, ok
	}
	for {
		in, ok := next()
		if !ok {
			return
		}
		if m, ok := in.fut.(syncMark); ok {
			close(m)
			continue
		}
		if drainBy.IsZero() {
			settled, resent, err := p.wait(&in)
			if err == nil {
				p.count.Add(1)
				if in.version > 0 && p.onAck != nil {
					p.onAck(in.version)
				}
				if resent {
					// Its first publish was lost (with a stream leader
					// that went down, most likely) and so, then, were
					// the ones sent after it: send them all again now
					// rather than one resendAfter each.
					ahead, closed = p.resendAhead(ahead, closed)
				}
				<-p.room
				continue
			}
			p.fail(err)
			drainBy = time.Now().Add(ackTimeout)
			if settled {
				// Its answer (or its ackTimeout) is spent: waiting on
				// it again would only wait out drainBy.
				failedInQueue = true
				<-p.room
				continue
			}
		}
		p.settle(in, drainBy, failedInQueue)
		<-p.room
	}
}

// resendAfter is how long the pipeline awaits a message's
// acknowledgement before it sends the message again, and then between
// attempts, until ackTimeout. An acknowledgement lost with a node (the
// stream's leader went down with the message in flight) never comes, and
// neither does one for a message published while the stream had no
// leader (its replicas drop it); JetStream answers a message sent again
// for certain: a duplicate (Nats-Msg-Id) with the sequence the first one
// was stored at, its store, or "wrong last sequence" when it can never be
// stored (see wait).
const resendAfter = time.Second

// resend publishes in's message again, as it was (same Nats-Msg-Id, same
// expected last sequence). A publish that fails at once is left for the
// next attempt.
func (p *pipeline) resend(in *inflight) {
	f, err := p.js.PublishMsgAsync(in.fut.Msg())
	if err != nil {
		in.resent = nil
		return
	}
	in.resent = f
}

// resendAhead takes every message already queued behind one that was lost
// and sends each again (a message that was stored after all is answered
// as a duplicate): they were most likely lost too, and waiting resendAfter
// for each in turn would hold the relay up for minutes. The messages keep
// their order in ahead.
func (p *pipeline) resendAhead(ahead []inflight, closed bool) ([]inflight, bool) {
	for !closed {
		select {
		case in, ok := <-p.queue:
			if !ok {
				closed = true
				continue
			}
			ahead = append(ahead, in)
			continue
		default:
		}
		break
	}
	for i := range ahead {
		if _, ok := ahead[i].fut.(syncMark); !ok && ahead[i].resent == nil {
			p.resend(&ahead[i])
		}
	}
	return ahead, closed
}

// wait awaits one message's acknowledgement; every message before it is
// stored, each at the sequence computed for it. settled is false when it
// stopped waiting because the pipeline failed elsewhere or the term
// ended: the message's fate is still open. resent reports that the
// message was stored but had to be sent again here (its first publish, or
// the copy resendAhead sent, was not answered so).
//
// Without an acknowledgement within resendAfter, or with an error other
// than "wrong last sequence" (no stream leader, a lost connection), the
// message is sent again, unchanged, and so on until ackTimeout. As every
// message before it is stored, the stream's last sequence is at least the
// one it expects; JetStream checks its Nats-Msg-Id before that: a copy is
// answered as a duplicate with the sequence the message was stored at, is
// stored at its sequence if the stream still ends where it expects, and
// is refused with "wrong last sequence" only if the stream went past that
// without it, so that no copy can be stored any more: fenced. (A first
// publish refused that way is sent again too: it may have been refused
// while a message before it was missing, lost and since sent again.)
func (p *pipeline) wait(in *inflight) (settled, resent bool, err error) {
	deadline := time.Now().Add(ackTimeout)
	okc, errc := in.fut.Ok(), in.fut.Err()
	var rokc <-chan *jetstream.PubAck
	var rerrc <-chan error
	if in.resent != nil {
		rokc, rerrc = in.resent.Ok(), in.resent.Err()
	}
	var last error // the last answer that was not an acknowledgement
	copied := in.resent != nil
	timer := time.NewTimer(resendAfter)
	defer timer.Stop()
	again := func() {
		resent, copied = true, true
		p.resend(in)
		if in.resent != nil {
			rokc, rerrc = in.resent.Ok(), in.resent.Err()
		}
		timer.Reset(min(resendAfter, max(time.Until(deadline), 0)))
	}
	stored := func(ack *jetstream.PubAck, copy bool) (bool, bool, error) {
		switch {
		case ack.Sequence != in.seq:
			return true, false, &publishError{fmt.Errorf("%s: message %s was stored at sequence %d, not %d", p.source, in.fut.Msg().Header.Get(jetstream.MsgIDHeader), ack.Sequence, in.seq)}
		case ack.Duplicate && !copy && !copied:
			return true, false, &publishError{fmt.Errorf("%s: message %s was taken for a duplicate of sequence %d", p.source, in.fut.Msg().Header.Get(jetstream.MsgIDHeader), ack.Sequence)}
		}
		return true, resent, nil
	}
	for {
		select {
		case ack := <-okc:
			return stored(ack, false)
		case ack := <-rokc:
			return stored(ack, true)
		case err := <-errc:
			okc, errc, last = nil, nil, err
			if rokc == nil {
				again()
			}
		case err := <-rerrc:
			if isFenced(err) {
				return true, false, fmt.Errorf("%s: %w: %v", p.source, errFenced, err)
			}
			rokc, rerrc, last = nil, nil, err
		case <-timer.C:
			if !time.Now().Before(deadline) {
				if last != nil {
					return true, false, &publishError{fmt.Errorf("%s: no acknowledgement from JetStream within %v (last answer: %w)", p.source, ackTimeout, last)}
				}
				return true, false, &publishError{fmt.Errorf("%s: no acknowledgement from JetStream within %v", p.source, ackTimeout)}
			}
			again()
		case <-p.ctx.Done():
			return false, false, &publishError{context.Cause(p.ctx)}
		}
	}
}

// settle waits, until drainBy or the term's end, for a message still in
// flight after a failure to be acknowledged or to fail, so that the
// stream is read back only once nothing more of this term can land in it.
// afterFailed: a message sent before this one failed, so this one being
// stored breaks the chain (see brokenChain).
func (p *pipeline) settle(in inflight, drainBy time.Time, afterFailed bool) {
	d := time.Until(drainBy)
	if d <= 0 || p.parent.Err() != nil {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	var rokc <-chan *jetstream.PubAck
	var rerrc <-chan error
	if in.resent != nil {
		rokc, rerrc = in.resent.Ok(), in.resent.Err()
	}
	okc, errc := in.fut.Ok(), in.fut.Err()
	for okc != nil || rokc != nil {
		select {
		case <-okc:
		case <-rokc:
		case <-errc:
			okc, errc = nil, nil
			continue
		case <-rerrc:
			rokc, rerrc = nil, nil
			continue
		case <-tm.C:
			return
		case <-p.parent.Done():
			return
		}
		// Stored (a copy sent again is answered as a duplicate).
		if afterFailed {
			p.mu.Lock()
			p.broken = true
			p.mu.Unlock()
		}
		return
	}
}

// syncMark is a marker in the queue: the ack goroutine closes it when it
// reaches it. It only satisfies PubAckFuture to travel in the queue.
type syncMark chan struct{}

func (syncMark) Ok() <-chan *jetstream.PubAck { return nil }
func (syncMark) Err() <-chan error            { return nil }
func (syncMark) Msg() *nats.Msg               { return nil }
