package natsinformer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core"
)

// applier turns the messages of one watch into events. It keeps whatever
// per-key state the mode needs and is used by one goroutine at a time.
type applier[T any] interface {
	// apply appends the events of one message (possibly none) to out.
	apply(m jetstream.Msg, seq uint64, out []core.Event[T]) []core.Event[T]
	// lost reports why state this watch has delivered can no longer be
	// trusted now that the stream's first retained sequence is first
	// (a key's current value removed by MaxAge or a purge), or "". An
	// error means it could not tell.
	lost(ctx context.Context, first uint64) (string, error)
	// park hands the state at rv back to the ListerWatcher for the next
	// Watch(rv), the resume after a broken watch.
	park(rv uint64)
	// complete reports whether lost sees every live key at the watch's
	// start. Then a first sequence past from+1 is not by itself expiry:
	// messages after from that are gone were either superseded (a bucket's
	// History limit; the newer message follows) or removed together with
	// their key, and lost catches keys the cache holds that were removed.
	complete() bool
}

// tail is the Watcher of both modes: a feed from one ephemeral consumer,
// turned into batches by an applier, with bookmarks at the stream's head
// when nothing the filter matches is pending.
type tail[T any] struct {
	source string // for errors: `nats kv bucket "x"`
	stream jetstream.Stream
	nc     *nats.Conn // nil: no reconnects to watch for
	id     *identity
	filter string
	f      *feed
	a      applier[T]
	batch  int
	idle   time.Duration
	log    *slog.Logger

	ctx      context.Context // ends with Stop or the Watch context
	cancel   context.CancelFunc
	progress chan struct{}
	stopOnce sync.Once

	mu           sync.Mutex // Next is not called concurrently, but Stop may be
	pos          uint64     // last RV returned
	wantProgress bool
	err          error  // sticky: the watch ended
	reconnects   uint64 // nc's reconnect count when the state was last checked
	skipsSafe    bool   // verify has nothing to look for (applier.lost never finds anything)
	// connected receives nc's reconnects, so that an idle watch checks
	// the state at once rather than after IdleCheck; nil without nc.
	connected chan nats.Status
}

var _ core.ProgressRequester = (*tail[int])(nil)

const (
	headTimeout = 3 * time.Second
	// requestTimeout bounds one request made with a context that lives
	// long (a watch's, a List's), the default of nats.go for contexts
	// without a deadline: a request lost with a dropped connection gets no
	// answer, and the caller's context may have a far deadline.
	requestTimeout = 5 * time.Second
	// lostTimeout bounds the lost-value lookups of a watch being opened.
	lostTimeout = 30 * time.Second
)

// openTail checks that the stream still holds everything after from, then
// starts a consumer at from+1.
func openTail[T any](ctx context.Context, source string, stream jetstream.Stream, nc *nats.Conn, id *identity, filter string, from uint64, a applier[T], batch int, idle time.Duration, log *slog.Logger) (_ *tail[T], err error) {
	defer func() {
		// The state at from is still good for the next attempt (the
		// informer retries from the same version), unless from is gone.
		if err != nil && !errors.Is(err, core.ErrExpired) {
			a.park(from)
		}
	}()
	reconnects := reconnectCount(nc) // before the state it vouches for is read
	info, err := withTimeout(ctx, requestTimeout, func(ctx context.Context) (*jetstream.StreamInfo, error) { return stream.Info(ctx) })
	if err != nil {
		return nil, fmt.Errorf("%s: read stream state to watch from %d: %w", source, from, err)
	}
	if err := id.check(source, info); err != nil {
		return nil, err
	}
	if err := checkPosition(source, info.State, from, a.complete()); err != nil {
		return nil, err
	}
	why, err := withTimeout(ctx, lostTimeout, func(ctx context.Context) (string, error) { return a.lost(ctx, info.State.FirstSeq) })
	if err != nil {
		return nil, fmt.Errorf("%s: check the values held at sequence %d: %w", source, from, err)
	} else if why != "" {
		return nil, fmt.Errorf("%s: cannot watch from sequence %d: %s: %w", source, from, why, core.ErrExpired)
	}
	cfg := jetstream.ConsumerConfig{FilterSubject: filter, DeliverPolicy: jetstream.DeliverAllPolicy}
	if from > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from + 1
	}
	f, err := withTimeout(ctx, requestTimeout, func(ctx context.Context) (*feed, error) { return openFeed(ctx, stream, cfg, batch) })
	if err != nil {
		return nil, fmt.Errorf("%s: create consumer from sequence %d: %w", source, from+1, err)
	}
	// A purge between the check above and the consumer's creation moves
	// the consumer's start past from+1 without telling anyone.
	if d := f.info().Delivered.Stream; d > from && !a.complete() {
		f.close()
		return nil, fmt.Errorf("%s: the consumer starts after sequence %d, not at %d: messages were removed meanwhile: %w", source, d, from+1, core.ErrExpired)
	}
	wctx, cancel := context.WithCancel(ctx)
	var connected chan nats.Status
	if nc != nil {
		connected = nc.StatusChanged(nats.CONNECTED)
	}
	return &tail[T]{
		source: source, stream: stream, nc: nc, id: id, filter: filter, f: f, a: a,
		batch: batch, idle: idle, log: log,
		ctx: wctx, cancel: cancel, progress: make(chan struct{}, 1),
		pos: from, reconnects: reconnects, connected: connected,
	}, nil
}

