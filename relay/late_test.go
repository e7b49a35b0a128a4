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
		wantSeq  uint64 // the lowest late write's sequence
	}{
		{name: "in order", entries: []entry{key("a", 1, 1), key("b", 5, 2), progress(7, 3), key("c", 6, 2)}},
		{name: "a key after a later epoch", entries: []entry{key("b", 9, 1), key("a", 4, 2), progress(10, 2)}, wantLate: true, wantKeys: []string{"b"}, wantSeq: 9},
		{name: "progress after a later epoch", entries: []entry{key("a", 4, 2), progress(5, 1)}, wantLate: true, wantSeq: 5},
		{name: "several", entries: []entry{key("z", 8, 1), key("y", 6, 1), key("a", 4, 3), key("b", 5, 2)}, wantLate: true, wantKeys: []string{"b", "y", "z"}, wantSeq: 5},
		{name: "ours says the last is late", entries: []entry{key("a", 4, 1)}, ours: true, wantLate: true, wantKeys: []string{"a"}, wantSeq: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			last := slices.MaxFunc(tc.entries, func(a, b entry) int { return int(a.seq) - int(b.seq) })
			late, keys, lowest := lateWrites(tc.entries, last, tc.ours)
			if (late != "") != tc.wantLate {
				t.Fatalf("late = %q, want late: %v", late, tc.wantLate)
			}
			if lowest != tc.wantSeq {
				t.Errorf("lowest late sequence %d, want %d", lowest, tc.wantSeq)
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

// A late write of a deposed term is resumed from only when the message
// it cost (the deposed term's own, refused at the sequence the later
// term's progress message took) provably carried no change: the
// deposed term's next message starts a group with the same last complete
// group as before. It is repaired from the source, watched from the
// intruder's version, when the late writes have the one shape that
// proves no relay acknowledged the source past that version; anything
// else relists.
func TestLateLoss(t *testing.T) {
	// keyAt is a one-key group: a commit point whose lastChange is v.
	keyAt := func(k string, seq, epoch, v, prev uint64) entry {
		return entry{kind: kindKey, key: k, seq: seq, epoch: epoch, version: v, prev: prev, index: 0, count: 1}
	}
	progress := func(seq, epoch, v, prev uint64) entry {
		return entry{kind: kindProgress, seq: seq, epoch: epoch, version: v, prev: prev}
	}
	// The deposed term 1 ends at sequence 10 (version 5) when term 2
	// reads the stream; term 2's progress takes sequence 11.
	before := keyAt("a", 10, 1, 5, 4)
	intruder := progress(11, 2, 5, 5)
	const resume, repair, relist = "resume", "repair", "relist"
	for _, tc := range []struct {
		name    string
		entries []entry
		want    string
	}{
		// Term 1's message at 11 was progress (version 6, prev 5): its
		// next group, version 7, still has prev 5.
		{name: "lost progress", entries: []entry{before, intruder, keyAt("b", 12, 1, 7, 5), keyAt("c", 13, 1, 8, 7)}, want: resume},
		{name: "lost progress, then progress", entries: []entry{before, intruder, progress(12, 1, 6, 5), keyAt("c", 13, 1, 8, 5)}, want: resume},
		// Term 1's message at 11 completed group 6.
		{name: "lost a group", entries: []entry{before, intruder, keyAt("b", 12, 1, 7, 6)}, want: repair},
		// Term 1's message at 11 began group 6 of two keys.
		{name: "lost a group's first key", entries: []entry{before, intruder, {kind: kindKey, key: "b", seq: 12, epoch: 1, version: 6, prev: 5, index: 1, count: 2}}, want: repair},
		// Sequence 12 was superseded by a later message of its subject:
		// nothing proves what 11 was.
		{name: "next superseded", entries: []entry{before, intruder, keyAt("c", 13, 1, 8, 7)}, want: repair},
		{name: "before superseded", entries: []entry{intruder, keyAt("b", 12, 1, 7, 5)}, want: relist},
		// The later term's message is a change, not its first progress.
		{name: "intruder is a change", entries: []entry{before, keyAt("z", 11, 2, 6, 5), keyAt("b", 12, 1, 7, 5)}, want: relist},
		{name: "intruder read elsewhere", entries: []entry{before, progress(11, 2, 5, 4), keyAt("b", 12, 1, 7, 4)}, want: relist},
		// The intruder's term went on behind the late write: its message
		// at 12 was refused, and its next one stored at 13.
		{name: "the later term's chain broken", entries: []entry{before, intruder, keyAt("b", 12, 1, 7, 5), keyAt("z", 13, 2, 9, 5)}, want: relist},
		{name: "two intruders", entries: []entry{before, intruder, keyAt("b", 12, 1, 7, 5), progress(13, 2, 7, 7), keyAt("c", 14, 1, 8, 7)}, want: relist},
		{name: "two deposed terms", entries: []entry{keyAt("x", 9, 3, 4, 3), before, intruder, keyAt("b", 12, 1, 7, 5)}, want: relist},
		{name: "a late abort", entries: []entry{before, intruder, keyAt("b", 12, 1, 7, 6), {kind: kindAbort, seq: 13, epoch: 1, version: 8, prev: 7}}, want: relist},
		{name: "no late write", entries: []entry{before, intruder}, want: relist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, harmless, ok := lateLoss(tc.entries)
			got := relist
			switch {
			case ok && harmless:
				got = resume
			case ok:
				got = repair
			}
			if got != tc.want {
				t.Fatalf("lateLoss = %d, %v, %v: %s, want %s", from, harmless, ok, got, tc.want)
			}
			if ok && from != intruder.version {
				t.Errorf("lateLoss from %d, want the intruder's version %d", from, intruder.version)
			}
		})
	}
}
