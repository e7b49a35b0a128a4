package etcdinformer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
)

// watch is one running Watch.
type watch[T any] struct {
	p     *Prefix[T]
	ctx   context.Context // carries the RequireLeader metadata
	from  core.ResourceVersion
	last  core.ResourceVersion // newest revision emitted (from until then)
	batch []driver.Event[T]    // reused: Emit does not keep it

	// heard is when the watch last received anything from etcd (or
	// started); asked when the oldest unanswered progress request was
	// made (zero: none). probes runs the client's Watch call and the
	// liveness probes (see probe).
	heard, asked time.Time
	probes       sync.WaitGroup

	// member is the etcd member that sent the last response; avoid is
	// one found frozen that this watch must not stay on (0: none).
	member, avoid uint64
	created       bool // a response arrived
}

// progressRetry is how long a watch waits for the answer to a progress
// request before asking again. etcd (3.6) drops a request that reaches it
// while one of the stream's watchers is still catching up on history (its
// RequestProgressAll returns false and nothing is sent), which a watch
// opened from an older revision always is at first.
const progressRetry = 250 * time.Millisecond

// run delivers the responses of ch until it fails; it never returns nil.
// Its loop stays one select over the watch's inputs (responses, progress
// requests, their retries, probes, the created deadline); what each case
// does is a method of its own (request, probeDone, response).
func (w *watch[T]) run(opened <-chan clientv3.WatchChan, opts driver.WatchOptions[T]) error {
	var ch clientv3.WatchChan // nil until opened
	progress := opts.Progress // nil: no requests
	var a progressAsk
	defer a.stop()
	w.heard = time.Now()
	createdC := w.createdDeadline()
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case <-w.ctx.Done():
			return driver.Stopped(w.ctx)
		case _, ok = <-progress:
			if !ok {
				progress = nil // closed: no more requests
				continue
			}
			if err := w.request(&a); err != nil {
				return err
			}
			continue
		case <-a.retryC:
			a.retryC = nil
			if err := w.request(&a); err != nil {
				return err
			}
			continue
		case ch = <-opened:
			opened = nil
			continue
		case <-createdC:
			return errOnFrozen // no answer at all while a member is known frozen
		case res := <-a.probeC:
			a.probeC = nil
			if err := w.probeDone(res, &a, opts.Emit); err != nil {
				return err
			}
			continue
		case resp, ok = <-ch:
		}
		w.heard = time.Now()
		createdC = nil
		if err := w.response(resp, ok, &a, opts.Emit); err != nil {
			return err
		}
	}
}

// progressAsk is run's state of the progress requests: while a request is
// unanswered, retry fires to ask again; a progress notification received
// after the request answers it. probeC is a running probe's answer (nil:
// none running).
type progressAsk struct {
	retry  *time.Timer
	retryC <-chan time.Time
	probeC <-chan probeResult
}

// stop stops the retry timer, if there is one.
func (a *progressAsk) stop() {
	if a.retry != nil {
		a.retry.Stop()
	}
}

// answered records that the watch's progress requests are answered: no
// retry is due any more.
func (w *watch[T]) answered(a *progressAsk) {
	w.asked = time.Time{}
	if a.retryC != nil {
		a.retry.Stop()
		a.retryC = nil
	}
}

// request asks etcd for a progress notification on the watch's stream,
// starts a probe when the watch has heard nothing for too long, and arms
// the retry.
func (w *watch[T]) request(a *progressAsk) error {
	if w.asked.IsZero() {
		w.asked = time.Now()
	}
	// On the watch's own context, so that the request goes to its
	// gRPC stream. While the client reconnects the stream takes no
	// request: that is silence, which the probe below looks into.
	rctx, cancel := context.WithTimeout(w.ctx, progressRetry)
	err := w.p.client.RequestProgress(rctx)
	cancel()
	if err != nil && w.ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
		return w.p.failed(fmt.Sprintf("request progress on the watch from revision %d", w.last+1), err)
	}
	if a.probeC == nil && w.silent() {
		a.probeC = w.probe()
	}
	if a.retry == nil {
		a.retry = time.NewTimer(progressRetry)
	} else {
		a.retry.Reset(progressRetry)
	}
	a.retryC = a.retry.C
	return nil
}

// probeDone acts on a finished probe: at the head it answers the watch's
// requests with a bookmark, else probed judges the member.
func (w *watch[T]) probeDone(res probeResult, a *progressAsk, emit func([]driver.Event[T]) error) error {
	if w.atHead(res) {
		// Nothing was written since the watch's start: etcd
		// (3.6) answers no progress request on a watch that
		// starts past its revision, so the silence is not a
		// frozen member. The watch has all there is.
		w.answered(a)
		w.batch = append(w.batch[:0], driver.Event[T]{Type: driver.Bookmark, RV: w.last})
		return emit(w.batch)
	}
	return w.probed(res)
}

