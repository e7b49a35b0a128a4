package pginformer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// Watch delivers the table's changes after from through opts.Emit, one
// batch per transaction that touched the table, and a Bookmark when the
// stream moved on without touching it (or a progress request was
// answered). Emit's return acknowledges the batch: only then may the server
// discard its WAL. from must be a version this Source keeps the table's
// changes since: one returned by List, or one a watch delivered within the
// last Options.History changes; anything older is driver.ErrExpired. A
// Bookmark never passes the WAL position the Source's catalog check last
// vouched for (see "Schema changes" in the package doc), and a change of
// the table's schema ends the watch with a *SchemaChangeError after the
// transactions before it.
func (t *Table[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	s, fan := t.src, t.src.fan
	if ctx.Err() != nil {
		return driver.Stopped(ctx)
	}
	w, err := fan.register(&t.st.feed, from)
	if err != nil {
		return stopped(ctx, err)
	}
	defer fan.unregister(w)
	// A filter evaluates whole rows: its table keeps the values.
	t.st.watchFills(opts.Fills && t.filter == nil)
	if err := s.ensureStreaming(ctx); err != nil {
		return stopped(ctx, err)
	}
	if err := fan.begin(w); err != nil {
		return stopped(ctx, err)
	}
	var buf []driver.Event[T]
	var todo []*batch
	var asked ticket // the progress request to answer; zero: none
	for {
		if ctx.Err() != nil {
			return driver.Stopped(ctx)
		}
		next, err := fan.next(w, asked, todo[:0])
		if err != nil {
			return stopped(ctx, err)
		}
		switch {
		case len(next.batches) > 0:
			todo = next.batches
			err = t.deliver(w, todo, opts.Emit, opts.Fills, &buf)
			clear(todo)
		case next.wait == nil:
			if next.answered {
				asked = ticket{}
			}
			buf = append(buf[:0], driver.Event[T]{Type: driver.Bookmark, RV: next.bookmark})
			if err = opts.Emit(buf); err == nil {
				fan.ack(w, next.bookmark)
			}
		default:
			select {
			case <-next.wait:
			case <-ctx.Done():
				return driver.Stopped(ctx)
			case <-opts.Progress:
				asked = fan.requestProgress()
			}
		}
		if err != nil {
			return stopped(ctx, err)
		}
	}
}

// deliver decodes batches (in version order, after w's position) and hands
// every transaction ready to one Emit (up to emitMax events): a consumer
// that fell behind catches up without paying the hand-over once per
// transaction. What precedes a TRUNCATE or a transaction that does not
// decode is delivered before the watch ends on it. buf is reused.
func (t *Table[T]) deliver(w *watcher, batches []*batch, emit func([]driver.Event[T]) error, fills bool, buf *[]driver.Event[T]) error {
	fan, st := t.src.fan, t.st
	out := (*buf)[:0]
	defer func() { *buf = out }()
	top := w.pos
	flush := func() error {
		if len(out) == 0 {
			return nil
		}
		if err := emit(out); err != nil {
			return err
		}
		fan.ack(w, top)
		return nil
	}
	for _, b := range batches {
		evs, failed := t.decodeUpTo(b)
		if b.truncated {
			if err := flush(); err != nil {
				return err
			}
			return fmt.Errorf("%s: truncated by the transaction at %s, so its keys are gone; list again: %w", st.sourceName(), lsn(b.rv), driver.ErrExpired)
		}
		if b.relist != "" {
			if err := flush(); err != nil {
				return err
			}
			return fmt.Errorf("%s: at %s: %s; list again: %w", st.sourceName(), lsn(b.rv), b.relist, driver.ErrExpired)
		}
		if failed > 0 && !t.opts.SkipUndecodable {
			if err := flush(); err != nil {
				return err
			}
			var bad undecodable
			for _, ev := range evs {
				if ev.Err != nil {
					bad.add(ev.Err)
				}
			}
			return bad.err(fmt.Sprintf("%s: of the changes of the transaction at %s", st.sourceName(), lsn(b.rv)))
		}
		if !fills {
			if err := needsFill(evs); err != nil {
				if err := flush(); err != nil {
					return err
				}
				return fmt.Errorf("%s: at %s: %w", st.sourceName(), lsn(b.rv), err)
			}
		}
		out = append(out, evs...)
		top = b.rv
		if len(out) >= emitMax {
			break
		}
	}
	if err := emit(out); err != nil {
		return err
	}
	fan.ack(w, top)
	return nil
}

// ProgressInterval implements driver.ProgressIntervaler: an open watch emits
// a Bookmark whenever the stream moves on without touching the table, and
// answers a progress request within one round trip to the server (a
// status update asking for a keepalive). The stream hears from a live
// server at least once per status interval (it asks for a keepalive after
// one quiet interval) and ends its session after the Source's silence
// limit (see silenceLimit: 3 status intervals, at least half the server's
// wal_sender_timeout plus two). The interval is that limit divided by
// driver.StuckIntervals, so that the reflector's stuck-watch detection and
// the stream's half-open detection agree, and neither takes a walsender
// busy with a large transaction for a dead one.
func (t *Table[T]) ProgressInterval() time.Duration {
	return t.src.silence / driver.StuckIntervals
}

var _ driver.ProgressIntervaler = (*Table[int])(nil)

// A watch hands every transaction it has ready to one Emit, up to
// emitMaxBatches transactions or, past emitMax events, the transaction
// that crossed it.
const (
	emitMaxBatches = 256
	emitMax        = 4096
)

// stopped is what Watch returns for err: driver.Stopped once ctx is done,
// whatever failed meanwhile.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return driver.Stopped(ctx)
	}
	return err
}

