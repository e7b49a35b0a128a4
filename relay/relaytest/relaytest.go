package relaytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
)

// Options configures a Harness.
type Options struct {
	// Replicas of the relay stream; zero means 1.
	Replicas int
	// Relays is how many relays (each with its own Elector from
	// NewElector) compete; zero means 1.
	Relays int
	// NewElector returns the election of relay i. Required.
	NewElector func(i int) leader.Elector
	// RelayJS returns the JetStream of relay i; nil means JS.
	RelayJS func(i int) jetstream.JetStream
	// History is the stream's MaxMsgsPerSubject; zero means
	// relay.StreamConfig's 1. The conformance suite watches from old
	// versions and wants every change since, so it keeps all (-1).
	History int64
	// NoWait makes writes return as soon as the source took them, with
	// the source's version, without waiting for the relay: for the
	// reliability suite, whose writes go on while faults keep the relay
	// from the source.
	NoWait bool
	// ProgressInterval of the relays; zero means 100ms.
	ProgressInterval time.Duration
	// Logger receives the relays' and the harness's downstream's logs;
	// nil discards them.
	Logger *slog.Logger
	// Shards is the relays' Options.Shards (per-shard subjects); zero
	// means none.
	Shards int
	// OwnAllShards makes the harness's own downstream (ListerWatcher)
	// one that owns every shard: it consumes every shard's subject and
	// confirms versions as a sharded downstream does.
	OwnAllShards bool
	// StartTimeout bounds New's wait for the first relay to publish its
	// relist of the source; zero means a minute (a benchmark's million
	// rows need longer).
	StartTimeout time.Duration
}

// Harness is a source harness re-served through relays.
type Harness[T any] struct {
	src    conformance.Harness[T]
	down   *relay.Downstream[T]
	stream string
	prefix string
	js     jetstream.JetStream

	noWait bool
	log    *slog.Logger
	shards int

	mu      sync.Mutex
	relays  []*runner[T]
	newRun  func(i int) *runner[T]
	stopped bool
}

type runner[T any] struct {
	r      *relay.Relay[T]
	cancel context.CancelFunc
	done   chan error
}

var seq atomic.Int64

