package kubeinformer

import (
	"context"
	"fmt"
	"maps"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

const (
	// maxBatch bounds how many already-arrived events one Emit carries.
	maxBatch = 256
	// progressWatchTimeout is the server-side timeout of the short watch
	// opened to answer a progress request. The apiserver's watch cache
	// sends every watch a bookmark shortly before its deadline (and
	// otherwise only about once a minute), so a 3 s watch yields a bookmark
	// about a second after it starts.
	progressWatchTimeout int64 = 3
	// progressGrace is how long a progress request waits for the open
	// stream to pass the requested version by itself (it usually does when
	// the version belongs to a watched write in flight) before the stream is
	// replaced by a short one.
	progressGrace = 300 * time.Millisecond
	// progressHeadTimeout bounds the read of the head version that a
	// progress request starts with.
	progressHeadTimeout = 5 * time.Second
	// openTimeout bounds the wait for the apiserver's answer to a watch
	// request (its headers; the stream itself is not bounded).
	openTimeout = 5 * time.Second
)

// Watch delivers every change after from through opts.Emit, with
// bookmarks, until ctx is done (an error matching driver.ErrWatchStopped), the
// server no longer has from or a later version it needs (410 Gone, "too
// large resource version": driver.ErrExpired), the resource is not served any
// more (404, a removed CustomResourceDefinition: driver.ErrPermanent), Emit
// fails (its error), or the connection breaks (that error; the caller
// resumes from the last version it was given). Events that arrived before a
// failure are emitted before Watch returns it. from must be a version the
// server still serves (one returned by List or seen in a later event); 0
// asks for the whole history, which no apiserver keeps, and fails with
// driver.ErrExpired so that the caller lists.
//
// When the server ends the stream after delivering something (its request
// timeout, typically 30-60 minutes), Watch reopens it from the last
// delivered version by itself; a stream that ends before delivering
// anything is returned as an error so that the caller backs off.
//
// Progress requests (opts.Progress): Kubernetes has no such request on an
// open watch, so Watch builds one from two guarantees of the apiserver. A
// consistent one-object list (Head) returns a version H at least the head
// at the time of the request, and brings the watch cache up to H; and the
// watch cache sends a watch a bookmark, in order with its events, shortly
// before the watch's deadline. If events at or after H do not arrive by
// themselves within a moment, Watch reopens its stream from the last
// delivered version as a watch of a few seconds, whose bookmark then says
// that everything up to H was delivered, and then goes back to a normal
// stream. A short watch that ends without reaching H (the watch cache
// withholds bookmarks from a new watch until its version moves past the
// last change it replayed, even one the selectors filtered out) is followed
// by two lists of the selected objects' keys and versions, at the last
// delivered version and at H or later: if they agree, the answer is a
// bookmark at the second list's version and the stream is reopened from
// there (see verify); if not, another short watch. No event is repeated,
// and none that changes the state is skipped (every new stream starts
// strictly after the last version emitted), and every bookmark carries a
// version the server sent: when H is reached by an event, the answer is a
// bookmark at that event's version, right after it. A request for a version already emitted is answered at
// once with a bookmark at the last emitted version. A Head that fails ends
// the watch with its error.
func (r *Resource[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) (err error) {
	defer func() {
		// Whatever was going on when ctx ended, the answer is "stopped".
		if ctx.Err() != nil {
			err = driver.Stopped(ctx)
		}
	}()
	if opts.Emit == nil {
		return fmt.Errorf("%s: Watch: WatchOptions.Emit is nil", r.source)
	}
	if from == 0 {
		return fmt.Errorf("%s: watch from version 0: the apiserver keeps no history from the beginning; list first: %w", r.source, driver.ErrExpired)
	}
	w := &watcher[T]{r: r, ctx: ctx, opts: opts, from: from, last: from}
	defer w.close()
	if err := w.open(false); err != nil {
		return err
	}
	return w.run()
}

// watcher is the state of one Watch call, owned by its goroutine.
type watcher[T Object] struct {
	r    *Resource[T]
	ctx  context.Context
	opts driver.WatchOptions[T]

	stream     watch.Interface
	stopStream context.CancelFunc   // ends stream's context
	probing    bool                 // stream is a short watch opened for a bookmark
	delivered  bool                 // stream has sent at least one event
	emptyEnds  int                  // streams in a row that ended having sent nothing
	from       core.ResourceVersion // the version Watch was called with
	last       core.ResourceVersion // the last version emitted (or from)

	want      core.ResourceVersion // a bookmark at or after this was requested; 0: none
	wantSince time.Time            // when want was set
	answered  bool                 // an event of the batch being built reached want

	timer *time.Timer       // the progress grace period; nil until first needed
	buf   []driver.Event[T] // reused between batches: Emit does not keep it
}

func (w *watcher[T]) close() {
	if w.stream != nil {
		w.stream.Stop()
		w.stopStream()
	}
	if w.timer != nil {
		w.timer.Stop()
	}
}

// open replaces the stream with one from w.last: a normal one, or, if
// probe, a short one that ends with a bookmark.
func (w *watcher[T]) open(probe bool) error {
	if w.stream != nil {
		w.stream.Stop()
		w.stopStream()
		w.stream = nil
	}
	lo := metav1.ListOptions{
		LabelSelector:       w.r.opts.LabelSelector,
		FieldSelector:       w.r.opts.FieldSelector,
		ResourceVersion:     w.last.String(),
		AllowWatchBookmarks: true,
	}
	if probe {
		t := progressWatchTimeout
		lo.TimeoutSeconds = &t
	}
	// The stream lives in a context of its own, so that a server that
	// does not answer the request (frozen, a connection gone half-open)
	// can be given up after openTimeout without ending the watch's ctx.
	sctx, stop := context.WithCancel(w.ctx)
	late := time.AfterFunc(openTimeout, stop)
	s, err := w.r.watch(sctx, lo)
	if !late.Stop() && w.ctx.Err() == nil {
		if s != nil {
			s.Stop()
		}
		stop()
		if err != nil {
			// client-go was retrying a request cut short (EOF, a
			// reset): err is "context canceled - error from a previous
			// attempt: ...", what its retries ran into.
			return fmt.Errorf("%s: open watch from version %d: the apiserver did not answer within %v: %w", w.r.source, w.last, openTimeout, err)
		}
		return fmt.Errorf("%s: open watch from version %d: the apiserver did not answer within %v", w.r.source, w.last, openTimeout)
	}
	if err != nil {
		stop()
		what := "open watch" // the caller knows from which version
		if w.last != w.from {
			what = fmt.Sprintf("reopen watch from version %d", w.last)
		}
		return w.r.apiError(what, err)
	}
	w.stream, w.stopStream, w.probing, w.delivered = s, stop, probe, false
	if probe {
		w.r.log.Debug("kubeinformer: short watch opened for a bookmark", "from", w.last, "want", w.want)
	}
	return nil
}

func (w *watcher[T]) run() error {
	for {
		// A progress request the stream has not answered within the grace
		// period makes the stream a short one.
		var graceOver <-chan time.Time
		if w.want > w.last && !w.probing {
			d := time.Until(w.wantSince.Add(progressGrace))
			if d <= 0 {
				if err := w.open(true); err != nil {
					return err
				}
				continue
			}
			if w.timer == nil {
				w.timer = time.NewTimer(d)
			} else {
				w.timer.Reset(d)
			}
			graceOver = w.timer.C
		}
		select {
		case <-w.ctx.Done():
			return driver.Stopped(w.ctx)
		case <-graceOver:
		case _, ok := <-w.opts.Progress:
			if !ok {
				w.opts.Progress = nil // closed: no more requests
				continue
			}
			if err := w.requestProgress(); err != nil {
				return err
			}
		case ev, ok := <-w.stream.ResultChan():
			if !ok {
				if err := w.streamEnded(); err != nil {
					return err
				}
				continue
			}
			if err := w.deliver(ev); err != nil {
				return err
			}
		}
	}
}

// requestProgress learns the server's head and either answers at once (the
// head was emitted already) or records it as wanted.
func (w *watcher[T]) requestProgress() error {
	// Bounded, so that an apiserver that stopped answering (frozen, a
	// half-open connection) ends the watch with that said, well before
	// HTTP/2's health check (30s + 15s by default) would.
	hctx, cancel := context.WithTimeout(w.ctx, progressHeadTimeout)
	head, err := w.r.Head(hctx)
	cancel()
	if err != nil {
		return fmt.Errorf("progress request: %w", err)
	}
	if head <= w.last {
		w.buf = append(w.buf[:0], driver.Event[T]{Type: driver.Bookmark, RV: w.last})
		return w.opts.Emit(w.buf)
	}
	if w.want == 0 {
		w.wantSince = time.Now()
	}
	w.want = max(w.want, head)
	return nil
}

// deliver emits ev together with every event that has already arrived
// behind it, up to maxBatch. A failure is returned after what came before
// it was emitted.
func (w *watcher[T]) deliver(ev watch.Event) error {
	batch, failed := w.add(w.buf[:0], ev)
drain:
	for failed == nil && len(batch) < maxBatch {
		select {
		case ev, ok := <-w.stream.ResultChan():
			if !ok {
				break drain // seen again, and handled, by run's next receive
			}
			batch, failed = w.add(batch, ev)
		default:
			break drain
		}
	}
	if w.answered {
		// A progress request was passed by events: answer it with a
		// bookmark at the last of them, in order.
		batch = append(batch, driver.Event[T]{Type: driver.Bookmark, RV: w.last})
		w.answered = false
	}
	w.buf = batch
	w.r.residue.RewriteBatch(batch)
	if len(batch) > 0 {
		if err := w.opts.Emit(batch); err != nil {
			return err
		}
	}
	return failed
}

// streamEnded decides what a closed result channel means.
func (w *watcher[T]) streamEnded() error {
	switch {
	case w.probing && w.want > w.last:
		// The short watch ran out without reaching the version wanted:
		// see whether a list can show that nothing changed instead.
		return w.verify()
	case w.probing:
		// The short watch answered; go on with a normal one.
		return w.open(false)
	case w.delivered:
		w.emptyEnds = 0
		w.r.log.Debug("kubeinformer: the server ended the watch; reopening", "from", w.last)
		return w.open(false)
	case w.emptyEnds == 0:
		// Once, reopen at once: a removed resource ends its watches
		// without a word, and only the next open says why (404).
		w.emptyEnds++
		w.r.log.Debug("kubeinformer: the server ended the watch without sending anything; reopening once", "from", w.last)
		return w.open(false)
	default:
		// client-go hands back a watch that ends at once, and drops the
		// error, when its retries of a request cut short (EOF, a
		// timeout) run out: a read says what the requests run into.
		hctx, cancel := context.WithTimeout(w.ctx, progressHeadTimeout)
		_, err := w.r.Head(hctx)
		cancel()
		if err != nil && w.ctx.Err() == nil {
			return fmt.Errorf("%s: the server ended the watch from version %d twice without sending anything, and a read to find out why failed: %w", w.r.source, w.last, err)
		}
		return fmt.Errorf("%s: the server ended the watch from version %d twice without sending anything", w.r.source, w.last)
	}
}

// verify answers a progress request that a short watch did not: the
// apiserver's watch cache sends a new watch a bookmark only at a version
// after the last change it replayed to it, counting the changes the
// selectors filtered out, so a watch reopened from w.last over changes
// that all fall outside the selectors gets no bookmark until some later
// write moves the cache's version again (seconds, or much longer on a quiet
// cluster). verify lists the selected objects at w.last (an exact read) and
// at w.want or later (a read from the watch cache once it has reached
// w.want): if both hold the same objects at the same versions, nothing the
// selectors match changed between the two, and a bookmark at the second
// list's version claims no more than the consumer already has. The stream
// is then reopened from that version; a change that entered and left the
// selection in between, which the lists cannot show, leaves no trace in
// the state either. If the lists differ, the changes are there for the
// watch to deliver, and another short watch is opened. A version at w.last
// that the server no longer has fails with driver.ErrExpired, so that the
// caller lists again.
func (w *watcher[T]) verify() error {
	before, _, err := w.r.selected(w.ctx, metav1.ListOptions{
		ResourceVersion:      w.last.String(),
		ResourceVersionMatch: metav1.ResourceVersionMatchExact,
	})
	if err != nil {
		return fmt.Errorf("progress request: no bookmark reached version %d, and %w", w.want, err)
	}
	after, at, err := w.r.selected(w.ctx, metav1.ListOptions{
		ResourceVersion:      w.want.String(),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if err != nil {
		return fmt.Errorf("progress request: no bookmark reached version %d, and %w", w.want, err)
	}
	if at < w.want || !maps.Equal(before, after) {
		w.r.log.Debug("kubeinformer: the selected objects changed since the last version; waiting for the watch", "last", w.last, "want", w.want, "listed", at)
		return w.open(true)
	}
	w.r.log.Debug("kubeinformer: no selected object changed; bookmark from two lists", "last", w.last, "want", w.want, "listed", at)
	w.advance(at)
	w.buf = append(w.buf[:0], driver.Event[T]{Type: driver.Bookmark, RV: at})
	if err := w.opts.Emit(w.buf); err != nil {
		return err
	}
	return w.open(false)
}

// add converts one watch event and appends it to batch.
func (w *watcher[T]) add(batch []driver.Event[T], ev watch.Event) ([]driver.Event[T], error) {
	w.delivered = true
	var typ driver.EventType
	switch ev.Type {
	case watch.Added:
		typ = driver.Added
	case watch.Modified:
		typ = driver.Modified
	case watch.Deleted:
		typ = driver.Deleted
	case watch.Bookmark:
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			return batch, fmt.Errorf("%s: bookmark without metadata (%T): %w", w.r.source, ev.Object, err)
		}
		rv, err := driver.ParseResourceVersion(m.GetResourceVersion())
		if err != nil {
			return batch, fmt.Errorf("%s: bookmark: %w", w.r.source, err)
		}
		// The watch cache can send a bookmark older than events it already
		// replayed to a new watch; it says nothing new.
		w.r.log.Debug("kubeinformer: bookmark", "rv", rv, "last", w.last)
		if rv <= w.last {
			return batch, nil
		}
		w.advance(rv)
		w.answered = false // this bookmark is the answer
		return append(batch, driver.Event[T]{Type: driver.Bookmark, RV: rv}), nil
	case watch.Error:
		err := apierrors.FromObject(ev.Object)
		return batch, w.r.apiError(fmt.Sprintf("watch after version %d", w.last), err)
	default:
		return batch, fmt.Errorf("%s: watch event of unknown type %q", w.r.source, ev.Type)
	}
	e, err := w.r.event(typ, ev.Object)
	if err != nil {
		return batch, err
	}
	if e.RV <= w.last {
		// A stream reopened from w.last never sends this; refuse to
		// deliver it twice rather than break the order.
		return batch, fmt.Errorf("%s: key %q at version %d arrived after version %d", w.r.source, e.Key, e.RV, w.last)
	}
	if w.advance(e.RV) {
		w.answered = true
	}
	return append(batch, e), nil
}

// advance records that everything up to rv has been delivered and retires
// a progress request that rv satisfies, reporting whether it did.
func (w *watcher[T]) advance(rv core.ResourceVersion) bool {
	w.last = rv
	if w.want != 0 && w.want <= rv {
		w.want = 0
		return true
	}
	return false
}