// decodeUpTo decodes, in version order, every batch up to b that is not
// decoded yet (batches a watch from a later version skipped still move the
// known keys and values), and returns b's events and how many failed.
func (t *Table[T]) decodeUpTo(b *batch) ([]driver.Event[T], int) {
	fan, st := t.src.fan, t.st
	st.knownMu.Lock()
	defer st.knownMu.Unlock()
	if !b.decoded {
		for _, d := range fan.undecoded(&st.feed, b.rv) {
			if !d.decoded {
				t.decode(d)
			}
			fan.decodedTo(&st.feed, d.rv)
		}
		if !b.decoded { // not in the table's batches any more (expired): decode it alone
			t.decode(b)
		}
	}
	return b.events.([]driver.Event[T]), b.failed
}

// decode turns one transaction into events, in order, keeping the table's
// known keys and TOAST values current. Called with knownMu held.
func (t *Table[T]) decode(b *batch) {
	st := t.st
	t.changes.Add(int64(len(b.changes)))
	d := txDecoder[T]{
		t:   t,
		b:   b,
		src: st.sourceName(),
		out: make([]driver.Event[T], 0, len(b.changes)), // one per change, mostly
	}
	var lastRel *wal.Relation
	var lastPlan *rowPlan
	var lastErr error
	for _, c := range b.changes {
		if c.Kind == wal.Truncate {
			// The rows are gone; the watch ends at this transaction and
			// the consumer lists again (see batch.truncated). Rows the
			// transaction writes after it are remembered below.
			st.resetKnown()
			b.truncated = true
			continue
		}
		if c.Rel == nil {
			d.fail(driver.Modified, "", errors.New("change before its Relation message"))
			continue
		}
		if c.Rel != lastRel { // a transaction's rows mostly share a layout
			lastRel = c.Rel
			lastPlan, lastErr = t.m.plan(c.Rel)
		}
		p, err := lastPlan, lastErr
		if err != nil {
			d.fail(driver.Modified, "", err)
			continue
		}
		var oldKey string
		if c.Old != nil {
			if oldKey, err = encodeKey(p, c.Old); err != nil {
				d.fail(driver.Deleted, "", err)
				continue
			}
		}
		switch c.Kind {
		case wal.Delete:
			d.out = append(d.out, d.deleted(p, oldKey, c))
			st.forget(oldKey)
		case wal.Insert, wal.Update:
			d.upsert(p, oldKey, c)
		}
	}
	out, failed := d.out, d.failed
	if len(out) == 0 {
		// A transaction that touched the table without a visible change
		// (e.g. TRUNCATE of an empty table) still moves the version.
		out = append(out, driver.Event[T]{Type: driver.Bookmark, RV: b.rv})
	}
	if failed > 0 && t.opts.SkipUndecodable {
		t.skipped.Add(int64(failed))
	}
	t.filter.rewrite(out)
	b.events, b.failed, b.changes, b.decoded = out, failed, nil, true
}

