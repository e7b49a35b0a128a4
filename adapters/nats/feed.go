package natsinformer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// feed is one ephemeral, unacknowledged consumer whose messages are handed
// to a single reader in stream order. Any consumer-level trouble (a gap in
// the consumer sequence, missed heartbeats, a consumer lost with a server
// restart) ends the feed with an error: the caller then watches again from
// the last sequence it applied, which is cheaper to reason about than
// nats.go's ordered consumer silently recreating itself (it could skip past
// a purge without anyone noticing).
type feed struct {
	stream jetstream.Stream
	cons   jetstream.Consumer
	cc     jetstream.ConsumeContext
	msgs   chan jetstream.Msg
	errs   chan error
	done   chan struct{}
	// consumer sequence of the last message read; the next must be +1.
	cseq uint64
}

const feedHeartbeat = 2 * time.Second

func openFeed(ctx context.Context, stream jetstream.Stream, cfg jetstream.ConsumerConfig, batch int) (*feed, error) {
	cfg.AckPolicy = jetstream.AckNonePolicy
	cfg.MemoryStorage = true
	cfg.Replicas = 1
	if cfg.InactiveThreshold == 0 {
		// Cleans up after a process that died without Stop.
		cfg.InactiveThreshold = 2 * time.Minute
	}
	cons, err := stream.CreateConsumer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	f := &feed{
		stream: stream,
		cons:   cons,
		msgs:   make(chan jetstream.Msg, batch),
		errs:   make(chan error, 1),
		done:   make(chan struct{}),
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case f.msgs <- m:
		case <-f.done:
		}
	},
		jetstream.PullMaxMessages(batch),
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

// info returns what the server said when the consumer was created.
func (f *feed) info() *jetstream.ConsumerInfo { return f.cons.CachedInfo() }

// check validates the next message's metadata: the consumer sequence must
// follow the previous one, or a message was lost in flight.
func (f *feed) check(m jetstream.Msg) (*jetstream.MsgMetadata, error) {
	meta, err := m.Metadata()
	if err != nil {
		return nil, fmt.Errorf("message on %q without JetStream metadata: %w", m.Subject(), err)
	}
	if meta.Sequence.Consumer != f.cseq+1 {
		return nil, fmt.Errorf("consumer sequence jumped from %d to %d (stream sequence %d): a message was lost in flight", f.cseq, meta.Sequence.Consumer, meta.Sequence.Stream)
	}
	f.cseq = meta.Sequence.Consumer
	return meta, nil
}

var errFeedClosed = errors.New("consumer closed")

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

func (f *feed) deleteConsumer() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = f.stream.DeleteConsumer(ctx, f.cons.CachedInfo().Name)
}

// feedStall is how long a reader that expects more messages waits before
// asking the server whether any are still pending.
const feedStall = 3 * time.Second

// drained asks the server whether the consumer has nothing pending and
// every message it delivered has been read. A reader that waits for
// pending messages uses it when they stop coming: messages counted as
// pending can vanish before delivery (a purge), and then no message would
// ever carry NumPending 0.
func (f *feed) drained(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ci, err := f.cons.Info(ctx)
	if err != nil {
		return false, err
	}
	return ci.NumPending == 0 && ci.Delivered.Consumer == f.cseq, nil
}