// response delivers one response of the watch channel (ok false: the
// channel closed): an error ends the watch, a progress notification is a
// bookmark, events go to emit.
func (w *watch[T]) response(resp clientv3.WatchResponse, ok bool, a *progressAsk, emit func([]driver.Event[T]) error) error {
	p := w.p
	if err := w.heardFrom(resp.Header.MemberId); err != nil {
		return err
	}
	if !ok {
		return p.failed(fmt.Sprintf("watch from revision %d", w.last+1), errors.New("watch channel closed"))
	}
	if resp.CompactRevision != 0 {
		return p.expired(fmt.Sprintf("watch from revision %d", w.last+1), resp.CompactRevision, rpctypes.ErrCompacted)
	}
	if err := resp.Err(); err != nil {
		if errors.Is(err, rpctypes.ErrCompacted) {
			return p.expired(fmt.Sprintf("watch from revision %d", w.last+1), 0, err)
		}
		return p.failed(fmt.Sprintf("watch from revision %d", w.last+1), err)
	}
	if resp.IsProgressNotify() {
		w.answered(a)
		rv := core.ResourceVersion(resp.Header.Revision)
		if rv < w.last {
			// A bookmark below what was already delivered says
			// nothing new and would break the order the core
			// checks. etcd 3.6 orders progress notifications with
			// the events (etcd issue #15220); this guards against
			// older servers.
			return nil
		}
		w.batch = append(w.batch[:0], driver.Event[T]{Type: driver.Bookmark, RV: rv})
		if err := emit(w.batch); err != nil {
			return err
		}
		w.last = rv
		return nil
	}
	// Nothing for the Created response (no events).
	return w.emitEvents(resp.Events, emit)
}

// maxBatch is the number of events after which a watch hands what it has
// decoded of one etcd response to Emit, at the next revision boundary. A
// watch that catches up on history gets up to 1000 revisions in one
// response (etcd's watchBatchMaxRevs), 100,000 events for transactions
// of 100: decoded whole, that batch cost 96 bytes per event in a slice
// grown by doubling (about twice that allocated and copied), and held every
// decoded object at once before the consumer saw the first.
const maxBatch = 1024

// keptBatch is the largest capacity of batch slice a watch keeps for the
// next response: a batch ends at the first revision boundary after
// maxBatch events, so it usually holds a little more (1100 for
// transactions of 100), and only one revision of thousands of events (a
// delete of a whole range) makes it larger than this.
const keptBatch = 4 * maxBatch

// emitEvents decodes evs, the events of one etcd response, and hands them
// to emit in batches of about maxBatch events, each ending at a revision
// boundary, so that the events of one transaction (one revision) stay in
// one batch as driver.WatchOptions.Emit requires. w.batch is reused, unless
// one revision made it larger than keptBatch: that one is dropped after
// use instead of being held for the watch's lifetime.
func (w *watch[T]) emitEvents(evs []*clientv3.Event, emit func([]driver.Event[T]) error) error {
	for len(evs) > 0 {
		n := min(len(evs), maxBatch)
		for n < len(evs) && evs[n].Kv.ModRevision == evs[n-1].Kv.ModRevision {
			n++
		}
		w.batch = slices.Grow(w.batch[:0], n)[:n]
		for i, e := range evs[:n] {
			w.event(&w.batch[i], e)
		}
		w.p.residue.RewriteBatch(w.batch)
		if err := emit(w.batch); err != nil {
			return err
		}
		w.last = w.batch[n-1].RV
		clear(w.batch) // drop the objects: the consumer has them
		if cap(w.batch) > keptBatch {
			w.batch = nil
		}
		evs = evs[n:]
	}
	return nil
}

// event sets *ev to the event of e.
func (w *watch[T]) event(ev *driver.Event[T], e *clientv3.Event) {
	p := w.p
	switch e.Type {
	case clientv3.EventTypePut:
		typ := driver.Modified
		if e.IsCreate() {
			typ = driver.Added
		}
		p.decodeInto(ev, typ, e.Kv)
	default: // clientv3.EventTypeDelete
		*ev = driver.Event[T]{Type: driver.Deleted, Key: p.key(e.Kv.Key), RV: core.ResourceVersion(e.Kv.ModRevision)}
		if e.PrevKv == nil {
			// Compacted away, or the watch was resumed on a member
			// without it: the informer fills in its cached object.
			return
		}
		obj, err := codec.Decode(p.codec, e.PrevKv.Value)
		if err != nil {
			// The delete itself is certain; only the last value was
			// unreadable (and was reported when it was written).
			p.log.DebugContext(w.ctx, "etcd: previous value of deleted key does not decode", "prefix", p.prefix, "key", ev.Key, "revision", ev.RV, "error", err)
			return
		}
		ev.Object, ev.HasObject = obj, true
	}
}