// txDecoder is one transaction's decoding under way: the events decode
// has made so far and how many failed. It exists so that the steps of a
// change (a failure, a delete's last object, an insert or update) can be
// methods of their own while appending to the one event slice in order.
type txDecoder[T any] struct {
	t      *Table[T]
	b      *batch
	src    string // the source's name, for DecodeErrors
	out    []driver.Event[T]
	failed int
}

// fail records a change that does not decode as an event carrying a
// *driver.DecodeError, keeping its type and key (when the key decoded).
func (d *txDecoder[T]) fail(typ driver.EventType, key string, err error) {
	d.failed++
	d.out = append(d.out, driver.Event[T]{Type: typ, Key: key, RV: d.b.rv, Err: &driver.DecodeError{Source: d.src, Key: key, RV: d.b.rv, Err: err}})
}

// deleted is a delete's event, with the last object when the old row came
// whole (FULL).
func (d *txDecoder[T]) deleted(p *rowPlan, key string, c wal.Change) driver.Event[T] {
	t, st := d.t, d.t.st
	ev := driver.Event[T]{Type: driver.Deleted, Key: key, RV: d.b.rv}
	if c.OldKind == 'O' {
		if err := t.m.decode(p, st.fillToast(p, key, c.Old, nil), &ev.Object); err == nil {
			ev.HasObject = true
		} else {
			ev.Object = *new(T)
		}
	}
	return ev
}

// upsert decodes an insert or an update (oldKey is the old row's key, when
// the change carries one): a primary key change is a delete of the old key
// and an add of the new, and unchanged TOASTed columns come from the known
// values, the consumer's cache (Event.Fill), or a List (batch.relist).
func (d *txDecoder[T]) upsert(p *rowPlan, oldKey string, c wal.Change) {
	t, st, b := d.t, d.t.st, d.b
	typ := driver.Added
	if c.Kind == wal.Update {
		typ = driver.Modified
	}
	key, err := encodeKey(p, c.New)
	if err != nil {
		d.fail(typ, "", err)
		return
	}
	prevKey := key
	if c.Old != nil && oldKey != key {
		// Primary key changed: the old key is gone.
		prevKey = oldKey
		d.out = append(d.out, d.deleted(p, oldKey, c))
		typ = driver.Added
	}
	vals := st.fillToast(p, prevKey, c.New, c.Old)
	if prevKey != key {
		st.forget(prevKey)
	}
	var missing []int // unchanged TOASTed columns not known here
	for i, v := range vals {
		if v.Kind == 'u' && p.used[i] {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 && prevKey != key && t.filter == nil {
		// The consumer's cache can fill in only from the same
		// key's object: the new key's whole row needs a List.
		b.relist = fmt.Sprintf("key %q moved to %q beside the unchanged TOASTed column %q, whose value this table does not keep", prevKey, key, p.rel.Names[missing[0]])
		return
	}
	if len(missing) > 0 && (typ != driver.Modified || t.filter != nil) {
		// Only the consumer's cached object of the same key can
		// fill them in, and a filter must see the whole row.
		d.fail(typ, key, fmt.Errorf("unchanged TOASTed column %q has no known previous value", p.rel.Names[missing[0]]))
		return
	}
	st.remember(p, key, vals)
	// Decoded in place: the decoder takes the object's address,
	// which would put an event of its own on the heap per row.
	d.out = append(d.out, driver.Event[T]{Type: typ, Key: key, HasObject: true, RV: b.rv})
	ev := &d.out[len(d.out)-1]
	if err := t.m.decode(p, vals, &ev.Object); err != nil {
		d.out = d.out[:len(d.out)-1]
		d.fail(typ, key, err)
		return
	}
	if len(missing) > 0 {
		ev.Fill = t.cacheFill(p, missing, ev.Object)
	}
}
