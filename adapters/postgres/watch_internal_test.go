package pginformer

import (
	"testing"

	"github.com/dbinformer/dbinformer/core"
)

// TestAppliedIsTheSlowestOpenWatch: with two watches of one table open, the
// table (and so the slot's confirmed position) counts as applied only up to
// the slower one; when the slower one closes, up to the other.
func TestAppliedIsTheSlowestOpenWatch(t *testing.T) {
	s := &Source{history: 0}
	st := newTableState("public", "t")
	s.tables = []*tableState{st}
	st.reset(100)
	for _, rv := range []core.ResourceVersion{110, 120, 130} {
		st.batches = append(st.batches, &batch{rv: rv, commitLSN: rv - 5, size: 1, decoded: true})
	}
	s.pos = 130

	s.mu.Lock()
	slow := s.openWatch(st, 100)
	fast := s.openWatch(st, 100)
	s.mu.Unlock()
	if got := s.ackNow(); got != 105 {
		t.Fatalf("ack with both watches at 100: %d, want 105 (the first batch's commit start)", got)
	}

	// The fast watch applies everything; the slow one has applied 110.
	tbl := &Table[int]{src: s, st: st}
	tbl.ack(fast, 130)
	tbl.ack(slow, 110)
	if st.applied != 110 {
		t.Errorf("applied %d with watches at 110 and 130, want 110", st.applied)
	}
	if got := s.ackNow(); got != 115 {
		t.Errorf("ack %d, want 115: the slow watch has not applied the batch at 120", got)
	}

	// The slow watch goes away: the fast one's position counts.
	s.closeWatch(st, slow)
	if st.applied != 130 {
		t.Errorf("applied %d after the slow watch closed, want 130", st.applied)
	}
	if got := s.ackNow(); got != 130 {
		t.Errorf("ack %d, want 130", got)
	}

	// With no watch open, applied stays where the last one left it.
	s.closeWatch(st, fast)
	if st.applied != 130 {
		t.Errorf("applied %d with no watch open, want 130 kept", st.applied)
	}
}

func (s *Source) ackNow() core.ResourceVersion {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ackLocked()
}
