package pginformer

import (
	"fmt"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/dbinformer/dbinformer/core/driver"
	"math"
	"sort"

	"github.com/dbinformer/dbinformer/core"
)

// The fan-out's verbs for a table's setup (List, Restore, checkpoint
// gating), and a feed's own bookkeeping. See fanout.go.

// The tables' side: setup.

// activate starts fd over at rv (listed there, nothing streamed yet) if it
// is not active, and reports whether it did: the table's state must then
// be built afresh.
func (f *fanout) activate(fd *feed, rv core.ResourceVersion) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fd.active && fd.halt == nil {
		return false
	}
	fd.reset(rv)
	f.notifyLocked()
	return true
}

// activateAtStream is activate at the stream's position: from here on the
// stream keeps the table's transactions.
func (f *fanout) activateAtStream(fd *feed) bool {
	f.mu.Lock()
	rv := f.pos
	f.mu.Unlock()
	return f.activate(fd, rv)
}

// listedAt records that a helper snapshot at cp read a table that was
// activated at the stream's position for it: what the stream kept up to
// cp is in the rows read. (A table that was active keeps its state, which
// the stream moves in order, and its history, from which earlier Lists'
// watches go on.)
func (f *fanout) listedAt(fd *feed, cp core.ResourceVersion) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !fd.active {
		return
	}
	drop := fd.firstAfter(cp)
	clear(fd.batches[:drop])
	fd.batches = fd.batches[drop:]
	fd.floor, fd.applied, fd.decoded, fd.covered, fd.ackedChanges = cp, max(fd.applied, cp), cp, cp, 0
}

// Schema changes (schema.go, guard.go).

// relation checks a Relation message met in the transaction whose commit
// starts at at against fd's proven shape, and holds fd's watches back
// from that transaction on if it differs, waking the guard to decide. A
// change that breaks the mapping needs no decision: it is returned, and
// ends the watches.
func (f *fanout) relation(fd *feed, rel *wal.Relation, at rv) *SchemaChangeError {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fd.shape == nil || !fd.active || at < fd.covered {
		// A transaction the table's List or checkpoint already covers
		// (a resumed slot replays from its confirmed position): its
		// layout may precede the schema NewTable proved.
		return nil
	}
	ch := fd.shape.diffRelation(rel)
	if ch == nil {
		return nil
	}
	if fd.halt != nil && fd.halt.err != nil {
		// Decided already (the guard saw it first): hold from here too.
		f.holdLocked(fd, at, nil, ch)
		return nil
	}
	var e *SchemaChangeError
	var err error
	if !ch.proof {
		e = &SchemaChangeError{Table: fd.table, Column: ch.column, Change: ch.change, RV: at, Action: SchemaFail, Fix: ch.fix}
		err = e
		fd.note(e)
	}
	f.holdLocked(fd, at, err, ch)
	f.wakeGuardLocked()
	return e
}

// note records a schema change met.
func (fd *feed) note(e *SchemaChangeError) {
	fd.lastChange.Store(e)
	fd.changes.Add(1)
}

// holdLocked holds fd's watches back at at (the earliest of the holds),
// ending them with err once err is known.
func (f *fanout) holdLocked(fd *feed, at rv, err error, ch *shapeChange) {
	switch {
	case fd.halt == nil:
		fd.halt = &halt{at: at, err: err, change: ch}
	default:
		fd.halt.at = min(fd.halt.at, at)
		if fd.halt.err == nil {
			fd.halt.err = err
		}
	}
	f.notifyLocked()
}

// decide ends fd's watches with err, after the batches they hold.
func (f *fanout) decide(fd *feed, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fd.active {
		f.holdLocked(fd, math.MaxUint64, err, nil)
	}
}

// schemaState returns fd's proven shape, whether fd is active, and what
// the stream met that waits for the guard's decision (nil: nothing).
func (f *fanout) schemaState(fd *feed) (*tableShape, bool, *halt) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var h *halt
	if fd.halt != nil {
		c := *fd.halt
		h = &c
	}
	return fd.shape, fd.active, h
}

