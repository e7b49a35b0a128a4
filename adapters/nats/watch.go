package natsinformer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

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
	// (a key's current value removed by MaxAge or a purge), or "".
	lost(ctx context.Context, first uint64) string
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
	err          error // sticky: the watch ended
}

var _ core.ProgressRequester = (*tail[int])(nil)

const headTimeout = 3 * time.Second

// openTail checks that the stream still holds everything after from, then
// starts a consumer at from+1.
func openTail[T any](ctx context.Context, source string, stream jetstream.Stream, id *identity, filter string, from uint64, a applier[T], batch int, idle time.Duration, log *slog.Logger) (_ *tail[T], err error) {
	defer func() {
		// The state at from is still good for the next attempt (the
		// informer retries from the same version), unless from is gone.
		if err != nil && !errors.Is(err, core.ErrExpired) {
			a.park(from)
		}
	}()
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: read stream state to watch from %d: %w", source, from, err)
	}
	if err := id.check(source, info); err != nil {
		return nil, err
	}
	if err := checkPosition(source, info.State, from, a.complete()); err != nil {
		return nil, err
	}
	if why := a.lost(ctx, info.State.FirstSeq); why != "" {
		return nil, fmt.Errorf("%s: cannot watch from sequence %d: %s: %w", source, from, why, core.ErrExpired)
	}
	cfg := jetstream.ConsumerConfig{FilterSubject: filter, DeliverPolicy: jetstream.DeliverAllPolicy}
	if from > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from + 1
	}
	f, err := openFeed(ctx, stream, cfg, batch)
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
	return &tail[T]{
		source: source, stream: stream, id: id, filter: filter, f: f, a: a,
		batch: batch, idle: idle, log: log,
		ctx: wctx, cancel: cancel, progress: make(chan struct{}, 1),
		pos: from,
	}, nil
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

// take applies m and whatever else is already buffered, up to a batch.
func (w *tail[T]) take(m jetstream.Msg) []core.Event[T] {
	var out []core.Event[T]
	applied := false
	for n := 0; ; n++ {
		meta, err := w.f.check(m)
		if err != nil {
			w.err = fmt.Errorf("%s: watch after sequence %d: %w", w.source, w.pos, err)
			break
		}
		out = w.a.apply(m, meta.Sequence.Stream, out)
		w.pos = meta.Sequence.Stream
		applied = true
		if n+1 >= w.batch {
			break
		}
		select {
		case m = <-w.f.msgs:
			continue
		default:
		}
		break
	}
	if len(out) == 0 && applied {
		// Messages that changed nothing (a reducer's no-op) still move the
		// position, which WaitFor can use.
		out = append(out, core.Event[T]{Type: core.Bookmark, RV: core.ResourceVersion(w.pos)})
	}
	return out
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
	if why := w.a.lost(ctx, st.FirstSeq); why != "" {
		return nil, fmt.Errorf("%s: %s: %w", w.source, why, core.ErrExpired)
	}
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
