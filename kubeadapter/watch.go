package kubeadapter

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/dbinformer/dbinformer/core"
)

const (
	// maxBatch bounds how many already-arrived events one Next returns.
	maxBatch = 256
	// progressWatchTimeout is the server-side timeout of the short watch
	// opened to answer RequestProgress. The apiserver's watch cache sends
	// every watch a bookmark two seconds before its deadline (and otherwise
	// only about once a minute), so a 3 s watch yields a bookmark about a
	// second after it starts.
	progressWatchTimeout int64 = 3
	// progressGrace is how long a progress request waits for the open
	// stream to pass the requested version by itself (it usually does when
	// the version belongs to a watched write in flight) before the stream is
	// replaced by a short one.
	progressGrace = 300 * time.Millisecond
)

// Watch opens a watch that delivers every change after from, with
// bookmarks. from must be a version the server still serves (one returned
// by List or seen in a later event); 0 asks for the whole history, which no
// apiserver keeps, and fails with core.ErrExpired so that the caller lists.
//
// The watch lives until ctx is done or Stop is called. When the server ends
// the stream after delivering something (its request timeout, typically
// 30-60 minutes), the watch reopens from the last delivered version by
// itself; a stream that ends before delivering anything is reported as an
// error so that the caller backs off.
func (lw *ListerWatcher[T]) Watch(ctx context.Context, from core.ResourceVersion) (core.Watcher[T], error) {
	if from == 0 {
		return nil, fmt.Errorf("%s: watch from version 0: the apiserver keeps no history from the beginning; list first: %w", lw.source, core.ErrExpired)
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &watcher[T]{lw: lw, ctx: wctx, cancel: cancel, last: from, wake: make(chan struct{}, 1)}
	if err := w.open(false); err != nil {
		cancel()
		return nil, err
	}
	return w, nil
}

type watcher[T Object] struct {
	lw     *ListerWatcher[T]
	ctx    context.Context // the watch's lifetime; cancelled by Stop
	cancel context.CancelFunc
	wake   chan struct{} // RequestProgress nudges a blocked Next

	// nextMu serialises Next; the fields below it are owned by Next.
	nextMu      sync.Mutex
	stream      watch.Interface
	probing     bool // stream is a short watch opened for a bookmark
	delivered   bool // stream has delivered at least one event
	last        core.ResourceVersion
	pendingErr  error
	stopStreams sync.Mutex // guards stream against Stop

	mu        sync.Mutex
	want      core.ResourceVersion // a bookmark at or after this was requested
	wantSince time.Time            // when want was first set
}

func (w *watcher[T]) open(probe bool) error {
	opts := metav1.ListOptions{
		LabelSelector:       w.lw.cfg.LabelSelector,
		FieldSelector:       w.lw.cfg.FieldSelector,
		ResourceVersion:     w.last.String(),
		AllowWatchBookmarks: true,
	}
	if probe {
		t := progressWatchTimeout
		opts.TimeoutSeconds = &t
	}
	s, err := w.lw.watch(w.ctx, opts)
	if err != nil {
		if w.ctx.Err() != nil {
			return w.ctx.Err()
		}
		return w.lw.apiError(fmt.Sprintf("watch from version %d", w.last), err)
	}
	w.stopStreams.Lock()
	if w.ctx.Err() != nil { // Stop raced with us
		w.stopStreams.Unlock()
		s.Stop()
		return w.ctx.Err()
	}
	w.stream, w.probing, w.delivered = s, probe, false
	w.stopStreams.Unlock()
	if probe {
		w.lw.log.Debug("kubeadapter: short watch opened for a bookmark", "from", w.last, "want", w.wanted())
	}
	return nil
}

func (w *watcher[T]) reopen(probe bool) error {
	w.stopStreams.Lock()
	old := w.stream
	w.stopStreams.Unlock()
	old.Stop()
	return w.open(probe)
}

func (w *watcher[T]) wanted() core.ResourceVersion {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.want
}

// probeDue returns whether a short watch should replace the stream now,
// and otherwise how long until it should (0: no request outstanding).
func (w *watcher[T]) probeDue() (bool, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.want <= w.last || w.probing {
		return false, 0
	}
	if d := time.Until(w.wantSince.Add(progressGrace)); d > 0 {
		return false, d
	}
	return true, 0
}

// RequestProgress makes the watch deliver a Bookmark at or after the
// server's current version. Kubernetes has no such request on an open
// watch, so it is built from two guarantees of the apiserver: a consistent
// one-object list returns a version H at least the head at the time of the
// request (and brings the watch cache up to H), and the watch cache sends a
// watch a bookmark, in order with its events, shortly before the watch's
// deadline. If events at or after H have not arrived by themselves, Next
// reopens the stream from the last delivered version as a watch of a few
// seconds, whose bookmark then says that everything up to H was delivered.
// Nothing is skipped or repeated: the new stream starts strictly after the
// last version Next returned. The watch cache sends no bookmark at the version
// of the last event it replayed to a new watch (filtered out or not), so when
// H is the newest change of the whole cluster the bookmark waits for the next
// change of anything; see the package documentation.
func (w *watcher[T]) RequestProgress(ctx context.Context) error {
	head, err := w.lw.Head(ctx)
	if err != nil {
		return err
	}
	w.mu.Lock()
	if w.want == 0 {
		w.wantSince = time.Now()
	}
	if head > w.want {
		w.want = head
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return nil
}

// Stop ends the watch; a blocked Next returns the watch's context error.
func (w *watcher[T]) Stop() {
	w.cancel()
	w.stopStreams.Lock()
	s := w.stream
	w.stopStreams.Unlock()
	if s != nil {
		s.Stop()
	}
}

// Next returns the next batch: the first event to arrive plus whatever else
// has already arrived, up to maxBatch.
func (w *watcher[T]) Next(ctx context.Context) ([]core.Event[T], error) {
	w.nextMu.Lock()
	defer w.nextMu.Unlock()
	if err := w.pendingErr; err != nil {
		return nil, err
	}
	for {
		if err := w.ctx.Err(); err != nil {
			return nil, err
		}
		due, wait := w.probeDue()
		if due {
			if err := w.reopen(true); err != nil {
				return nil, w.fail(err)
			}
		}
		ev, ok, err := w.receive(ctx, wait)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		batch, err := w.add(nil, ev)
		if err != nil {
			return nil, w.fail(err)
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case ev, ok := <-w.stream.ResultChan():
				if !ok {
					break drain // handled by the next call
				}
				var err error
				if batch, err = w.add(batch, ev); err != nil {
					// Deliver what came before the failure first.
					w.pendingErr = err
					break drain
				}
			default:
				break drain
			}
		}
		if len(batch) > 0 {
			return batch, nil
		}
		if w.pendingErr != nil {
			return nil, w.pendingErr
		}
	}
}

// receive waits for the next event of the stream. ok is false when
// something else needs a look first: a progress request, the probe delay
// (wait, if not 0) running out, or the stream ending and being replaced.
func (w *watcher[T]) receive(ctx context.Context, wait time.Duration) (ev watch.Event, ok bool, err error) {
	var probeTimer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		probeTimer = t.C
	}
	select {
	case <-probeTimer:
		return ev, false, nil
	case <-ctx.Done():
		return ev, false, ctx.Err()
	case <-w.ctx.Done():
		return ev, false, w.ctx.Err()
	case <-w.wake:
		return ev, false, nil
	case ev, ok := <-w.stream.ResultChan():
		if !ok {
			if err := w.streamEnded(); err != nil {
				return ev, false, w.fail(err)
			}
			return ev, false, nil
		}
		return ev, true, nil
	}
}

