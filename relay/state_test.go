package relay

import (
	"log/slog"
	"maps"
	"slices"
	"testing"
)

// The keys a term must republish for groups aborted before it: those
// whose message was stored before an abort message of its version, in
// any order of entries (a List orders them by subject, not sequence),
// whichever abort of that version came last.
func TestAbortedKeys(t *testing.T) {
	key := func(k string, seq, version uint64) entry {
		return entry{kind: kindKey, key: k, seq: seq, version: version}
	}
	abort := func(seq, version uint64) entry { return entry{kind: kindAbort, seq: seq, version: version} }
	progress := func(seq, version uint64) entry { return entry{kind: kindProgress, seq: seq, version: version} }
	for _, tc := range []struct {
		name    string
		entries []entry
		want    []string
	}{
		{name: "none", entries: []entry{key("a", 1, 10), progress(2, 11)}},
		{name: "abort at the tail", entries: []entry{key("b", 1, 10), key("a", 3, 20), key("c", 4, 20), abort(5, 20)}, want: []string{"a", "c"}},
		// The aborting term's relist republished a (at 21) but not c.
		{name: "a partial relist after it", entries: []entry{key("a", 7, 21), abort(5, 20), key("c", 4, 20)}, want: []string{"c"}},
		// A relist at the aborted version itself, after the abort.
		{name: "same version after the abort", entries: []entry{key("a", 6, 20), abort(5, 20), key("c", 4, 20)}, want: []string{"c"}},
		// The same version aborted again later: everything before that.
		{name: "aborted twice", entries: []entry{abort(5, 20), key("a", 6, 20), abort(8, 20), key("c", 4, 20), key("d", 9, 20)}, want: []string{"a", "c"}},
		{name: "another version's abort", entries: []entry{key("a", 3, 10), abort(5, 20)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := slices.Sorted(maps.Keys(abortedKeys(tc.entries))); !slices.Equal(got, tc.want) {
				t.Errorf("abortedKeys = %v, want %v", got, tc.want)
			}
		})
	}
}

// A repair that an attempt of a term started is taken up by the next
// attempt while the stream still ends at the late writes' version (only
// the attempt's first message, which superseded the intruder, was
// stored), dropped once the repair's group is stored, and handed to a
// relist as keys to republish when the term relists anyway. The keys of a
// relist for late writes are carried until a relist is stored. A broken
// chain is repaired from the version the term acknowledged (a repair
// carried starts there if that is earlier), unless the term acknowledged
// nothing or relists anyway; a relist for it is carried like one for late
// writes.
func TestCarry(t *testing.T) {
	started := &repair{from: 5, to: 9, keys: map[string]bool{"late": true}, changes: []change{{key: "lost"}}}
	for _, tc := range []struct {
		name       string
		committed  uint64
		relist     bool
		late       map[string]bool // the term's, from an earlier attempt
		none       bool            // no repair started
		broken     bool            // the last attempt's chain broke
		acked      uint64          // the term's acknowledged version
		wantRepair bool
		wantFrom   uint64 // for a broken chain's repair
		wantLate   []string
	}{
		{name: "not stored", committed: 9, wantRepair: true, wantFrom: 5},
		{name: "stored", committed: 12},
		{name: "relisting", committed: 9, relist: true, wantLate: []string{"late"}},
		{name: "relisting for late writes", committed: 9, late: map[string]bool{"x": true}, wantLate: []string{"late", "x"}},
		{name: "broken chain", committed: 12, none: true, broken: true, acked: 11, wantRepair: true, wantFrom: 11},
		{name: "broken chain, repair carried", committed: 9, broken: true, acked: 7, wantRepair: true, wantFrom: 5},
		{name: "broken chain, repair carried from later", committed: 9, broken: true, acked: 3, wantRepair: true, wantFrom: 3},
		{name: "broken chain, nothing acknowledged", committed: 12, none: true, broken: true, wantLate: []string{}},
		{name: "broken chain, relisting", committed: 12, none: true, broken: true, acked: 11, relist: true, wantLate: []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := &termState{repair: started, late: tc.late, at: 9, broken: tc.broken, acked: tc.acked}
			if tc.none {
				ts.repair = nil
			}
			st := &state{committed: tc.committed, top: tc.committed}
			relist := st.carry(ts, tc.relist)
			if (st.repair != nil) != tc.wantRepair || ts.repair != st.repair {
				t.Fatalf("repair %+v (term's %+v), want one: %v", st.repair, ts.repair, tc.wantRepair)
			}
			if relist != (tc.wantLate != nil || tc.relist) {
				t.Errorf("relist %v, want %v", relist, !relist)
			}
			if ts.broken {
				t.Error("the broken chain is still to mend after carry")
			}
			switch {
			case st.repair == nil:
			case tc.none:
				if !st.repair.broken || st.repair.from != tc.wantFrom || st.repair.to != tc.committed || len(st.repair.keys) != 0 {
					t.Errorf("repair %+v, want a broken chain's from %d to %d, no keys", st.repair, tc.wantFrom, tc.committed)
				}
			case st.repair.from != tc.wantFrom || st.repair.to != 9 || !st.repair.keys["late"] || len(st.repair.changes) != 0:
				t.Errorf("repair %+v, want from %d to 9, key late, no changes replayed yet", st.repair, tc.wantFrom)
			}
			if got := slices.Sorted(maps.Keys(st.late)); !slices.Equal(got, tc.wantLate) {
				t.Errorf("late keys %v, want %v", got, tc.wantLate)
			}
			if got := slices.Sorted(maps.Keys(ts.late)); !slices.Equal(got, tc.wantLate) {
				t.Errorf("the term's late keys %v, want %v", got, tc.wantLate)
			}
		})
	}
}

