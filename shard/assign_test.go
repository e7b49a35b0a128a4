package shard

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// refAssign is the textbook rendezvous hashing, written independently of
// Assign: for each shard, every member in the given order, the weighted
// score w / -ln(u), the highest winning, ties to the higher raw hash and
// then the lower ID.
func refAssign(shards int, members []Member) []string {
	out := make([]string, shards)
	for s := range shards {
		bestID, bestScore, bestRaw := "", math.Inf(-1), uint64(0)
		for _, m := range members {
			w := m.Weight
			if w <= 0 {
				w = 1
			}
			raw := score(Hash(m.ID), s)
			sc := w / -math.Log((float64(raw>>11)+0.5)/(1<<53))
			if bestID == "" || sc > bestScore || (sc == bestScore && (raw > bestRaw || raw == bestRaw && m.ID < bestID)) {
				bestID, bestScore, bestRaw = m.ID, sc, raw
			}
		}
		out[s] = bestID
	}
	return out
}

func mustAssign(t testing.TB, shards int, ms []Member) []string {
	t.Helper()
	o, err := Assign(shards, ms)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestHashIsStable(t *testing.T) {
	// The hash is part of the contract between replicas (a change moves
	// keys between replicas of different builds): FNV-1a 64 as published
	// (its test vectors for "" and "a"), then splitmix64's finalizer,
	// whose published first output from seed 0 is 0xe220a8397b1dcdaf
	// (mix of the golden-ratio increment).
	for key, fnv := range map[string]uint64{"": 0xcbf29ce484222325, "a": 0xaf63dc4c8601ec8c} {
		if got, want := Hash(key), mix(fnv); got != want {
			t.Errorf("Hash(%q) = %#x, want mix(FNV-1a) = %#x", key, got, want)
		}
	}
	if got := mix(0x9e3779b97f4a7c15); got != 0xe220a8397b1dcdaf {
		t.Errorf("mix(golden ratio) = %#x, want splitmix64's first output 0xe220a8397b1dcdaf", got)
	}
}

func TestAssignSpreadsAndWeights(t *testing.T) {
	ms := []Member{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d", Weight: 2}}
	owners := mustAssign(t, 4096, ms)
	count := map[string]int{}
	for _, o := range owners {
		count[o]++
	}
	// Expected shares 1/5, 1/5, 1/5, 2/5 of 4096: 819 and 1638. The bounds
	// are ±15%, more than 8 standard deviations.
	for _, m := range ms {
		want := 4096 * m.weight() / 5
		if got := float64(count[m.ID]); got < want*0.85 || got > want*1.15 {
			t.Errorf("member %s (weight %v) owns %v shards, want about %.0f", m.ID, m.weight(), got, want)
		}
	}
}

func TestAssignRefusesBadMembers(t *testing.T) {
	if _, err := Assign(8, []Member{{ID: "a"}, {ID: "a"}}); err == nil {
		t.Error("a repeated ID was accepted")
	}
	if _, err := Assign(8, []Member{{ID: ""}}); err == nil {
		t.Error("an empty ID was accepted")
	}
	if _, err := Assign(0, nil); err == nil {
		t.Error("0 shards was accepted")
	}
}

// checkAssign checks Assign on ms against the reference and the
// properties every replica relies on.
func checkAssign(t *testing.T, shards int, ms []Member, extra Member) {
	got := mustAssign(t, shards, ms)
	want := refAssign(shards, ms)
	for s := range got {
		if got[s] != want[s] {
			t.Fatalf("shard %d: Assign gives %q, the reference %q (members %v)", s, got[s], want[s], ms)
		}
	}
	// Order does not matter.
	rev := make([]Member, len(ms))
	for i, m := range ms {
		rev[len(ms)-1-i] = m
	}
	for s, o := range mustAssign(t, shards, rev) {
		if o != got[s] {
			t.Fatalf("shard %d: %q with members in one order, %q in the reverse", s, got[s], o)
		}
	}
	// Adding a member moves only the shards it wins.
	with := mustAssign(t, shards, append(rev, extra))
	for s := range with {
		if with[s] != got[s] && with[s] != extra.ID {
			t.Fatalf("adding %q moved shard %d from %q to %q", extra.ID, s, got[s], with[s])
		}
	}
	// Removing one moves only its shards.
	if len(ms) > 1 {
		gone := ms[0].ID
		for s, o := range mustAssign(t, shards, ms[1:]) {
			if got[s] != gone && o != got[s] {
				t.Fatalf("removing %q moved shard %d from %q to %q", gone, s, got[s], o)
			}
		}
	}
}

func TestAssignAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := 1 + r.IntN(8)
		var ms []Member
		for i := range n {
			w := 0.0
			if r.IntN(3) == 0 {
				w = float64(1 + r.IntN(4))
			}
			ms = append(ms, Member{ID: fmt.Sprintf("replica-%d-%d", i, r.IntN(1000)), Weight: w})
		}
		checkAssign(t, 1+r.IntN(256), ms, Member{ID: "newcomer", Weight: float64(r.IntN(3))})
	}
}

func FuzzAssign(f *testing.F) {
	f.Add(uint8(16), []byte("a\x01b\x02c\x00"), "d")
	f.Add(uint8(1), []byte("x\x00"), "y")
	f.Fuzz(func(t *testing.T, shards uint8, spec []byte, extra string) {
		// spec: pairs of (ID byte, weight byte).
		seen := map[string]bool{extra: true}
		var ms []Member
		for i := 0; i+1 < len(spec); i += 2 {
			id := fmt.Sprintf("m%d", spec[i])
			if seen[id] {
				continue
			}
			seen[id] = true
			ms = append(ms, Member{ID: id, Weight: float64(spec[i+1] % 5)})
		}
		if extra == "" || len(ms) == 0 {
			return
		}
		checkAssign(t, 1+int(shards), ms, Member{ID: extra})
	})
}