// withTimeout runs fn with ctx bounded by d.
func withTimeout[R any](ctx context.Context, d time.Duration, fn func(context.Context) (R, error)) (R, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return fn(ctx)
}

// checkPosition: Watch(from) needs every message after from. A first
// sequence past from+1 means some were removed (purge, MaxAge, limits); a
// from past the last sequence means the stream was deleted and created
// again. Both are expiry: the informer relists. With complete state the
// first rule is left to applier.lost.
func checkPosition(source string, st jetstream.StreamState, from uint64, complete bool) error {
	if st.FirstSeq > from+1 && !complete {
		return fmt.Errorf("%s: cannot watch from sequence %d: the stream's first retained sequence is %d (purged or expired): %w", source, from, st.FirstSeq, core.ErrExpired)
	}
	if from > st.LastSeq {
		return fmt.Errorf("%s: cannot watch from sequence %d: the stream's last sequence is %d (was it deleted and created again?): %w", source, from, st.LastSeq, core.ErrExpired)
	}
	return nil
}

func (w *tail[T]) Next(ctx context.Context) ([]core.Event[T], error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return nil, w.err
	}
	idle := time.NewTimer(w.idle)
	defer idle.Stop()
	for {
		if w.wantProgress {
			select {
			case m := <-w.f.msgs:
				if out := w.take(m); len(out) > 0 || w.err != nil {
					return w.result(out)
				}
				continue
			default:
			}
			out, err := w.head(ctx, true)
			if err != nil && ctx.Err() != nil && w.ctx.Err() == nil {
				return nil, ctx.Err() // this call ends, the watch does not
			}
			if err != nil || len(out) > 0 {
				return w.result(out, err)
			}
		}
		select {
		case m := <-w.f.msgs:
			if out := w.take(m); len(out) > 0 || w.err != nil {
				return w.result(out)
			}
		case err := <-w.f.errs:
			w.err = fmt.Errorf("%s: watch after sequence %d: %w", w.source, w.pos, err)
			return nil, w.err
		case <-w.progress:
			w.wantProgress = true
		case _, ok := <-w.connected:
			if !ok { // Stop removed the listener
				w.err = fmt.Errorf("%s: watch stopped: %w", w.source, context.Canceled)
				return nil, w.err
			}
			// Values may have been purged while the connection was down,
			// and no message may come to reveal it.
			if err := w.verify(nil); err != nil {
				w.err = err
				return nil, err
			}
		case <-idle.C:
			out, err := w.head(ctx, false)
			if err != nil && ctx.Err() != nil && w.ctx.Err() == nil {
				return nil, ctx.Err()
			}
			if err != nil || len(out) > 0 {
				return w.result(out, err)
			}
			idle.Reset(w.idle)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w.ctx.Done():
			w.err = fmt.Errorf("%s: watch stopped: %w", w.source, w.ctx.Err())
			return nil, w.err
		}
	}
}