// A stream that holds a term's record of a repair it did not store
// (hdrPending), and nothing of that term or a later one after it, has a
// new term carry on with it: from the recorded version to the stream's
// last, with the keys of the late writes (every key message past the
// repair's version) for the replay to hold. A relist recorded is a
// relist. Late writes after the record (a deposed term's pipelined
// messages, the record their intruder) are mended with it: the repair
// read found for them starts from the record's version, one read found
// harmless is the record's, and a relist for them republishes the
// record's keys too. A record the term went on from is done.
func TestTakeUp(t *testing.T) {
	key := func(k string, seq, epoch, v uint64) entry {
		return entry{kind: kindKey, key: k, seq: seq, epoch: epoch, version: v, prev: v - 1, index: 0, count: 1}
	}
	entries := []entry{key("old", 9, 1, 5), key("late", 11, 1, 7), key("late2", 12, 1, 8)}
	record := func(pd pending) entry {
		return entry{kind: kindProgress, seq: 13, epoch: 3, version: 8, prev: 7, pending: &pd}
	}
	repairing := record(pending{from: 5})
	lateAfter := key("late3", 14, 1, 9) // a late write behind the record
	for _, tc := range []struct {
		name       string
		more       []entry
		repair     *repair         // the read's, for late writes it still shows
		late       map[string]bool // the read's relist keys, likewise
		wantRepair *repair
		wantLate   []string // nil: no relist
	}{
		{name: "no record"},
		{name: "repair", more: []entry{repairing}, wantRepair: &repair{from: 5, to: 8, keys: map[string]bool{"late": true, "late2": true}}},
		// A message stored before the record with a higher version than
		// the record's (a late write that ended the stream below it): a
		// downstream may have confirmed it, so the repair goes past it.
		{name: "repair past the stream's highest version", more: []entry{key("ahead", 10, 2, 12), repairing},
			wantRepair: &repair{from: 5, to: 12, keys: map[string]bool{"late": true, "late2": true, "ahead": true}}},
		{name: "relist", more: []entry{record(pending{relist: true})}, wantLate: []string{}},
		{name: "relist, and a repair for late writes", more: []entry{record(pending{relist: true}), lateAfter},
			repair: &repair{from: 8, to: 9, keys: map[string]bool{"late3": true}}, wantLate: []string{"late3"}},
		{name: "the term went on", more: []entry{repairing, key("lost", 14, 3, 10)}},
		{name: "late writes after it: relist", more: []entry{repairing, lateAfter}, late: map[string]bool{"late3": true},
			wantLate: []string{"late", "late2", "late3"}},
		{name: "late writes after it: repair", more: []entry{repairing, lateAfter}, repair: &repair{from: 8, to: 9, keys: map[string]bool{"late3": true}},
			wantRepair: &repair{from: 5, to: 9, keys: map[string]bool{"late": true, "late2": true, "late3": true}}},
		{name: "late writes after it: harmless", more: []entry{repairing, lateAfter},
			wantRepair: &repair{from: 5, to: 9, keys: map[string]bool{"late": true, "late2": true, "late3": true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Relay[int]{log: slog.New(slog.DiscardHandler)}
			all := append(slices.Clone(entries), tc.more...)
			st := &state{committed: all[len(all)-1].version, repair: tc.repair, late: tc.late}
			for _, e := range all {
				st.top = max(st.top, e.version)
			}
			r.takeUp(st, all)
			switch {
			case (st.repair == nil) != (tc.wantRepair == nil):
				t.Fatalf("repair %+v, want %+v", st.repair, tc.wantRepair)
			case st.repair != nil && (st.repair.from != tc.wantRepair.from || st.repair.to != tc.wantRepair.to || !maps.Equal(st.repair.keys, tc.wantRepair.keys)):
				t.Fatalf("repair %+v, want %+v", st.repair, tc.wantRepair)
			}
			if (st.late == nil) != (tc.wantLate == nil) {
				t.Fatalf("late %v, want %v", st.late, tc.wantLate)
			}
			if got := slices.Sorted(maps.Keys(st.late)); st.late != nil && !slices.Equal(got, tc.wantLate) {
				t.Errorf("late keys %v, want %v", got, tc.wantLate)
			}
		})
	}
}
