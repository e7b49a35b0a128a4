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
