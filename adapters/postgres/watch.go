package pginformer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dbinformer/dbinformer/core"
)

// Watch delivers the table's changes after from through opts.Emit, one
// batch per transaction that touched the table, and a Bookmark when the
// stream moved on without touching it (or a progress request was
// answered). Emit's return acknowledges the batch: only then may the server
// discard its WAL. from must be a version this Source keeps the table's
// changes since: one returned by List, or one a watch delivered within the
// last Options.History changes; anything older is core.ErrExpired.
func (t *Table[T]) Watch(ctx context.Context, from core.ResourceVersion, opts core.WatchOptions[T]) error {
	s, st := t.src, t.st
	if ctx.Err() != nil {
		return core.Stopped(ctx)
	}
	check := func() error { // with s.mu held
		if s.closed {
			return errClosed
		}
		if !st.active || from < st.floor {
			return fmt.Errorf("%s: version %s is older than what the replication slot %q still serves: %w", st.sourceName(), lsn(from), s.slot, core.ErrExpired)
		}
		return nil
	}
	s.mu.Lock()
	err := check()
	var at *core.ResourceVersion // this watch's applied position
	if err == nil {
		at = s.openWatch(st, from)
	}
	s.mu.Unlock()
	if err != nil {
		return stopped(ctx, err)
	}
	defer s.closeWatch(st, at)
	if err := s.ensureStreaming(ctx); err != nil {
		return stopped(ctx, err)
	}
	s.mu.Lock()
	if err := check(); err != nil {
		s.mu.Unlock()
		return stopped(ctx, err)
	}
	if s.streamErr != nil {
		err := s.streamErr
		s.mu.Unlock()
		return stopped(ctx, err)
	}
	gen := s.gen
	s.mu.Unlock()

	// pgoutput says nothing when a table is dropped: look, now and then.
	dropCheck := time.NewTimer(dropCheckEvery)
	defer dropCheck.Stop()
	pos := from
	var buf []core.Event[T]
	var todo []*batch
	var asked uint64 // the progress request to answer; 0: none
	var lastDropCheck time.Time
	// The drop check opens a connection (an authentication round trip):
	// it runs beside the loop, never in it, so that delivery does not wait
	// for it. dropped carries its answer; checking says one is running.
	dropped := make(chan error, 1)
	checking := false
	var checks sync.WaitGroup
	defer checks.Wait()
	checkCtx, stopChecks := context.WithCancel(ctx)
	defer stopChecks()
	startCheck := func() {
		if checking {
			return
		}
		checking, lastDropCheck = true, time.Now()
		checks.Go(func() { dropped <- s.checkDropped(checkCtx, st) })
	}
	for {
		s.mu.Lock()
		if ctx.Err() != nil {
			s.mu.Unlock()
			return core.Stopped(ctx)
		}
		if s.closed {
			s.mu.Unlock()
			return errClosed
		}
		if !st.active || st.floor > pos {
			err := s.streamErr
			active, floor := st.active, st.floor
			s.mu.Unlock()
			switch {
			case active:
				err = fmt.Errorf("%s: version %s fell out of the changes kept in memory (from %s on; Options.History): %w", st.sourceName(), lsn(pos), lsn(floor), core.ErrExpired)
			case err == nil || !errors.Is(err, core.ErrExpired):
				err = fmt.Errorf("%s: the replication slot %q was lost or recreated: %w", st.sourceName(), s.slot, core.ErrExpired)
			}
			return err
		}
		if i := st.firstAfter(pos); i < len(st.batches) {
			// Every transaction ready goes out in one Emit (up to
			// emitMax events): a consumer that fell behind catches up
			// without paying the hand-over once per transaction.
			todo = append(todo[:0], st.batches[i:min(len(st.batches), i+emitMaxBatches)]...)
			s.mu.Unlock()
			buf = buf[:0]
			top := pos
			for _, b := range todo {
				evs, failed := t.decodeUpTo(b)
				if b.truncated {
					// What precedes the TRUNCATE is delivered first.
					if len(buf) > 0 {
						if err := opts.Emit(buf); err != nil {
							return stopped(ctx, err)
						}
						t.ack(at, top)
					}
					return fmt.Errorf("%s: truncated by the transaction at %s, so its keys are gone; list again: %w", st.sourceName(), lsn(b.rv), core.ErrExpired)
				}
				if failed > 0 && !t.opts.SkipUndecodable {
					// What precedes the bad transaction is delivered first.
					if len(buf) > 0 {
						if err := opts.Emit(buf); err != nil {
							return stopped(ctx, err)
						}
						t.ack(at, top)
					}
					var bad undecodable
					for _, ev := range evs {
						if ev.Err != nil {
							bad.add(ev.Err)
						}
					}
					return bad.err(fmt.Sprintf("%s: of the changes of the transaction at %s", st.sourceName(), lsn(b.rv)))
				}
				buf = append(buf, evs...)
				top = b.rv
				if len(buf) >= emitMax {
					break
				}
			}
			clear(todo)
			if err := opts.Emit(buf); err != nil {
				return stopped(ctx, err)
			}
			pos = top
			t.ack(at, pos)
			continue
		}
		// Every change received before the stream ended is emitted (above)
		// before its failure is returned.
		if s.gen != gen {
			err := s.streamErr
			s.mu.Unlock()
			if err == nil {
				err = fmt.Errorf("postgres %s: replication stream of slot %q restarted", s.where(), s.slot)
			}
			return err
		}
		answer := asked != 0 && s.progressDone >= asked
		if s.pos > pos || answer {
			pos = max(pos, s.pos)
			if answer {
				asked = 0
			}
			s.mu.Unlock()
			buf = append(buf[:0], core.Event[T]{Type: core.Bookmark, RV: pos})
			if err := opts.Emit(buf); err != nil {
				return stopped(ctx, err)
			}
			t.ack(at, pos)
			continue
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return core.Stopped(ctx)
		case <-opts.Progress:
			asked = s.requestProgress()
			if time.Since(lastDropCheck) >= dropCheckMin {
				startCheck()
			}
		case <-dropCheck.C:
			dropCheck.Reset(dropCheckEvery)
			startCheck()
		case err := <-dropped:
			checking = false
			if err != nil {
				return stopped(ctx, err)
			}
		}
	}
}

