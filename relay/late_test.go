package relay

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// A deposed term's message stored after a later term's is found wherever
// it is (the entries come from a List, ordered by key, not sequence), and
// the keys of such messages are returned for the relist to republish.
func TestLateWrites(t *testing.T) {
	key := func(k string, seq, epoch uint64) entry {
		return entry{kind: kindKey, key: k, seq: seq, epoch: epoch}
	}
	progress := func(seq, epoch uint64) entry { return entry{kind: kindProgress, seq: seq, epoch: epoch} }
	for _, tc := range []struct {
		name     string
		entries  []entry
		ours     bool
		wantLate bool
		wantKeys []string
	}{
		{name: "in order", entries: []entry{key("a", 1, 1), key("b", 5, 2), progress(7, 3), key("c", 6, 2)}},
		{name: "a key after a later epoch", entries: []entry{key("b", 9, 1), key("a", 4, 2), progress(10, 2)}, wantLate: true, wantKeys: []string{"b"}},
		{name: "progress after a later epoch", entries: []entry{key("a", 4, 2), progress(5, 1)}, wantLate: true},
		{name: "several", entries: []entry{key("z", 8, 1), key("y", 6, 1), key("a", 4, 3), key("b", 5, 2)}, wantLate: true, wantKeys: []string{"b", "y", "z"}},
		{name: "ours says the last is late", entries: []entry{key("a", 4, 1)}, ours: true, wantLate: true, wantKeys: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			last := slices.MaxFunc(tc.entries, func(a, b entry) int { return int(a.seq) - int(b.seq) })
			late, keys := lateWrites(tc.entries, last, tc.ours)
			if (late != "") != tc.wantLate {
				t.Fatalf("late = %q, want late: %v", late, tc.wantLate)
			}
			if tc.wantLate && !strings.Contains(late, "sequence") {
				t.Errorf("the description %q does not name the sequence", late)
			}
			if got := slices.Sorted(maps.Keys(keys)); !slices.Equal(got, tc.wantKeys) {
				t.Errorf("keys = %v, want %v", got, tc.wantKeys)
			}
		})
	}
}