// fail makes err final: every later Next returns it too.
func (w *watcher[T]) fail(err error) error {
	if w.ctx.Err() != nil {
		err = w.ctx.Err()
	}
	w.pendingErr = err
	return err
}

// streamEnded decides what a closed result channel means.
func (w *watcher[T]) streamEnded() error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	switch {
	case w.probing:
		// The short watch ran out; go on with a normal one, or another
		// short one if the bookmark has not come yet.
		return w.open(w.wanted() > w.last)
	case w.delivered:
		w.lw.log.Debug("kubeadapter: the server ended the watch; reopening", "from", w.last)
		return w.open(false)
	default:
		return fmt.Errorf("%s: the server ended the watch from version %d without sending anything", w.lw.source, w.last)
	}
}

// add converts one watch event and appends it to batch.
func (w *watcher[T]) add(batch []core.Event[T], ev watch.Event) ([]core.Event[T], error) {
	w.delivered = true
	var typ core.EventType
	switch ev.Type {
	case watch.Added:
		typ = core.Added
	case watch.Modified:
		typ = core.Modified
	case watch.Deleted:
		typ = core.Deleted
	case watch.Bookmark:
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			return batch, fmt.Errorf("%s: bookmark without metadata (%T): %w", w.lw.source, ev.Object, err)
		}
		rv, err := core.ParseResourceVersion(m.GetResourceVersion())
		if err != nil {
			return batch, fmt.Errorf("%s: bookmark: %w", w.lw.source, err)
		}
		// The watch cache can send a bookmark older than events it already
		// replayed to a new watch; it says nothing new.
		w.lw.log.Debug("kubeadapter: bookmark", "rv", rv, "last", w.last)
		if rv <= w.last {
			return batch, nil
		}
		w.advance(rv)
		return append(batch, core.Event[T]{Type: core.Bookmark, RV: rv}), nil
	case watch.Error:
		err := apierrors.FromObject(ev.Object)
		return batch, w.lw.apiError(fmt.Sprintf("watch after version %d", w.last), err)
	default:
		return batch, fmt.Errorf("%s: watch event of unknown type %q", w.lw.source, ev.Type)
	}
	e, err := w.lw.event(typ, ev.Object)
	if err != nil {
		return batch, err
	}
	if e.RV <= w.last {
		// A stream reopened from w.last never sends this; refuse to
		// deliver it twice rather than break the order.
		return batch, fmt.Errorf("%s: key %q at version %d arrived after version %d", w.lw.source, e.Key, e.RV, w.last)
	}
	w.advance(e.RV)
	return append(batch, e), nil
}

// advance records that everything up to rv has been delivered and retires
// a progress request that rv satisfies.
func (w *watcher[T]) advance(rv core.ResourceVersion) {
	w.last = rv
	w.mu.Lock()
	if w.want <= rv {
		w.want = 0
	}
	w.mu.Unlock()
}
