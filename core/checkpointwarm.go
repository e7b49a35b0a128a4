package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/dbinformer/dbinformer/core/checkpoint"
	"github.com/dbinformer/dbinformer/core/driver"
)

// warmState is one run's warm start: the checkpoint's version, and the
// source's head the cache must reach before it counts as synced; and, for
// the log line once it has (logWarmSynced), what it waited for.
type warmState struct {
	from   ResourceVersion
	target atomic.Uint64
	known  atomic.Bool // target is set

	began    time.Time
	errsAt   int64        // the errors the informer had reported when it began
	loadedAt atomic.Int64 // UnixNano; 0 until the checkpoint is in the cache
	objects  atomic.Int64 // the checkpoint's
	changes  atomic.Int64 // deltas applied before synced
	relisted atomic.Bool  // a list replaced the checkpoint
}

func (w *warmState) caughtUp(applied ResourceVersion) bool {
	return w.known.Load() && uint64(applied) >= w.target.Load()
}

// reach sets the version the cache must reach to be synced: the source's
// head read at a warm start, or the version of a list that replaced the
// checkpoint (it expired), as after a cold start.
func (w *warmState) reach(rv ResourceVersion) {
	w.target.Store(uint64(rv))
	w.known.Store(true)
}

// listed is the reflector's hook after a list.
func (w *warmState) listed(rv ResourceVersion) {
	w.relisted.Store(true)
	w.reach(rv)
}

// logWarmSynced logs, once a warm start has synced, how long it took and
// what it waited for: loading the checkpoint, then the source's changes
// from the checkpoint's version to the head read at the start (a slot or
// a history replaying them), or a list that replaced the checkpoint. A
// restart slower than usual says why here.
func (i *SharedIndexInformer[T]) logWarmSynced(ctx context.Context, w *warmState) {
	now := i.clk.Now()
	attrs := []slog.Attr{slog.String("source", i.name), slog.Duration("took", now.Sub(w.began))}
	loaded := now
	if at := w.loadedAt.Load(); at != 0 {
		loaded = time.Unix(0, at)
	}
	what := "the source's changes from the checkpoint's version to its head"
	if w.relisted.Load() {
		what = "a list that replaced the checkpoint (see the errors reported before)"
	}
	attrs = append(attrs,
		slog.Uint64("checkpoint", uint64(w.from)), slog.Int64("objects", w.objects.Load()),
		slog.Duration("load", loaded.Sub(w.began)),
		slog.String("waited_for", what),
		slog.Uint64("head", w.target.Load()), slog.Int64("changes", w.changes.Load()),
		slog.Duration("catch_up", now.Sub(loaded)))
	// What went wrong meanwhile (each was reported when it happened):
	// the watch's retries, a Restore or a head read that failed.
	if n, last := i.rep.reported(); n > w.errsAt {
		attrs = append(attrs, slog.Int64("errors", n-w.errsAt), slog.String("last_error", last.Error()))
	}
	i.rep.logger.LogAttrs(ctx, slog.LevelInfo, "dbinformer: warm start synced", attrs...)
}

// replayFilter holds what a warm start must not apply: the loaded objects
// whose state is later than the checkpoint's version, and that state's
// version. The watch from the checkpoint's version replays every change
// after it, and a change at or before such an object's version is older
// than (or already in) the object: applied, it would take the key back,
// and a handler would see its version go backwards. Once the cache has
// applied upTo, no such change can come.
type replayFilter struct {
	later map[string]ResourceVersion
	upTo  ResourceVersion
}

func newReplayFilter(later map[string]ResourceVersion) *replayFilter {
	if len(later) == 0 {
		return nil
	}
	f := &replayFilter{later: later}
	for _, v := range later {
		f.upTo = max(f.upTo, v)
	}
	return f
}

// stale reports whether a change (change: not a list's or a resync's
// delta) of key at rv is older than the key's loaded state.
func (f *replayFilter) stale(key string, rv ResourceVersion, change bool) bool {
	if f == nil || !change || rv == 0 {
		return false
	}
	v, ok := f.later[key]
	return ok && rv <= v
}

