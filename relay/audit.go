package relay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// AuditList implements driver.AuditLister: the source of a Downstream's
// informer is the stream, so the audit proves that the cache holds what
// the stream holds. It reads the whole stream in order through the
// Downstream's own watch of it (a JetStream consumer with a bounded
// window, blocking while the sink is slow), handing sink every key message
// as it reads it — a put as an Added event, a delete as a Deleted one, a
// key the relay could not encode with its error — until it has read up to
// the stream's head at a point where the relay completed a group, whose
// source version C it returns. It holds no copy of the stream. A key
// rewritten while it reads is emitted again (its last event is its state
// at C, as driver.AuditLister allows), and the messages it did not find
// (removed by a later change of their key before it reached them) were
// removed by messages at or before that head, which it read: List's rule.
//
// A watch that caught up over busy keys, or read a relist's group,
// delivered some keys' changes at a version before their own (see
// Downstream): the cache may hold a key's state newer than C although its
// version is C. So that the audit does not take such a key for a
// divergence (and heal it back to its state at C), AuditList notes what
// the Downstream's watch delivers while it runs, waits (up to auditWait)
// until the watch has delivered everything up to C, and then emits, for
// each key delivered at a version up to C with a state newer than C, the
// state the watch delivered: the stream's at that newer version. It
// assumes one informer per Downstream, as a Watch's resume does.
//
// It parks nothing for watches. A stream purged while it reads ends it
// with an error matching driver.ErrExpired; the next audit reads again.
func (d *Downstream[T]) AuditList(ctx context.Context, atLeast core.ResourceVersion, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	rec := d.audit.start()
	defer d.audit.end(rec)
	v := d.currentView() // the cache holds the owned shards' keys only
	var (
		last entry
		n    int64
	)
	emit := func(ev driver.Event[entry]) error {
		n++
		if ev.Err != nil {
			return sink.Emit(driver.Event[T]{Type: driver.Added, Key: ev.Key, RV: ev.RV, Err: ev.Err})
		}
		if e := ev.Object; e.kind == kindKey && d.auditKeeps(v, e.key) {
			return sink.Emit(d.event(driver.Added, e, core.ResourceVersion(e.version)))
		}
		return nil
	}
	for attempt := 1; ; attempt++ {
		info, err := d.stream.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("%s: audit: read the stream's state: %w", d.source, err)
		}
		st := info.State
		if st.Msgs == 0 {
			break
		}
		if attempt == 1 && sink.Estimate != nil {
			sink.Estimate(int64(st.Msgs))
		}
		last, _, err = d.readOn(ctx, max(st.FirstSeq, 1)-1, entry{}, false, emit)
		if err == nil {
			break
		}
		// The first message was removed (a later change of its key)
		// between the state read and the consumer's start: nothing was
		// read, start again from the new first one.
		if n > 0 || attempt == auditStarts || !errors.Is(err, driver.ErrExpired) || ctx.Err() != nil {
			return 0, fmt.Errorf("%s: audit: %w", d.source, err)
		}
	}
	c := last.version
	if core.ResourceVersion(c) < atLeast {
		return 0, fmt.Errorf("%s: audit read the stream up to source version %d, before the cache's %d (a stream purged or recreated?)", d.source, c, atLeast)
	}
	if err := d.audit.waitDelivered(ctx, c); err != nil {
		return 0, fmt.Errorf("%s: audit: %w", d.source, err)
	}
	for _, a := range d.audit.aheadOf(rec, c) {
		a.ev.RV = core.ResourceVersion(c)
		if err := sink.Emit(a.ev); err != nil {
			return 0, err
		}
	}
	return core.ResourceVersion(c), nil
}

const (
	// auditStarts bounds how often AuditList starts its read again when
	// the stream's first message went before it began.
	auditStarts = 5
	// auditWait bounds how long AuditList waits for the Downstream's
	// watch to deliver the version it read the stream at.
	auditWait = 2 * time.Minute
)

// auditWatch is what a Downstream's watches tell its audits: how far the
// last watch delivered, and, while an audit runs, the changes delivered
// at a version before their own.
type auditWatch[T any] struct {
	deliveredV atomic.Uint64 // the version the last watch has delivered up to
	watched    atomic.Bool   // a watch has run
	runs       atomic.Int32  // AuditLists running

	mu    sync.Mutex
	recs  map[*auditRec[T]]struct{}
	moved chan struct{} // closed when deliveredV moves while an audit waits
}

// auditRec is one AuditList's record of the changes the watch delivered
// ahead of their version: the last per key.
type auditRec[T any] struct {
	ahead map[string]aheadEvent[T]
}

// aheadEvent is a change delivered at ev.RV whose own version is v.
type aheadEvent[T any] struct {
	ev driver.Event[T]
	v  uint64
}

func (w *auditWatch[T]) running() bool { return w.runs.Load() > 0 }

func (w *auditWatch[T]) start() *auditRec[T] {
	rec := &auditRec[T]{ahead: map[string]aheadEvent[T]{}}
	w.mu.Lock()
	if w.recs == nil {
		w.recs = map[*auditRec[T]]struct{}{}
	}
	w.recs[rec] = struct{}{}
	w.runs.Add(1)
	w.mu.Unlock()
	return rec
}

func (w *auditWatch[T]) end(rec *auditRec[T]) {
	w.mu.Lock()
	delete(w.recs, rec)
	w.runs.Add(-1)
	w.mu.Unlock()
}

// started notes a Watch from version from.
func (w *auditWatch[T]) started(from uint64) {
	w.watched.Store(true)
	w.delivered(from, nil)
}

// delivered notes that the watch delivered up to version v, ahead among
// it: cheap unless an audit runs.
func (w *auditWatch[T]) delivered(v uint64, ahead []aheadEvent[T]) {
	w.deliveredV.Store(v)
	if !w.running() {
		return
	}
	w.mu.Lock()
	for rec := range w.recs {
		for _, a := range ahead {
			rec.ahead[a.ev.Key] = a
		}
	}
	if w.moved != nil {
		close(w.moved)
		w.moved = nil
	}
	w.mu.Unlock()
}

// waitDelivered waits until the watch has delivered up to version c, so
// that no change can reach the cache at a version up to c any more
// without the audit knowing. Without a watch (no informer) there is
// nothing to wait for.
func (w *auditWatch[T]) waitDelivered(ctx context.Context, c uint64) error {
	if !w.watched.Load() {
		return nil
	}
	timer := time.NewTimer(auditWait)
	defer timer.Stop()
	for {
		w.mu.Lock()
		if w.moved == nil {
			w.moved = make(chan struct{})
		}
		moved := w.moved
		w.mu.Unlock()
		at := w.deliveredV.Load()
		if at >= c {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return fmt.Errorf("the watch did not deliver source version %d within %v (it is at %d): the audit cannot tell which of its keys the watch delivered ahead of their version", c, auditWait, at)
		}
	}
}

// aheadOf returns the changes rec noted that reached the cache at a
// version up to c with a state after c, in key order.
func (w *auditWatch[T]) aheadOf(rec *auditRec[T], c uint64) []aheadEvent[T] {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []aheadEvent[T]
	for _, key := range slices.Sorted(maps.Keys(rec.ahead)) {
		if a := rec.ahead[key]; uint64(a.ev.RV) <= c && a.v > c {
			out = append(out, a)
		}
	}
	return out
}