// result returns a batch; a sticky error waits for the next call when
// there is a batch to hand over first.
func (w *tail[T]) result(out []core.Event[T], err ...error) ([]core.Event[T], error) {
	if len(err) > 0 && err[0] != nil {
		w.err = err[0]
	}
	if len(out) > 0 {
		return out, nil
	}
	return nil, w.err
}

// take applies m and whatever else is already buffered, up to a batch,
// after checking the stream's state if the batch passes over messages or
// comes after a reconnect.
func (w *tail[T]) take(m jetstream.Msg) []core.Event[T] {
	var (
		msgs []jetstream.Msg
		seqs []uint64
		bad  error
	)
	for {
		meta, err := w.f.check(m)
		if err != nil {
			bad = fmt.Errorf("%s: watch after sequence %d: %w", w.source, w.pos, err)
			break
		}
		msgs = append(msgs, m)
		seqs = append(seqs, meta.Sequence.Stream)
		if len(msgs) >= w.batch {
			break
		}
		select {
		case m = <-w.f.msgs:
			continue
		default:
		}
		break
	}
	if len(msgs) > 0 {
		if err := w.verify(seqs); err != nil {
			w.err = err
			return nil
		}
	}
	var out []core.Event[T]
	for i, m := range msgs {
		out = w.a.apply(m, seqs[i], out)
		w.pos = seqs[i]
	}
	if bad != nil {
		w.err = bad
	}
	if len(out) == 0 && len(msgs) > 0 {
		// Messages that changed nothing (a reducer's no-op) still move the
		// position, which WaitFor can use.
		out = append(out, core.Event[T]{Type: core.Bookmark, RV: core.ResourceVersion(w.pos)})
	}
	return out
}

// verify runs before a batch is applied. The consumer lives on the server
// and outlasts a dropped connection; the server moves it past messages
// removed meanwhile (a purge, MaxAge) and all the watch sees is a stream
// sequence that jumps, as it also does for messages the filter does not
// match or that a bucket's History limit superseded. Values the watch
// delivered earlier can vanish the same way without any jump. So when the
// batch skips sequences, or the connection has been re-established since
// the last check, the stream's state is read first and applier.lost looks
// for held values that are gone; if so the watch expires before anything
// past the jump is emitted, so WaitFor cannot be satisfied by a cache
// that still holds them. One check covers the whole batch: every message
// in it was delivered before the state is read, so a removal that made
// the consumer skip is already visible. The reconnect count is read after
// the messages were received; nats.go raises it before it reads anything
// from the new connection.
func (w *tail[T]) verify(seqs []uint64) error {
	if w.skipsSafe {
		return nil
	}
	reconnects := reconnectCount(w.nc)
	gap, prev := false, w.pos
	for _, s := range seqs {
		if s > prev+1 {
			gap = true
			break
		}
		prev = s
	}
	if !gap && reconnects == w.reconnects {
		return nil
	}
	info, err := withTimeout(w.ctx, headTimeout, func(ctx context.Context) (*jetstream.StreamInfo, error) { return w.stream.Info(ctx) })
	if err != nil {
		if w.ctx.Err() != nil {
			return fmt.Errorf("%s: watch stopped: %w", w.source, w.ctx.Err())
		}
		// The watch cannot vouch for what it skipped; the next one starts
		// from the position and checks again.
		return fmt.Errorf("%s: read stream state to check the messages after sequence %d: %w", w.source, w.pos, err)
	}
	if err := w.id.check(w.source, info); err != nil {
		return err
	}
	why, err := withTimeout(w.ctx, lostTimeout, func(ctx context.Context) (string, error) { return w.a.lost(ctx, info.State.FirstSeq) })
	if err != nil {
		if w.ctx.Err() != nil {
			return fmt.Errorf("%s: watch stopped: %w", w.source, w.ctx.Err())
		}
		return fmt.Errorf("%s: check the values held at sequence %d: %w", w.source, w.pos, err)
	}
	if why != "" {
		if len(seqs) == 0 {
			return fmt.Errorf("%s: at sequence %d after a reconnect: %s: %w", w.source, w.pos, why, core.ErrExpired)
		}
		return fmt.Errorf("%s: after sequence %d (next delivered %d): %s: %w", w.source, w.pos, seqs[0], why, core.ErrExpired)
	}
	w.reconnects = reconnects
	return nil
}

