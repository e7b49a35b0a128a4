package relay

import (
	"context"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// translator turns the stream's messages into source-version batches:
// the changes of one source version are held until the group is complete
// (its count of messages has arrived) and dropped if the relay aborted
// the group.
//
// A group that lost a message (a later change of its key removed it
// before this watch read it) or a group missing altogether starts a
// catch-up (see catchUp) instead of expiry: the watch goes on reading,
// keeping each key's last change, and confirms each version once it is
// past every message that superseded one it missed before that version.
// A relist would read the same messages (the stream holds one per key)
// and more: all of the stream, and the informer's whole cache compared
// with it.
type translator[T any] struct {
	ctx  context.Context // the watch's
	d    *Downstream[T]
	emit func([]driver.Event[T]) error

	lastV      uint64 // last version emitted
	lastSeq    uint64 // stream sequence of the message that completed lastV
	lastChange uint64 // version of the last group of changes emitted (or from)

	takenV, takenSeq, takenChange uint64 // as of the last batch the consumer took

	pending    []driver.Event[T]
	pendingV   uint64
	pendingSeq uint64
	// pendingRelist: the pending group is a relist's.
	pendingRelist bool
	cu            *catchUp[T] // nil unless catching up
	out           []driver.Event[T]
	// ahead: the changes of out delivered at a version before their own
	// (a relist's group, a catch-up's), noted while an audit runs.
	ahead []aheadEvent[T]
}

// deliverAt sets the version ev is delivered at, before its own if it
// is a relist's or a catch-up's change, and appends it to out.
func (t *translator[T]) deliverAt(ev driver.Event[T], rv core.ResourceVersion) {
	if ev.RV > rv && t.d.audit.running() {
		t.ahead = append(t.ahead, aheadEvent[T]{v: uint64(ev.RV), ev: ev})
		t.ahead[len(t.ahead)-1].ev.RV = rv
	}
	ev.RV = rv
	t.out = append(t.out, ev)
}

func (t *translator[T]) flush() {
	if t.pendingRelist && t.pendingV > t.lastV+1 {
		// A relist's changes happened at versions up to the list's, not
		// all at it: they go out right after the last version delivered,
		// then a bookmark at the list's version, so that nothing waiting
		// for a version before the list's returns before they are applied.
		for _, ev := range t.pending {
			t.deliverAt(ev, core.ResourceVersion(t.lastV+1))
		}
		t.out = append(t.out, driver.Event[T]{Type: driver.Bookmark, RV: core.ResourceVersion(t.pendingV)})
		clear(t.pending)
		t.pending = t.pending[:0]
		t.lastV, t.lastSeq, t.lastChange = t.pendingV, t.pendingSeq, t.pendingV
		return
	}
	t.out = append(t.out, t.pending...)
	clear(t.pending)
	t.pending = t.pending[:0]
	t.lastV, t.lastSeq, t.lastChange = t.pendingV, t.pendingSeq, t.pendingV
}

func (t *translator[T]) drop() {
	clear(t.pending)
	t.pending = t.pending[:0]
}

func (t *translator[T]) take(batch []driver.Event[entry]) error {
	t.out = t.out[:0]
	for _, ev := range batch {
		if ev.Type == driver.Bookmark {
			// Caught up with the stream: only a completed version can be
			// confirmed.
			if len(t.pending) == 0 && t.cu == nil && t.lastV > 0 {
				t.out = append(t.out, driver.Event[T]{Type: driver.Bookmark, RV: core.ResourceVersion(t.lastV)})
			}
			if t.cu != nil {
				// Read up to the head: every hole seen is mended.
				for i := range t.cu.holes {
					if t.cu.holes[i].head == 0 {
						t.cu.holes[i].head = uint64(ev.RV)
					}
				}
				t.cu.mend(uint64(ev.RV))
			}
			continue
		}
		if ev.Err != nil {
			t.out = append(t.out, driver.Event[T]{Type: driver.Modified, Key: ev.Key, RV: core.ResourceVersion(max(t.lastV, 1)), Err: ev.Err})
			continue
		}
		e := ev.Object
		if t.cu != nil {
			t.catch(e)
			continue
		}
		switch e.kind {
		case kindProgress:
			if len(t.pending) > 0 {
				// The pending group lost its last messages.
				t.gap()
				t.catch(e)
				continue
			}
			if e.version > t.lastV {
				t.lastV = e.version
				t.out = append(t.out, driver.Event[T]{Type: driver.Bookmark, RV: core.ResourceVersion(e.version)})
			}
			t.lastSeq = e.seq
		case kindAbort:
			if len(t.pending) > 0 && t.pendingV == e.version {
				t.drop()
			}
		case kindKey:
			if e.version <= t.lastV {
				continue // already delivered: a resume inside a group
			}
			if (len(t.pending) > 0 && e.version != t.pendingV) || // the pending group lost its last messages
				(len(t.pending) == 0 && e.prev > t.lastChange) || // a group is missing altogether
				e.index != uint64(len(t.pending)) { // this group lost a message
				t.gap()
				t.catch(e)
				continue
			}
			// Added: the informer tells an add from an update by its cache.
			t.pending = append(t.pending, t.d.event(driver.Added, e, core.ResourceVersion(e.version)))
			t.pendingV, t.pendingSeq, t.pendingRelist = e.version, e.seq, e.relist
			if uint64(len(t.pending)) == e.count {
				t.flush()
			}
		}
	}
	if t.cu != nil {
		if err := t.settle(); err != nil {
			return err
		}
	}
	if len(t.out) == 0 {
		if t.cu == nil || t.lastV == 0 {
			return nil
		}
		// A batch that confirmed nothing new during a catch-up, while the
		// stream sends no bookmark (the watch is behind): a bookmark at
		// the last version delivered tells the informer the watch is
		// reading, or it could take a slow catch-up for a stuck watch and
		// reopen it, which from a position whose messages are gone is
		// expiry (a relist).
		t.out = append(t.out, driver.Event[T]{Type: driver.Bookmark, RV: core.ResourceVersion(t.lastV)})
	}
	err := t.emit(t.out)
	clear(t.out)
	if err != nil {
		// Not taken: the next Watch starts before this batch.
		t.lastV, t.lastSeq, t.lastChange = t.takenV, t.takenSeq, t.takenChange
		clear(t.ahead)
		t.ahead = t.ahead[:0]
		return err
	}
	t.takenV, t.takenSeq, t.takenChange = t.lastV, t.lastSeq, t.lastChange
	t.d.audit.delivered(t.takenV, t.ahead)
	clear(t.ahead)
	t.ahead = t.ahead[:0]
	return nil
}