// New creates the stream, starts the relays and returns the harness; all
// of it is stopped when tb ends.
func New[T any](tb testing.TB, src conformance.Harness[T], js jetstream.JetStream, opts Options) *Harness[T] {
	tb.Helper()
	if opts.NewElector == nil {
		tb.Fatal("relaytest: Options.NewElector is required")
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Relays == 0 {
		opts.Relays = 1
	}
	if opts.ProgressInterval == 0 {
		opts.ProgressInterval = 100 * time.Millisecond
	}
	n := seq.Add(1)
	h := &Harness[T]{src: src, js: js, noWait: opts.NoWait, log: opts.Logger, shards: opts.Shards, stream: fmt.Sprintf("RELAY%d", n), prefix: fmt.Sprintf("relay.t%d", n)}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()
	cfg := relay.StreamConfig(h.stream, h.prefix)
	cfg.Replicas = opts.Replicas
	if opts.History != 0 {
		cfg.MaxMsgsPerSubject = opts.History
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		tb.Fatalf("relaytest: create stream: %v", err)
	}
	h.newRun = func(i int) *runner[T] {
		rjs := js
		if opts.RelayJS != nil {
			rjs = opts.RelayJS(i)
		}
		nctx, ncancel := context.WithTimeout(context.Background(), time.Minute)
		defer ncancel()
		r, err := relay.New(nctx, rjs, src.ListerWatcher(), relay.Options[T]{
			Stream: h.stream, Prefix: h.prefix, Elector: opts.NewElector(i), ProgressInterval: opts.ProgressInterval,
			Logger: opts.Logger, Shards: opts.Shards,
		})
		if err != nil {
			tb.Fatalf("relaytest: relay %d: %v", i, err)
		}
		rctx, rcancel := context.WithCancel(context.Background())
		ru := &runner[T]{r: r, cancel: rcancel, done: make(chan error, 1)}
		go func() { ru.done <- r.Run(rctx) }()
		return ru
	}
	for i := range opts.Relays {
		h.relays = append(h.relays, h.newRun(i))
	}
	tb.Cleanup(func() {
		h.mu.Lock()
		h.stopped = true
		rs := h.relays
		h.mu.Unlock()
		for i, ru := range rs {
			ru.cancel()
			if err := <-ru.done; err != nil {
				tb.Errorf("relaytest: relay %d returned %v", i, err)
			}
		}
	})
	dopts := relay.DownstreamOptions[T]{IdleCheck: time.Second, Logger: h.log}
	if opts.OwnAllShards {
		dopts.Shards = opts.Shards
		for s := range opts.Shards {
			dopts.Owned = append(dopts.Owned, s)
		}
	}
	down, err := relay.NewDownstream[T](ctx, js, h.stream, h.prefix, dopts)
	if err != nil {
		tb.Fatalf("relaytest: downstream: %v", err)
	}
	h.down = down
	// The first term publishes a relist of the source at its list version:
	// wait for it, so that the tests' writes come after it.
	if err := h.relayed(ctx, 1); err != nil {
		tb.Fatalf("relaytest: the relay did not start: %v", err)
	}
	return h
}

// relayed waits until the relay has published everything up to source
// version rv. A write through the harness returns only then: what a test
// calls a completed write is one the relay has published, since a
// downstream cannot know of a source write the relay has not read yet.
func (h *Harness[T]) relayed(ctx context.Context, rv core.ResourceVersion) error {
	for {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		head, err := h.down.Head(hctx)
		cancel()
		if err == nil && head >= rv {
			return nil
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for the relay to publish version %d (stream at %d, err %v): %w", rv, head, err, ctx.Err())
		case <-t.C:
		}
	}
}

func (h *Harness[T]) wait(ctx context.Context, rv core.ResourceVersion, err error) (core.ResourceVersion, error) {
	if err != nil || h.noWait {
		return rv, err
	}
	return rv, h.relayed(ctx, rv)
}

// waitKey waits until the relay has published the write that returned rv
// and returns the version the relay published it at: the source's own
// version of the change (a Postgres harness returns an LSN at or after the
// commit, the relay the commit's LSN). Each key has one writer at a time
// in the suites.
func (h *Harness[T]) waitKey(ctx context.Context, key string, rv core.ResourceVersion, err error) (core.ResourceVersion, error) {
	if rv, err = h.wait(ctx, rv, err); err != nil || h.noWait {
		return rv, err
	}
	st, err := h.js.Stream(ctx, h.stream)
	if err != nil {
		return 0, err
	}
	m, err := st.GetLastMsgForSubject(ctx, relay.KeySubject(h.prefix, key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return rv, nil // a delete of a key that never existed
	}
	if err != nil {
		return 0, err
	}
	// The relay's "Dbi" header starts with the source version.
	version, _, _ := strings.Cut(m.Header.Get("Dbi"), " ")
	v, err := driver.ParseResourceVersion(version)
	if err != nil {
		return 0, err
	}
	return v, nil
}

// Restart stops relay i (as a crash would: nothing is resigned before its
// context ends) and starts it again.
func (h *Harness[T]) Restart(i int) {
	h.mu.Lock()
	ru := h.relays[i]
	h.mu.Unlock()
	ru.cancel()
	<-ru.done
	next := h.newRun(i)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		next.cancel()
		<-next.done
		return
	}
	h.relays[i] = next
}

// Leader returns the index of the relay that leads now, or -1.
func (h *Harness[T]) Leader() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, ru := range h.relays {
		if ru.r.Leading() {
			return i
		}
	}
	return -1
}

// Relay returns relay i.
func (h *Harness[T]) Relay(i int) *relay.Relay[T] {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.relays[i].r
}

// Stream returns the relay stream's name; Prefix its subject prefix.
func (h *Harness[T]) Stream() string { return h.stream }

// Prefix returns the relay stream's subject prefix.
func (h *Harness[T]) Prefix() string { return h.prefix }

// Source returns the source's harness.
func (h *Harness[T]) Source() conformance.Harness[T] { return h.src }

// NewDownstream returns another Downstream over the stream, through js.
func (h *Harness[T]) NewDownstream(ctx context.Context, js jetstream.JetStream) (*relay.Downstream[T], error) {
	return relay.NewDownstream[T](ctx, js, h.stream, h.prefix, relay.DownstreamOptions[T]{IdleCheck: time.Second, Logger: h.log})
}