// warmStart is the reflector's start hook: it loads the last checkpoint
// into the cache (handlers get its objects as initial adds) and returns its
// version, and whether the reflector may watch from it (false: the source
// could not take the checkpoint's state, relist). ok is false when there is
// no usable checkpoint.
func (i *SharedIndexInformer[T]) warmStart(ctx context.Context, c *checkpointer[T], ws *warmState) (rv ResourceVersion, watch, ok bool) {
	rc, err := c.opts.Store.Load(ctx, c.name)
	if err != nil {
		if !errors.Is(err, checkpoint.ErrNotFound) && ctx.Err() == nil {
			err = &CheckpointError{Name: c.name, Op: "load", Err: err}
			c.note(i.clk.Now(), false, err)
			i.rep.report(ctx, err)
		}
		return 0, false, false
	}
	// Objects no index function needs values of are decoded when first
	// read; handlers get their initial adds a page at a time, decoded in
	// each handler's goroutine (loadCheckpoint).
	lazy := len(i.indexer.GetIndexers()) == 0

	// Restore and the head's read overlap the decoding (warmOverlap).
	ov := i.newWarmOverlap(ctx)
	defer ov.hstop()
	rv, objs, err := decodeCheckpoint(rc, c.codec, c.name, lazy, ov.onHeader)
	rc.Close()
	ov.decodedAs(objs, err)
	if err != nil {
		ov.wait(false)
		if ctx.Err() == nil {
			i.rep.report(ctx, &CheckpointError{Name: c.name, Op: "load", Err: err})
		}
		return 0, false, false
	}
	ws.from = rv
	ws.objects.Store(int64(objs.n))
	i.warm.Store(ws)
	// Before the objects are in the cache: the watch's first change must
	// find the filter. The record learns the loaded states' versions, for
	// the next save.
	for k, v := range objs.later {
		c.rec.touch(k, v)
	}
	i.replay.Store(newReplayFilter(objs.later))
	if err := i.putCheckpoint(ctx, rv, objs); err != nil {
		// Only ctx ends a Replace that lists from memory.
		ov.wait(false)
		return 0, false, false
	}
	ws.loadedAt.Store(i.clk.Now().UnixNano())
	c.mu.Lock()
	c.statMu.Lock()
	c.saved, c.wrote = rv, true
	c.statMu.Unlock()
	c.mu.Unlock()
	<-ov.restored
	watch = ov.restoreErr == nil
	if !watch && ctx.Err() == nil {
		i.rep.report(ctx, fmt.Errorf("%s: restore the source's state at checkpoint version %d (relisting instead): %w", i.name, rv, ov.restoreErr))
	}
	ov.wait(watch)
	if watch && ov.headOK {
		ws.reach(ov.head)
	}
	return rv, watch, true
}

// warmOverlap is what a warm start does while it reads the checkpoint.
// Once the header names the version, the source restores its state
// for it and its head is read, while the objects are read and decoded:
// both wait on the network. Restore's objects wait for the decoding,
// and are none if the checkpoint turns out unusable (the informer then
// lists, which replaces whatever Restore set up).
type warmOverlap[T any] struct {
	i   *SharedIndexInformer[T]
	ctx context.Context

	objs       *loaded[T] // set before decoded is closed
	decoded    chan struct{}
	restoreErr error
	restored   chan struct{}
	head       ResourceVersion
	headOK     bool
	headRead   chan struct{}
	began      bool // onHeader ran (in decodeCheckpoint's goroutine)
	hctx       context.Context
	hstop      context.CancelFunc
}

// newWarmOverlap returns a warm start's overlap before its header is read;
// the caller calls hstop when the warm start ends.
func (i *SharedIndexInformer[T]) newWarmOverlap(ctx context.Context) *warmOverlap[T] {
	o := &warmOverlap[T]{
		i:        i,
		ctx:      ctx,
		decoded:  make(chan struct{}),
		restored: make(chan struct{}),
		headRead: make(chan struct{}),
	}
	o.hctx, o.hstop = context.WithCancel(ctx)
	return o
}

// onHeader is decodeCheckpoint's hook once the header matches: it starts
// reading the source's head, and restoring the source's state at rv.
func (o *warmOverlap[T]) onHeader(rv ResourceVersion) {
	o.began = true
	go func() {
		defer close(o.headRead)
		o.head, o.headOK = o.i.readHead(o.hctx, rv)
	}()
	r, ok := driver.Capability[driver.Restorer[T]](o.i.lw)
	if !ok {
		close(o.restored)
		return
	}
	go func() {
		defer close(o.restored)
		o.restoreErr = r.Restore(o.ctx, rv, func(yield func(string, T) bool) {
			<-o.decoded
			if o.objs != nil {
				o.objs.all(yield)
			}
		})
	}()
}

// decodedAs hands Restore the decoded objects (none if the decoding
// failed) once decodeCheckpoint has returned.
func (o *warmOverlap[T]) decodedAs(objs *loaded[T], err error) {
	if err == nil {
		o.objs = objs
	}
	close(o.decoded)
}

// wait ends what onHeader started; the head is waited for only when
// it is needed.
func (o *warmOverlap[T]) wait(needHead bool) {
	if !o.began {
		return
	}
	<-o.restored
	if !needHead {
		o.hstop()
	}
	<-o.headRead
}

