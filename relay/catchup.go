package relay

import (
	"fmt"
	"slices"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// catchUp is a watch past a gap: messages it did not read were removed by
// later messages of the same subjects (a hole). Reading on, it keeps each
// key's last change, and it knows where every hole's superseding messages
// end: they were stored before the hole was seen, so at or before the
// stream's last sequence read after it (the hole's head). Once the watch
// has read up to a hole's head, the hole is mended.
//
// The target is fixed per hole: a hole seen later does not move the point
// at which an earlier one is mended. So under writes that never pause —
// a busy key's message is removed before nearly every read, and a hole
// is seen in nearly every group — the watch still confirms versions as
// it goes: at the end of every batch it delivers the changes it kept (the
// informer keeps applying) and a bookmark at the last version complete
// before the oldest hole not yet mended, which trails the watch by about
// how far it is behind the stream, never by how long the writes last.
// The changes kept may be newer than that bookmark (a key's later change
// read past it): a cache may run ahead of its version, never behind it,
// and each key's changes still arrive in order. The catch-up ends at the
// first commit point with every hole mended.
type catchUp[T any] struct {
	events map[string]driver.Event[T] // key -> its last change read and not delivered
	order  []string                   // keys in the order first seen
	seenV  uint64                     // version of the last group of changes read (or delivered)

	holes []hole // not mended yet, oldest first

	// The stream read so far is complete (bar the holes) up to readV; the
	// last message read is at readSeq; readChange is the version of the
	// last group of changes up to it.
	readV, readSeq, readChange uint64

	inGroup bool   // reading a group's messages
	gV      uint64 // its version
	gNext   uint64 // the index expected next
	gWhole  bool   // every message of it so far was read

	// For the log.
	from       uint64
	holesSeen  int
	keys       int
	deliveries int
}

// hole is a gap the watch saw: the messages it missed lie after the read
// position (before, beforeSeq, beforeChange: as the catchUp's read*), and
// the ones that removed them at or before head (0: not read yet).
type hole struct {
	before, beforeSeq, beforeChange uint64
	head                            uint64
}

func (c *catchUp[T]) put(ev driver.Event[T]) {
	if _, ok := c.events[ev.Key]; !ok {
		c.order = append(c.order, ev.Key)
	}
	c.events[ev.Key] = ev
}

// gap starts a catch-up, or notes one more hole in it; the pending group
// (incomplete) is kept in it. The hole lies after the last message read.
func (t *translator[T]) gap() {
	if t.cu == nil {
		t.cu = &catchUp[T]{events: map[string]driver.Event[T]{}, seenV: t.lastChange,
			readV: t.lastV, readSeq: t.lastSeq, readChange: t.lastChange, from: t.lastV}
		if len(t.pending) > 0 {
			for _, ev := range t.pending {
				t.cu.put(ev)
			}
			t.cu.seenV = max(t.cu.seenV, t.pendingV)
			t.drop()
		}
		t.d.log.Debug("relay downstream fell behind busy keys (a later change removed a message it had not read); catching up instead of relisting",
			"stream", t.d.source, "from", t.lastV)
	}
	c := t.cu
	c.holes = append(c.holes, hole{before: c.readV, beforeSeq: c.readSeq, beforeChange: c.readChange})
	c.holesSeen++
}

// catchKey reads one key message during a catch-up.
func (t *translator[T]) catchKey(e entry) {
	c := t.cu
	if c.inGroup && e.version != c.gV {
		t.gap() // the group before did not end
		c.inGroup = false
	}
	if !c.inGroup {
		if e.prev > c.seenV {
			t.gap() // a group went missing altogether
		}
		// A group whose start the watch did not read is not whole.
		c.inGroup, c.gV, c.gNext, c.gWhole = true, e.version, 0, e.version != c.seenV
	}
	if e.index != c.gNext {
		c.gWhole = false
	}
	c.gNext = e.index + 1
	c.put(t.d.event(driver.Added, e, core.ResourceVersion(e.version)))
	c.seenV = max(c.seenV, e.version)
	if e.index+1 < e.count {
		return
	}
	c.inGroup = false
	if !c.gWhole {
		t.gap()
	}
}

// catch reads one message during a catch-up, and ends the catch-up at a
// commit point with every hole mended.
func (t *translator[T]) catch(e entry) {
	c := t.cu
	switch e.kind {
	case kindProgress:
		if c.inGroup {
			t.gap() // the group before did not end
			c.inGroup = false
		}
		if e.prev > c.seenV {
			t.gap() // a group went missing altogether
		}
	case kindAbort:
		// What was read of the aborted group and not delivered yet is
		// dropped; the next term republishes its keys (relay.term), which
		// also mends any of them delivered already.
		for key, ev := range c.events {
			if uint64(ev.RV) == e.version {
				delete(c.events, key)
				c.order = slices.DeleteFunc(c.order, func(k string) bool { return k == key })
			}
		}
		if c.inGroup && c.gV == e.version {
			c.inGroup = false
		}
	case kindKey:
		if e.version <= t.lastV {
			return // already delivered
		}
		t.catchKey(e)
	}
	c.readV = max(c.readV, e.committed())
	c.readSeq = e.seq
	c.readChange = max(c.readChange, e.lastChange())
	c.mend(e.seq)
	if len(c.holes) == 0 && !c.inGroup && e.commitPoint() {
		t.confirm(true)
	}
}

// mend forgets the holes whose superseding messages are all read once
// the watch has read up to seq.
func (c *catchUp[T]) mend(seq uint64) {
	n := 0
	for n < len(c.holes) && c.holes[n].head != 0 && c.holes[n].head <= seq {
		n++
	}
	c.holes = c.holes[n:]
}

// settle runs at the end of a batch read during a catch-up: it reads the
// stream's head for the holes seen in it (one read for all of them) and
// confirms what it can.
func (t *translator[T]) settle() error {
	c := t.cu
	if len(c.holes) > 0 && c.holes[len(c.holes)-1].head == 0 {
		last, ok, err := t.d.last(t.ctx)
		if err != nil {
			return fmt.Errorf("%s: read the stream's last sequence to catch up over superseded messages: %w", t.d.source, err)
		}
		head := c.readSeq
		if ok {
			head = max(head, last.seq)
		}
		for i := len(c.holes) - 1; i >= 0 && c.holes[i].head == 0; i-- {
			c.holes[i].head = head
		}
		c.mend(c.readSeq)
	}
	t.confirm(len(c.holes) == 0 && !c.inGroup)
	return nil
}

// confirm delivers the changes kept, right after the last version
// delivered (as a relist's group is delivered), then a bookmark at the
// last version complete before the oldest hole not mended, if that is
// past the last one delivered; end also ends the catch-up there (no hole
// left, outside a group).
func (t *translator[T]) confirm(end bool) {
	c := t.cu
	v, seq, change := c.readV, c.readSeq, c.readChange
	if len(c.holes) > 0 {
		h := c.holes[0]
		v, seq, change = h.before, h.beforeSeq, h.beforeChange
	}
	if v > t.lastV {
		rv := core.ResourceVersion(t.lastV + 1)
		for _, key := range c.order {
			t.deliverAt(c.events[key], rv)
		}
		c.keys += len(c.order)
		c.deliveries++
		clear(c.events)
		c.order = c.order[:0]
		t.out = append(t.out, driver.Event[T]{Type: driver.Bookmark, RV: core.ResourceVersion(v)})
		t.lastV, t.lastSeq, t.lastChange = v, seq, max(t.lastChange, change)
	}
	if !end || len(c.events) > 0 {
		return
	}
	t.lastChange = max(t.lastChange, c.seenV)
	t.d.caughtUp(c.from, t.lastV, c.holesSeen, c.keys, c.deliveries)
	t.cu = nil
}

// catchUpSummary is how often a Downstream logs at Info how many
// catch-ups it ran; each one is logged at Debug.
const catchUpSummary = time.Minute

// caughtUp logs one catch-up at Debug and, at most every catchUpSummary,
// a summary of those since the last one at Info.
func (d *Downstream[T]) caughtUp(from, to uint64, holes, keys, deliveries int) {
	d.met.CaughtUp(holes, keys)
	d.log.Debug("relay downstream caught up over superseded messages instead of relisting",
		"stream", d.source, "from", from, "to", to, "holes", holes, "keys", keys, "deliveries", deliveries)
	d.mu.Lock()
	s := &d.catchUps
	s.n++
	s.holes += holes
	s.keys += keys
	now := time.Now()
	if s.since.IsZero() {
		s.since = now
	}
	if now.Sub(s.since) < catchUpSummary {
		d.mu.Unlock()
		return
	}
	sum := *s
	*s = catchUpStats{since: now}
	d.mu.Unlock()
	d.log.Info("relay downstream caught up over superseded messages (it fell behind busy keys; no relist)",
		"stream", d.source, "catchUps", sum.n, "holes", sum.holes, "keys", sum.keys, "over", now.Sub(sum.since).Round(time.Second))
}

// catchUpStats counts catch-ups between two summaries.
type catchUpStats struct {
	n, holes, keys int
	since          time.Time
}
