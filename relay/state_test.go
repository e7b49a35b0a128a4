package relay

import (
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
// relist for late writes are carried until a relist is stored.
func TestCarry(t *testing.T) {
	started := &repair{from: 5, to: 9, keys: map[string]bool{"late": true}, changes: []change{{key: "lost"}}}
	for _, tc := range []struct {
		name       string
		committed  uint64
		relist     bool
		late       map[string]bool // the term's, from an earlier attempt
		wantRepair bool
		wantLate   []string
	}{
		{name: "not stored", committed: 9, wantRepair: true},
		{name: "stored", committed: 12},
		{name: "relisting", committed: 9, relist: true, wantLate: []string{"late"}},
		{name: "relisting for late writes", committed: 9, late: map[string]bool{"x": true}, wantLate: []string{"late", "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := &termState{repair: started, late: tc.late}
			st := &state{committed: tc.committed}
			relist := st.carry(ts, tc.relist)
			if (st.repair != nil) != tc.wantRepair || ts.repair != st.repair {
				t.Fatalf("repair %+v (term's %+v), want one: %v", st.repair, ts.repair, tc.wantRepair)
			}
			if relist != (tc.wantLate != nil || tc.relist) {
				t.Errorf("relist %v, want %v", relist, !relist)
			}
			if st.repair != nil && (st.repair.from != 5 || st.repair.to != 9 || !st.repair.keys["late"] || len(st.repair.changes) != 0) {
				t.Errorf("repair %+v, want from 5 to 9, key late, no changes replayed yet", st.repair)
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