// setShape records the shape proven again at a schema change.
func (f *fanout) setShape(fd *feed, sh *tableShape) {
	f.mu.Lock()
	fd.shape = sh
	f.mu.Unlock()
}

// verifyAskedSoFar is the newest catalog check request.
func (f *fanout) verifyAskedSoFar() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.verifyAsked
}

// vouch records a check that found every table as proven, and so vouches
// for the position a previous check read before it looked (at), made
// after request seq.
func (f *fanout) vouch(at rv, seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verified = max(f.verified, at)
	f.verifyDone = max(f.verifyDone, seq)
	f.notifyLocked()
}

// isActive reports whether fd was listed or restored in the slot's
// lifetime.
func (f *fanout) isActive(fd *feed) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fd.active
}

// restore activates fd at rv, a checkpoint's version, if the stream has
// not passed it.
func (f *fanout) restore(fd *feed, rv core.ResourceVersion) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lastTxn > rv {
		return fmt.Errorf("postgres %s: replication slot %q is at %s, past the checkpoint at %s: the changes between are gone (checkpoints gate the slot's acknowledgements only when the informer has InformerOptions.Checkpoint): %w", f.where, f.slot, lsn(f.lastTxn), lsn(rv), driver.ErrExpired)
	}
	// The stream starts at the slot's confirmed position, at or before rv:
	// its transactions up to rv are covered by the checkpoint.
	fd.reset(rv)
	fd.durable = max(fd.durable, rv)
	f.notifyLocked()
	return nil
}

// gate and acknowledgeDurable implement driver.DurableAcknowledger for fd.
func (f *fanout) gate(fd *feed, gated bool) {
	f.mu.Lock()
	fd.gated = gated
	f.mu.Unlock()
}

func (f *fanout) acknowledgeDurable(fd *feed, rv core.ResourceVersion) {
	f.mu.Lock()
	fd.durable = max(fd.durable, rv)
	f.mu.Unlock()
}

// awaitingRestore reports whether a checkpointing table has neither
// restored nor listed yet, and returns the change signal to wait on.
func (f *fanout) awaitingRestore() (bool, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fd := range f.feeds {
		if fd.gated && !fd.active {
			return true, f.changed
		}
	}
	return false, f.changed
}

// A feed's own bookkeeping, with the fanout's mu held.

// expire forgets the stream: the table must list again.
func (fd *feed) expire() {
	fd.active = false
	fd.floor = math.MaxUint64
	fd.batches = nil
	fd.ackedChanges = 0
}

// reset starts the table over at rv: listed there, nothing streamed yet.
func (fd *feed) reset(rv core.ResourceVersion) {
	fd.active, fd.floor, fd.applied, fd.decoded, fd.covered, fd.batches, fd.ackedChanges = true, rv, rv, rv, rv, nil, 0
	fd.halt = nil
}

// firstAfter is the index of the first batch above rv (batches are in
// version order).
func (fd *feed) firstAfter(rv core.ResourceVersion) int {
	return sort.Search(len(fd.batches), func(i int) bool { return fd.batches[i].rv > rv })
}

// advance records that the consumers applied everything up to rv, and
// drops acknowledged, decoded batches beyond the history kept for watches
// that start from an older version, raising floor past what it drops.
func (fd *feed) advance(rv core.ResourceVersion, history int) {
	if rv <= fd.applied {
		return
	}
	i, j := fd.firstAfter(fd.applied), fd.firstAfter(rv)
	for k := i; k < j; k++ {
		fd.ackedChanges += fd.batches[k].size
	}
	fd.applied = rv
	drop := 0
	for drop < j && fd.ackedChanges > history && fd.batches[drop].rv <= fd.decoded {
		fd.ackedChanges -= fd.batches[drop].size
		fd.floor = max(fd.floor, fd.batches[drop].rv)
		fd.batches[drop] = nil // release its rows
		drop++
	}
	// The array's dropped front is freed when append next reallocates.
	fd.batches = fd.batches[drop:]
}

// pending is the oldest batch no consumer has acknowledged.
func (fd *feed) pending() *batch {
	if i := fd.firstAfter(fd.applied); i < len(fd.batches) {
		return fd.batches[i]
	}
	return nil
}