// ProgressInterval implements core.ProgressIntervaler: an open watch emits
// a Bookmark whenever the stream moves on without touching the table, and
// answers a progress request within one round trip to the server (a
// status update asking for a keepalive). The stream hears from a live
// server at least once per status interval (it asks for a keepalive after
// one quiet interval) and ends its session after the Source's silence
// limit (see silenceLimit: 3 status intervals, at least half the server's
// wal_sender_timeout plus two). The interval is that limit divided by
// core.StuckIntervals, so that the reflector's stuck-watch detection and
// the stream's half-open detection agree, and neither takes a walsender
// busy with a large transaction for a dead one.
func (t *Table[T]) ProgressInterval() time.Duration {
	return t.src.silence / core.StuckIntervals
}

var _ core.ProgressIntervaler = (*Table[int])(nil)

// A watch hands every transaction it has ready to one Emit, up to
// emitMaxBatches transactions or, past emitMax events, the transaction
// that crossed it.
const (
	emitMaxBatches = 256
	emitMax        = 4096
)

// dropCheckEvery is how often an idle watch checks that its table still
// exists; it also checks at a progress request, at most every
// dropCheckMin.
const (
	dropCheckEvery = 30 * time.Second
	dropCheckMin   = time.Second
)

// stopped is what Watch returns for err: core.Stopped once ctx is done,
// whatever failed meanwhile.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return core.Stopped(ctx)
	}
	return err
}

// checkDropped returns a permanent error if st's table is gone. A failure
// to look is not an error of the watch: the stream reports a dead server.
func (s *Source) checkDropped(ctx context.Context, st *tableState) error {
	conn, err := s.connect(ctx)
	if err != nil {
		return nil
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_class WHERE oid = $1)", st.oid).Scan(&exists); err != nil || exists {
		return nil
	}
	return core.Permanent(fmt.Errorf("postgres %s: table %s was dropped: its relation (oid %d) is gone; a table created again under the name needs a new Table", s.where(), st.ident.Sanitize(), st.oid))
}

// ack records that the consumer of the watch at applied everything up to
// pos.
func (t *Table[T]) ack(at *core.ResourceVersion, pos core.ResourceVersion) {
	s := t.src
	s.mu.Lock()
	*at = pos
	s.advanceLocked(t.st)
	s.mu.Unlock()
}

// openWatch registers a watch of st from version from and returns its
// position, which the watch moves as its consumer applies (ack). The
// table counts as applied up to the lowest position of its open watches:
// a watch that is ahead (from a later List) must not acknowledge what a
// slower one has yet to apply. Called with s.mu held.
func (s *Source) openWatch(st *tableState, from core.ResourceVersion) *core.ResourceVersion {
	at := new(core.ResourceVersion)
	*at = from
	if s.watching == nil {
		s.watching = map[*tableState][]*core.ResourceVersion{}
	}
	s.watching[st] = append(s.watching[st], at)
	s.advanceLocked(st)
	return at
}

// closeWatch unregisters a watch; the others may now count as applied.
func (s *Source) closeWatch(st *tableState, at *core.ResourceVersion) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.watching[st]
	for i, w := range ws {
		if w == at {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(s.watching, st) // applied stays where the last watch left it
		return
	}
	s.watching[st] = ws
	s.advanceLocked(st)
}

// advanceLocked moves st's applied position to the lowest of its open
// watches'. Called with s.mu held.
func (s *Source) advanceLocked(st *tableState) {
	ws := s.watching[st]
	if len(ws) == 0 || !st.active {
		return
	}
	low := *ws[0]
	for _, w := range ws[1:] {
		low = min(low, *w)
	}
	st.advance(low, s.history)
}

