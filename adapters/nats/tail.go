package natsinformer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// applier turns the messages of one watch into events. It keeps whatever
// per-key state the mode needs and is used by one goroutine at a time.
type applier[T any] interface {
	// apply appends the events of one message (possibly none) to out.
	apply(m jetstream.Msg, seq uint64, out []driver.Event[T]) []driver.Event[T]
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
	// skipsSafe reports that lost never finds anything, so that skipped
	// sequences and reconnects need no check.
	skipsSafe() bool
	// expect tells the applier that a new consumer is about to deliver
	// at most keys keys it may not have seen, so that it can size its
	// state once rather than grow it message by message.
	expect(keys uint64)
}

// tail is one Watch of either mode: feeds from ephemeral consumers, one
// after the other, turned into batches by an applier, with bookmarks at the
// stream's head when nothing the filter matches is pending.
type tail[T any] struct {
	r    *streamReader
	a    applier[T]
	emit func([]driver.Event[T]) error
	f    *feed

	pos          uint64 // last version emitted
	dirty        bool   // the applier's state is past pos (an Emit failed)
	wantProgress bool
	reconnects   uint64 // nc's reconnect count when the state was last checked
	// connected receives nc's reconnects, so that an idle watch checks
	// the state at once rather than after IdleCheck.
	connected chan nats.Status
	delivered bool // the current feed has delivered a message
	out       []driver.Event[T]
	seqs      []uint64 // take's, reused
}

const (
	// maxReopens bounds how many feeds in a row may fail without
	// delivering anything before the watch returns the failure.
	maxReopens = 6
	// progressRetry is how soon a watch asked for a bookmark looks again
	// when the leader showed a message its consumer has not delivered yet.
	progressRetry = 200 * time.Millisecond
)

// watch runs one Watch: see driver.ListerWatcher.
func watch[T any](ctx context.Context, r *streamReader, from uint64, a applier[T], opts driver.WatchOptions[T]) error {
	if opts.Emit == nil {
		return fmt.Errorf("%s: WatchOptions.Emit is required", r.source)
	}
	w := &tail[T]{r: r, a: a, emit: opts.Emit, pos: from}
	err := w.run(ctx, opts.Progress)
	if ctx.Err() != nil {
		err = driver.Stopped(ctx)
	}
	// The state at pos is good for the next Watch(pos), unless pos is gone.
	if !w.dirty && !errors.Is(err, driver.ErrExpired) && !errors.Is(err, driver.ErrPermanent) {
		a.park(w.pos)
	}
	return err
}

