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
	done   chan struct{}           // closed when ack has returned

	mu     sync.Mutex
	err    error // the first failure
	broken bool  // a message sent after a failed one was stored
}

// inflight is one published message awaiting its acknowledgement.
type inflight struct {
	fut     jetstream.PubAckFuture
	seq     uint64 // the sequence JetStream must give it
	version uint64 // a source version complete once it is stored; 0 inside a group
}

// newPipeline starts a term's pipeline; window bounds the messages in
// flight. close must be called once the term stops publishing.
func newPipeline(ctx context.Context, js jetstream.JetStream, source string, window int, count *atomic.Uint64, onAck func(uint64)) *pipeline {
	p := &pipeline{js: js, source: source, onAck: onAck, count: count, parent: ctx,
		queue: make(chan inflight, max(window-1, 0)), done: make(chan struct{})}
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
		f, err := p.js.PublishMsgAsync(m, jetstream.WithExpectLastSequence(st.lastSeq))
		if err != nil {
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
	timer := time.NewTimer(ackTimeout)
	defer timer.Stop()
	var drainBy time.Time // set once failed
	// A message of this queue failed (not a publish that never entered
	// it, nor the term's end): what follows it and is stored breaks the
	// chain.
	var failedInQueue bool
	for in := range p.queue {
		if m, ok := in.fut.(syncMark); ok {
			close(m)
			continue
		}
		if drainBy.IsZero() {
			settled, err := p.wait(in, timer)
			if err == nil {
				p.count.Add(1)
				if in.version > 0 && p.onAck != nil {
					p.onAck(in.version)
				}
				continue
			}
			p.fail(err)
			drainBy = time.Now().Add(ackTimeout)
			if settled {
				// Its answer (or its ackTimeout) is spent: waiting on
				// it again would only wait out drainBy.
				failedInQueue = true
				continue
			}
		}
		p.settle(in, drainBy, failedInQueue)
	}
}

// wait awaits one acknowledgement. settled is false when it stopped
// waiting because the pipeline failed elsewhere or the term ended: the
// message's fate is still open.
func (p *pipeline) wait(in inflight, timer *time.Timer) (settled bool, err error) {
	// An acknowledgement lost with a node (the stream's leader died with
	// the message in flight) never comes: give up after ackTimeout
	// without one, and read the stream back to learn what landed.
	timer.Reset(ackTimeout)
	select {
	case ack := <-in.fut.Ok():
		switch {
		case ack.Duplicate:
			return true, &publishError{fmt.Errorf("%s: message %s was taken for a duplicate of sequence %d", p.source, in.fut.Msg().Header.Get(jetstream.MsgIDHeader), ack.Sequence)}
		case ack.Sequence != in.seq:
			return true, &publishError{fmt.Errorf("%s: message %s was stored at sequence %d, not %d", p.source, in.fut.Msg().Header.Get(jetstream.MsgIDHeader), ack.Sequence, in.seq)}
		}
		return true, nil
	case err := <-in.fut.Err():
		if isFenced(err) {
			return true, fmt.Errorf("%s: %w: %v", p.source, errFenced, err)
		}
		return true, &publishError{fmt.Errorf("%s: %w", p.source, err)}
	case <-timer.C:
		return true, &publishError{fmt.Errorf("%s: no acknowledgement from JetStream within %v", p.source, ackTimeout)}
	case <-p.ctx.Done():
		return false, &publishError{context.Cause(p.ctx)}
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
	select {
	case <-in.fut.Ok():
		if afterFailed {
			p.mu.Lock()
			p.broken = true
			p.mu.Unlock()
		}
	case <-in.fut.Err():
	case <-tm.C:
	case <-p.parent.Done():
	}
}

// syncMark is a marker in the queue: the ack goroutine closes it when it
// reaches it. It only satisfies PubAckFuture to travel in the queue.
type syncMark chan struct{}

func (syncMark) Ok() <-chan *jetstream.PubAck { return nil }
func (syncMark) Err() <-chan error            { return nil }
func (syncMark) Msg() *nats.Msg               { return nil }