// reconnectCount is how many times nc has connected again.
func reconnectCount(nc *nats.Conn) uint64 {
	if nc == nil {
		return 0
	}
	return nc.Stats().Reconnects
}

// head reads the stream's state and returns a Bookmark at its last sequence
// when no message the filter matches lies between the position and it: the
// consumer has nothing pending, so everything up to the head has been
// delivered. It also notices state that vanished without a delete marker.
func (w *tail[T]) head(ctx context.Context, requested bool) ([]core.Event[T], error) {
	// A request in flight when the connection drops gets no answer; a
	// short bound lets the watch fail over to a fresh one soon.
	ctx, cancel := context.WithTimeout(ctx, headTimeout)
	defer cancel()
	defer context.AfterFunc(w.ctx, cancel)() // Stop must not wait for a slow server
	reconnects := reconnectCount(w.nc)
	info, err := w.stream.Info(ctx)
	if err != nil {
		if w.ctx.Err() != nil {
			return nil, fmt.Errorf("%s: watch stopped: %w", w.source, w.ctx.Err())
		}
		return nil, fmt.Errorf("%s: read stream state at sequence %d: %w", w.source, w.pos, err)
	}
	if err := w.id.check(w.source, info); err != nil {
		return nil, err
	}
	st := info.State
	if why, err := w.a.lost(ctx, st.FirstSeq); err != nil {
		return nil, fmt.Errorf("%s: check the values held at sequence %d: %w", w.source, w.pos, err)
	} else if why != "" {
		return nil, fmt.Errorf("%s: %s: %w", w.source, why, core.ErrExpired)
	}
	w.reconnects = reconnects
	if st.LastSeq < w.pos {
		return nil, fmt.Errorf("%s: the stream's last sequence %d is before the watch's position %d (was it deleted and created again?): %w", w.source, st.LastSeq, w.pos, core.ErrExpired)
	}
	if st.LastSeq == w.pos {
		if requested {
			w.wantProgress = false
			return []core.Event[T]{{Type: core.Bookmark, RV: core.ResourceVersion(w.pos)}}, nil
		}
		return nil, nil
	}
	m, err := w.stream.GetMsg(ctx, w.pos+1, jetstream.WithGetMsgSubject(w.filter))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Sequence > st.LastSeq:
	case err != nil:
		return nil, fmt.Errorf("%s: look for pending messages after sequence %d: %w", w.source, w.pos, err)
	default:
		return nil, nil // the consumer is about to deliver m
	}
	w.pos = st.LastSeq
	w.wantProgress = false
	return []core.Event[T]{{Type: core.Bookmark, RV: core.ResourceVersion(w.pos)}}, nil
}

// RequestProgress asks for a Bookmark at the stream's head (or later) as
// soon as nothing the filter matches is pending.
func (w *tail[T]) RequestProgress(ctx context.Context) error {
	select {
	case w.progress <- struct{}{}:
	default:
	}
	return nil
}

func (w *tail[T]) Stop() {
	w.stopOnce.Do(func() {
		w.cancel()
		if w.connected != nil {
			w.nc.RemoveStatusListener(w.connected)
		}
		w.f.close()
		// Next has returned or will at once; its state is consistent at pos.
		w.mu.Lock()
		defer w.mu.Unlock()
		if !errors.Is(w.err, core.ErrExpired) {
			w.a.park(w.pos)
		}
	})
}

// identity remembers when the stream was created, so that a stream deleted
// and created again under the same name (sequences starting over) is not
// mistaken for the one whose versions the informer holds.
type identity struct {
	mu      sync.Mutex
	created time.Time
}

// reset adopts the stream a List just read.
func (id *identity) reset(info *jetstream.StreamInfo) {
	id.mu.Lock()
	id.created = info.Created
	id.mu.Unlock()
}

func (id *identity) check(source string, info *jetstream.StreamInfo) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.created.IsZero() {
		id.created = info.Created
		return nil
	}
	if !info.Created.Equal(id.created) {
		return fmt.Errorf("%s: the stream was deleted and created again (created %s, the versions held are from the one created %s): %w",
			source, info.Created.UTC().Format(time.RFC3339Nano), id.created.UTC().Format(time.RFC3339Nano), core.ErrExpired)
	}
	return nil
}