// NewShardDownstream returns a Downstream reading only the owned shards'
// subjects (the relays' Options.Shards must be set).
func (h *Harness[T]) NewShardDownstream(ctx context.Context, js jetstream.JetStream, owned []int) (*relay.Downstream[T], error) {
	return relay.NewDownstream[T](ctx, js, h.stream, h.prefix, relay.DownstreamOptions[T]{IdleCheck: time.Second, Logger: h.log, Shards: h.shards, Owned: owned})
}

// ListerWatcher is the Downstream.
func (h *Harness[T]) ListerWatcher() driver.ListerWatcher[T] { return h.down }

// Put writes to the source and waits until the relay has published it.
func (h *Harness[T]) Put(ctx context.Context, key string, n int64) (core.ResourceVersion, error) {
	rv, err := h.src.Put(ctx, key, n)
	return h.waitKey(ctx, key, rv, err)
}

// Delete deletes at the source.
func (h *Harness[T]) Delete(ctx context.Context, key string) (core.ResourceVersion, error) {
	rv, err := h.src.Delete(ctx, key)
	return h.waitKey(ctx, key, rv, err)
}

// Version is the source's.
func (h *Harness[T]) Version(obj T) int64 { return h.src.Version(obj) }

// PutAll writes one source transaction, when the source can.
func (h *Harness[T]) PutAll(ctx context.Context, keys []string, n int64) (core.ResourceVersion, error) {
	tx, ok := h.src.(conformance.Transactor)
	if !ok {
		return 0, errors.New("relaytest: the source harness has no transactions")
	}
	rv, err := tx.PutAll(ctx, keys, n)
	if len(keys) == 0 {
		return h.wait(ctx, rv, err)
	}
	return h.waitKey(ctx, keys[0], rv, err)
}

// PutUnwatched writes outside the source's watched set: the downstream
// sees it through the relay's progress.
func (h *Harness[T]) PutUnwatched(ctx context.Context) (core.ResourceVersion, error) {
	u, ok := h.src.(conformance.Unwatched)
	if !ok {
		return 0, errors.New("relaytest: the source harness has no unwatched writes")
	}
	rv, err := u.PutUnwatched(ctx)
	return h.wait(ctx, rv, err)
}

// Truth reads the source.
func (h *Harness[T]) Truth(ctx context.Context) (map[string]int64, error) {
	tr, ok := h.src.(conformance.Truth)
	if !ok {
		return nil, errors.New("relaytest: the source harness has no Truth")
	}
	return tr.Truth(ctx)
}

var (
	_ conformance.Harness[int] = (*Harness[int])(nil)
	_ conformance.Transactor   = (*Harness[int])(nil)
	_ conformance.Unwatched    = (*Harness[int])(nil)
	_ conformance.Truth        = (*Harness[int])(nil)
)

// Head is the source's head, read directly.
func (h *Harness[T]) Head(ctx context.Context) (core.ResourceVersion, error) {
	tr, ok := h.src.(conformance.Truth)
	if !ok {
		return 0, errors.New("relaytest: the source harness has no Truth")
	}
	return tr.Head(ctx)
}

// Faults forwards the source harness's faults: they break the relay's path
// to the source (the downstreams' path to the stream is not touched).
// Restart also stops the relay leader, as a crash of its process would,
// and starts it again.
func (h *Harness[T]) Faults() []conformance.Fault {
	if f, ok := h.src.(conformance.Faults); ok {
		return f.Faults()
	}
	return nil
}

// Inject starts fault f at the source (and, for Restart, restarts the
// relay leader).
func (h *Harness[T]) Inject(t testing.TB, ctx context.Context, f conformance.Fault) (end func(), writable bool) {
	t.Helper()
	end, writable = h.src.(conformance.Faults).Inject(t, ctx, f)
	if f == conformance.Restart {
		if l := h.Leader(); l >= 0 {
			h.Restart(l)
		}
	}
	return end, writable
}

// Heal ends the source's outage.
func (h *Harness[T]) Heal(t testing.TB) {
	t.Helper()
	h.src.(conformance.Faults).Heal(t)
}

var _ conformance.Faults = (*Harness[int])(nil)
