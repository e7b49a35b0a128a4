package pginformer

import (
	"testing"

	"github.com/dbinformer/dbinformer/adapters/postgres/internal/wal"
	"github.com/dbinformer/dbinformer/core"
)

// TestAppliedIsTheSlowestOpenWatch: with two watches of one table open, the
// table (and so the slot's confirmed position) counts as applied only up to
// the slower one; when the slower one closes, up to the other.
func TestAppliedIsTheSlowestOpenWatch(t *testing.T) {
	fan := newFanout(0, "slot", "server")
	st := newTableState("public", "t")
	fd := &st.feed
	fan.add(fd)
	fan.activate(fd, 100)
	for _, rv := range []core.ResourceVersion{110, 120, 130} {
		fd.batches = append(fd.batches, &batch{rv: rv, commitLSN: rv - 5, size: 1, decoded: true})
	}
	fan.pos = 130

	slow, err := fan.register(fd, 100)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := fan.register(fd, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := fan.ackPosition(); got != 105 {
		t.Fatalf("ack with both watches at 100: %d, want 105 (the first batch's commit start)", got)
	}

	// The fast watch applies everything; the slow one has applied 110.
	fan.ack(fast, 130)
	fan.ack(slow, 110)
	if fd.applied != 110 {
		t.Errorf("applied %d with watches at 110 and 130, want 110", fd.applied)
	}
	if got := fan.ackPosition(); got != 115 {
		t.Errorf("ack %d, want 115: the slow watch has not applied the batch at 120", got)
	}

	// The slow watch goes away: the fast one's position counts.
	fan.unregister(slow)
	if fd.applied != 130 {
		t.Errorf("applied %d after the slow watch closed, want 130", fd.applied)
	}
	if got := fan.ackPosition(); got != 130 {
		t.Errorf("ack %d, want 130", got)
	}

	// With no watch open, applied stays where the last one left it.
	fan.unregister(fast)
	if fd.applied != 130 {
		t.Errorf("applied %d with no watch open, want 130 kept", fd.applied)
	}
}

// TestNextDeliversBeforeFailing: a watch gets every batch received before
// the stream failed, then the failure; and no Bookmark past a batch it
// has not delivered.
func TestNextDeliversBeforeFailing(t *testing.T) {
	fan := newFanout(10, "slot", "server")
	st := newTableState("public", "t")
	fd := &st.feed
	fan.add(fd)
	fan.session(100)
	fan.activate(fd, 100)
	fan.started(100)
	w, err := fan.register(fd, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := fan.begin(w); err != nil {
		t.Fatal(err)
	}
	next, err := fan.next(w, ticket{}, nil)
	if err != nil || next.wait == nil {
		t.Fatalf("nothing streamed: step %+v, %v; want a wait", next, err)
	}
	fan.commit(120, 115, []*tableState{st}, [][]wal.Change{{{Kind: wal.Insert}}})
	select {
	case <-next.wait:
	default:
		t.Fatal("a commit did not signal the waiting watch")
	}
	fan.fail(errHalfOpen, false)
	next, err = fan.next(w, ticket{}, nil)
	if err != nil || len(next.batches) != 1 || next.batches[0].rv != 120 {
		t.Fatalf("after a commit and a failure: step %+v, %v; want the batch at 120 first", next, err)
	}
	fan.ack(w, 120)
	if _, err = fan.next(w, ticket{}, nil); err != errHalfOpen {
		t.Fatalf("after delivering the batch: %v, want the stream's failure", err)
	}
}