func (w *tail[T]) run(ctx context.Context, progress <-chan struct{}) error {
	if w.r.nc != nil {
		w.connected = w.r.nc.StatusChanged(nats.CONNECTED)
		defer w.r.nc.RemoveStatusListener(w.connected)
	}
	failures := 0
	for {
		err := w.open(ctx)
		if err == nil {
			opened := time.Now()
			w.delivered = false
			err = w.consume(ctx, progress)
			w.f.close()
			w.f = nil
			if w.delivered || time.Since(opened) > clusterRetry {
				failures = 0
			}
		}
		var fe *feedError
		if ctx.Err() != nil || !errors.As(err, &fe) || errors.Is(err, driver.ErrPermanent) {
			return err
		}
		// The consumer is gone or unusable, the stream is not: open a new
		// one from the position, after the same checks as at the start.
		if failures++; failures > maxReopens {
			return err
		}
		w.r.log.Debug("nats watch reopens its consumer", "source", w.r.source, "after", w.pos, "err", err)
		t := time.NewTimer(time.Duration(50<<min(failures, 5)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// open checks that the stream still holds everything after pos, then
// starts a consumer at pos+1.
func (w *tail[T]) open(ctx context.Context) error {
	from := w.pos
	reconnects := reconnectCount(w.r.nc) // before the state it vouches for is read
	info, err := w.stateAt(ctx, from)
	if err != nil {
		return err
	}
	if err := checkPosition(w.r.source, info.State, from, w.a.complete()); err != nil {
		return err
	}
	if err := w.checkLost(ctx, info.State.FirstSeq); err != nil {
		return err
	}
	cfg := jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if from > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from + 1
	}
	f, err := w.r.openFeed(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%s: create consumer from sequence %d: %w", w.r.source, from+1, err)
	}
	// A purge between the check above and the consumer's creation moves
	// the consumer's start past from+1 without telling anyone.
	if d := f.info().Delivered.Stream; d > from && !w.a.complete() {
		f.close()
		return fmt.Errorf("%s: the consumer starts after sequence %d, not at %d: messages were removed meanwhile: %w", w.r.source, d, from+1, driver.ErrExpired)
	}
	w.a.expect(min(f.info().NumPending, info.State.NumSubjects))
	w.f = f
	w.reconnects = reconnects
	return nil
}

// checkLost asks the applier whether held values are gone, as of the
// stream's first sequence first.
func (w *tail[T]) checkLost(ctx context.Context, first uint64) error {
	if w.a.skipsSafe() {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, lostTimeout)
	defer cancel()
	why, err := w.a.lost(lctx, first)
	if err != nil {
		return fmt.Errorf("%s: check the values held at sequence %d: %w", w.r.source, w.pos, w.r.fatal(err))
	}
	if why != "" {
		return fmt.Errorf("%s: at sequence %d: %s: %w", w.r.source, w.pos, why, driver.ErrExpired)
	}
	return nil
}

// stateAt reads the stream's state to watch from from. A last sequence
// before from with the stream's creation time unchanged is a stale answer
// (a leader just elected, or lagging the node that delivered up to from:
// the same stream never loses its last sequence), read again with
// backoff rather than taken for a stream created anew.
func (w *tail[T]) stateAt(ctx context.Context, from uint64) (*jetstream.StreamInfo, error) {
	wait := 20 * time.Millisecond
	for try := 1; ; try++ {
		same := w.r.id.known()
		info, err := w.r.info(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: read stream state to watch from %d: %w", w.r.source, from, err)
		}
		if err := w.r.id.check(w.r.source, info); err != nil {
			return nil, err
		}
		if !same || info.State.LastSeq >= from {
			return info, nil
		}
		level := slog.LevelDebug
		if try%10 == 0 {
			level = slog.LevelWarn // not a blip: say so
		}
		w.r.log.Log(ctx, level, "stream head read behind the watch's position from a lagging leader; reading it again",
			"stream", w.r.source, "head", info.State.LastSeq, "position", from, "tries", try)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// checkPosition: Watch(from) needs every message after from. A first
// sequence past from+1 means some were removed (purge, MaxAge, limits); a
// from past the last sequence means the stream was deleted and created
// again. Both are expiry: the informer relists. With complete state the
// first rule is left to applier.lost.
func checkPosition(source string, st jetstream.StreamState, from uint64, complete bool) error {
	if st.FirstSeq > from+1 && !complete {
		return fmt.Errorf("%s: cannot watch from sequence %d: the stream's first retained sequence is %d (purged or expired): %w", source, from, st.FirstSeq, driver.ErrExpired)
	}
	if from > st.LastSeq {
		return fmt.Errorf("%s: cannot watch from sequence %d: the stream's last sequence is %d (was it deleted and created again?): %w", source, from, st.LastSeq, driver.ErrExpired)
	}
	return nil
}

// consume runs the current feed until it fails, ctx ends or Emit fails.
func (w *tail[T]) consume(ctx context.Context, progress <-chan struct{}) error {
	var idle <-chan time.Time
	var idleTimer *time.Timer
	if w.r.idle > 0 {
		idleTimer = time.NewTimer(w.r.idle)
		defer idleTimer.Stop()
		idle = idleTimer.C
	}
	var retryC <-chan time.Time
	for {
		if w.wantProgress && retryC == nil {
			// Messages already buffered go first: they may be what the
			// leader would show as pending.
			if w.f.pending() {
				if err := w.take(ctx); err != nil {
					return err
				}
				continue
			}
			done, err := w.head(ctx, true)
			if err != nil {
				return err
			}
			if !done {
				retryC = time.After(progressRetry)
			}
		}
		select {
		case <-w.f.ready:
			if err := w.take(ctx); err != nil {
				return err
			}
			retryC = nil // look again now that the consumer moved
			if idleTimer != nil {
				idleTimer.Reset(w.r.idle)
			}
		case <-retryC:
			retryC = nil
		case err := <-w.f.errs:
			return fmt.Errorf("%s: watch after sequence %d: %w", w.r.source, w.pos, w.r.fatal(&feedError{err}))
		case <-progress:
			w.wantProgress = true
			retryC = nil
		case <-w.connected:
			// Values may have been purged while the connection was down,
			// and no message may come to reveal it.
			if err := w.verify(ctx, nil); err != nil {
				return err
			}
		case <-idle:
			if _, err := w.head(ctx, false); err != nil {
				return err
			}
			idleTimer.Reset(w.r.idle)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// take applies the messages buffered (at most a batch), after checking the
// stream's state if they pass over messages or come after a reconnect,
// and emits them as one batch. A consumer sequence gap ends the feed after
// what came before it is emitted.
func (w *tail[T]) take(ctx context.Context) error {
	var bad error
	batch := w.f.take()
	msgs, seqs := batch[:0], w.seqs[:0]
	for _, m := range batch {
		meta, err := w.f.check(m)
		if err != nil {
			bad = fmt.Errorf("%s: watch after sequence %d: %w", w.r.source, w.pos, err)
			break
		}
		msgs = append(msgs, m)
		seqs = append(seqs, meta.sseq)
	}
	w.seqs = seqs
	if len(msgs) > 0 {
		w.delivered = true
		if err := w.verify(ctx, seqs); err != nil {
			return err
		}
		out := w.out[:0]
		for i, m := range msgs {
			out = w.a.apply(m, seqs[i], out)
		}
		last := seqs[len(seqs)-1]
		if len(out) == 0 {
			if w.r.supersedes && !contiguous(w.pos, seqs) {
				// A bookmark here would claim the skipped sequences,
				// whose changes may be superseded by messages still to
				// come: the position moves, the head proof bookmarks.
				w.pos = last
				return bad
			}
			// Messages that changed nothing (a reducer's no-op) still move
			// the position, which WaitFor can use.
			out = append(out, driver.Event[T]{Type: driver.Bookmark, RV: core.ResourceVersion(last)})
		}
		if err := w.send(out, last); err != nil {
			return err
		}
	}
	return bad
}

// contiguous reports whether seqs follow pos with no sequence skipped.
func contiguous(pos uint64, seqs []uint64) bool {
	return len(seqs) > 0 && seqs[0] == pos+1 && seqs[len(seqs)-1]-seqs[0] == uint64(len(seqs)-1)
}

// send emits a batch that ends at version last.
func (w *tail[T]) send(out []driver.Event[T], last uint64) error {
	w.dirty = true
	err := w.emit(out)
	clear(out) // let the objects go; the slice is reused
	w.out = out[:0]
	if err != nil {
		return err
	}
	w.pos, w.dirty = last, false
	return nil
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
func (w *tail[T]) verify(ctx context.Context, seqs []uint64) error {
	if w.a.skipsSafe() {
		return nil
	}
	reconnects := reconnectCount(w.r.nc)
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
	info, err := w.r.info(ctx)
	if err != nil {
		// The watch cannot vouch for what it skipped; the next one starts
		// from the position and checks again.
		return fmt.Errorf("%s: read stream state to check the messages after sequence %d: %w", w.r.source, w.pos, err)
	}
	if err := w.r.id.check(w.r.source, info); err != nil {
		return err
	}
	if err := w.checkLost(ctx, info.State.FirstSeq); err != nil {
		if len(seqs) > 0 && errors.Is(err, driver.ErrExpired) {
			return fmt.Errorf("before sequence %d: %w", seqs[0], err)
		}
		return err
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

// head reads the stream's head from its leader and emits a Bookmark there
// when the leader holds no message the filter matches between the
// position and it: everything up to the head has then been delivered,
// whichever node the consumer reads. It also notices held values that
// vanished without a delete marker. done reports that a requested
// bookmark was sent (or that none was requested).
func (w *tail[T]) head(ctx context.Context, requested bool) (done bool, err error) {
	reconnects := reconnectCount(w.r.nc)
	info, err := w.r.info(ctx)
	if err != nil {
		return false, fmt.Errorf("%s: read stream state at sequence %d: %w", w.r.source, w.pos, err)
	}
	same := w.r.id.known()
	if err := w.r.id.check(w.r.source, info); err != nil {
		return false, err
	}
	if err := w.checkLost(ctx, info.State.FirstSeq); err != nil {
		return false, err
	}
	w.reconnects = reconnects
	last := info.State.LastSeq
	if last < w.pos && same {
		// The same stream (its creation time unchanged) cannot have lost
		// messages the consumer delivered: the answer came from a leader
		// that had not stored them yet (one just elected, lagging the node
		// the consumer reads). Read it again later, as for a head the
		// consumer has not reached.
		w.r.log.Debug("stream head read behind the watch's position from a lagging leader; reading it again", "stream", w.r.source, "head", last, "position", w.pos)
		return !requested, nil
	}
	if last < w.pos {
		return false, fmt.Errorf("%s: the stream's last sequence %d is before the watch's position %d (was it deleted and created again?): %w", w.r.source, last, w.pos, driver.ErrExpired)
	}
	if last > w.pos {
		ok, err := w.r.covered(ctx, w.pos, last)
		if err != nil {
			return false, err
		}
		if !ok {
			return !requested, nil // the consumer is about to deliver it
		}
	} else if !requested {
		return true, nil
	}
	if err := w.send(append(w.out[:0], driver.Event[T]{Type: driver.Bookmark, RV: core.ResourceVersion(last)}), last); err != nil {
		return false, err
	}
	// The head was read after every request received so far.
	w.wantProgress = false
	return true, nil
}