// putCheckpoint puts the loaded checkpoint into the cache: in one pass
// into an empty one (loadCheckpoint), else as a list would. An error is
// ctx's.
func (i *SharedIndexInformer[T]) putCheckpoint(ctx context.Context, rv ResourceVersion, objs *loaded[T]) error {
	if i.loadCheckpoint(ctx, rv, objs) {
		return nil
	}
	// The cache holds a previous run's objects: the checkpoint
	// replaces them like a list, which tells handlers the
	// differences.
	return i.queue.Replace(ctx, func(put func(Delta[T]) error) (ResourceVersion, error) {
		for k, o := range objs.all {
			if err := put(Delta[T]{Type: DeltaReplaced, Key: k, Object: o, HasObject: true}); err != nil {
				return 0, err
			}
		}
		return rv, nil
	})
}

// loadCheckpoint puts a checkpoint's objects into an empty cache in one
// pass (Indexer.loadEmpty), marks the queue populated at rv as a processed
// list would, and hands every handler the objects as initial adds, through
// the same buffers as a list's (a lazily loaded page as one notification
// that stands for all its objects). It returns false, changing nothing, when
// the cache or the queue is not empty.
func (i *SharedIndexInformer[T]) loadCheckpoint(ctx context.Context, rv ResourceVersion, objs *loaded[T]) bool {
	q, ok := i.queue.(listLoader)
	if !ok {
		return false
	}
	// No handler is added meanwhile (it would replay the loaded cache and
	// then get the adds again).
	i.handleMu.RLock()
	defer i.handleMu.RUnlock()
	var skipped map[string]error
	if !q.loadList(rv, func() bool {
		var ok bool
		ok, skipped = i.indexer.loadEmpty(objs.base)
		return ok
	}) {
		return false
	}
	for _, err := range skipped {
		i.rep.report(ctx, fmt.Errorf("%s: checkpoint version %d: %w", i.name, rv, err))
	}
	if len(i.listeners) == 0 {
		return true
	}
	notes := make([]notification[T], 0, 256)
	flush := func() {
		for _, l := range i.listeners {
			l.add(notes)
		}
		clear(notes)
		notes = notes[:0]
	}
	if objs.lazy() && len(skipped) == 0 {
		// One notification per page: each handler's goroutine decodes
		// the page's loaded objects when it gets there.
		for _, p := range objs.parts {
			notes = append(notes, notification[T]{kind: noteReplay, flag: true, page: p.page.lazy})
			if len(notes) == 256 {
				flush()
			}
		}
		flush()
		return true
	}
	for k, o := range objs.all {
		if _, bad := skipped[k]; bad {
			continue
		}
		notes = append(notes, notification[T]{kind: noteAdd, flag: true, key: k, obj: o})
		if len(notes) == 256 {
			flush()
		}
	}
	flush()
	return true
}

// readHead returns the version a warm start from checkpoint version from
// must reach to be synced: the source's head (driver.HeadReader), or from itself
// for a source that cannot tell its head. It retries until ctx ends
// (false).
func (i *SharedIndexInformer[T]) readHead(ctx context.Context, from ResourceVersion) (ResourceVersion, bool) {
	h, ok := driver.Capability[driver.HeadReader](i.lw)
	if !ok {
		return from, true
	}
	bo := newBackoffState(i.opts.Backoff, i.clk)
	for ctx.Err() == nil {
		head, err := h.Head(ctx)
		if err == nil {
			return max(head, from), true
		}
		if ctx.Err() == nil {
			i.rep.report(ctx, fmt.Errorf("%s: read the source's head after loading checkpoint version %d: %w", i.name, from, err))
		}
		t := i.clk.NewTimer(bo.next())
		select {
		case <-ctx.Done():
		case <-t.C():
		}
		t.Stop()
	}
	return 0, false
}

// warmSynced is checkSynced's extra condition during a warm start.
func (i *SharedIndexInformer[T]) warmSynced() bool {
	ws := i.warm.Load()
	return ws == nil || ws.caughtUp(i.queue.AppliedVersion())
}

// startWarm runs the reflector's warm-start hook: the checkpoint is loaded
// and the next watch starts from its version (watch) or a list replaces it.
func (r *Reflector[T]) startWarm(ctx context.Context) (watch, ok bool) {
	if r.cfg.warm == nil {
		return false, false
	}
	rv, watch, ok := r.cfg.warm(ctx)
	if ok {
		r.lastRV.Store(uint64(rv))
		r.catchUp.Store(watch)
	}
	return watch, ok
}