// decodeUpTo decodes, in version order, every batch up to b that is not
// decoded yet (batches a watch from a later version skipped still move the
// known keys and values), and returns b's events and how many failed.
func (t *Table[T]) decodeUpTo(b *batch) ([]core.Event[T], int) {
	s, st := t.src, t.st
	st.knownMu.Lock()
	defer st.knownMu.Unlock()
	if !b.decoded {
		s.mu.Lock()
		var todo []*batch
		for i := st.firstAfter(st.decoded); i < len(st.batches) && st.batches[i].rv <= b.rv; i++ {
			todo = append(todo, st.batches[i])
		}
		s.mu.Unlock()
		for _, d := range todo {
			if !d.decoded {
				t.decode(d)
			}
			s.mu.Lock()
			st.decoded = max(st.decoded, d.rv)
			s.mu.Unlock()
		}
		if !b.decoded { // not in the table's batches any more (expired): decode it alone
			t.decode(b)
		}
	}
	return b.events.([]core.Event[T]), b.failed
}

// decode turns one transaction into events, in order, keeping the table's
// known keys and TOAST values current. Called with knownMu held.
func (t *Table[T]) decode(b *batch) {
	st := t.st
	t.changes.Add(int64(len(b.changes)))
	out := make([]core.Event[T], 0, len(b.changes)) // one per change, mostly
	src := st.sourceName()
	failed := 0
	fail := func(typ core.EventType, key string, err error) {
		failed++
		out = append(out, core.Event[T]{Type: typ, Key: key, RV: b.rv, Err: &core.DecodeError{Source: src, Key: key, RV: b.rv, Err: err}})
	}
	// A delete's last object, when the old row came whole (FULL).
	deleted := func(p *rowPlan, key string, c change) core.Event[T] {
		ev := core.Event[T]{Type: core.Deleted, Key: key, RV: b.rv}
		if c.oldKind == 'O' {
			if err := t.m.decode(p, st.fillToast(p, key, c.old, nil), &ev.Object); err == nil {
				ev.HasObject = true
			} else {
				ev.Object = *new(T)
			}
		}
		return ev
	}
	var lastRel *relation
	var lastPlan *rowPlan
	var lastErr error
	for _, c := range b.changes {
		if c.kind == changeTruncate {
			// The rows are gone; the watch ends at this transaction and
			// the consumer lists again (see batch.truncated). Rows the
			// transaction writes after it are remembered below.
			st.resetKnown()
			b.truncated = true
			continue
		}
		if c.rel == nil {
			fail(core.Modified, "", errors.New("change before its Relation message"))
			continue
		}
		if c.rel != lastRel { // a transaction's rows mostly share a layout
			lastRel = c.rel
			lastPlan, lastErr = t.m.plan(c.rel)
		}
		p, err := lastPlan, lastErr
		if err != nil {
			fail(core.Modified, "", err)
			continue
		}
		var oldKey string
		if c.old != nil {
			if oldKey, err = encodeKey(p, c.old); err != nil {
				fail(core.Deleted, "", err)
				continue
			}
		}
		switch c.kind {
		case changeDelete:
			out = append(out, deleted(p, oldKey, c))
			st.forget(oldKey)
		case changeInsert, changeUpdate:
			typ := core.Added
			if c.kind == changeUpdate {
				typ = core.Modified
			}
			key, err := encodeKey(p, c.new)
			if err != nil {
				fail(typ, "", err)
				continue
			}
			prevKey := key
			if c.old != nil && oldKey != key {
				// Primary key changed: the old key is gone.
				prevKey = oldKey
				out = append(out, deleted(p, oldKey, c))
				typ = core.Added
			}
			vals := st.fillToast(p, prevKey, c.new, c.old)
			if prevKey != key {
				st.forget(prevKey)
			}
			missing := ""
			for i, v := range vals {
				if v.kind == 'u' && p.used[i] {
					missing = p.rel.names[i]
				}
			}
			if missing != "" {
				fail(typ, key, fmt.Errorf("unchanged TOASTed column %q has no known previous value", missing))
				continue
			}
			st.remember(p, key, vals)
			// Decoded in place: the decoder takes the object's address,
			// which would put an event of its own on the heap per row.
			out = append(out, core.Event[T]{Type: typ, Key: key, HasObject: true, RV: b.rv})
			if err := t.m.decode(p, vals, &out[len(out)-1].Object); err != nil {
				out = out[:len(out)-1]
				fail(typ, key, err)
				continue
			}
		}
	}
	if len(out) == 0 {
		// A transaction that touched the table without a visible change
		// (e.g. TRUNCATE of an empty table) still moves the version.
		out = append(out, core.Event[T]{Type: core.Bookmark, RV: b.rv})
	}
	if failed > 0 && t.opts.SkipUndecodable {
		t.skipped.Add(int64(failed))
	}
	t.filter.rewrite(out)
	b.events, b.failed, b.changes, b.decoded = out, failed, nil, true
}
