package shard

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/dbinformer/dbinformer/internal/keyshard"
)

// Member is one replica as the membership knows it.
type Member struct {
	// ID names the replica; unique among live members.
	ID string
	// Weight scales the replica's expected share of shards (rendezvous
	// hashing with weights: a member of weight 2 wins about twice the
	// shards of a member of weight 1). 0 means 1.
	Weight float64
}

func (m Member) weight() float64 {
	if m.Weight <= 0 {
		return 1
	}
	return m.Weight
}

// Hash is the stable 64-bit hash of a key: FNV-1a, mixed by splitmix64's
// finalizer so that keys differing in their last bytes spread over the
// whole range. Stable across processes, platforms and releases: replicas
// of different builds must agree on it, so it never changes. (The relay
// publishes a key on its shard's subject with the same hash.)
func Hash(key string) uint64 { return keyshard.Hash(key) }

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 { return keyshard.Mix(x) }

// Of returns the virtual shard of key among shards (0 ≤ Of < shards). The
// count of shards is fixed for the life of a deployment: changing it moves
// almost every key.
func Of(key string, shards int) int { return keyshard.Of(key, shards) }

// score is member m's rendezvous weight for shard s. Members with the same
// weight compare by the hash alone (integers: every replica computes the
// same order, whatever its floating point); weighted ones by
// w / -ln(u), u the hash mapped into (0, 1), the standard weighted
// rendezvous hashing, whose expected share is proportional to w.
func score(memberHash uint64, s int) uint64 {
	return mix(memberHash ^ mix(uint64(s)+0x9e3779b97f4a7c15))
}

func weighted(h uint64, w float64) float64 {
	u := (float64(h>>11) + 0.5) / (1 << 53)
	return w / -math.Log(u)
}

// Assign maps each of shards virtual shards to the member that wins it by
// rendezvous (highest-random-weight) hashing: owners[s] is the ID of the
// member owning shard s, "" when there are no members. It depends only on
// the set of members (not their order), so every replica computes the
// same assignment from the same membership; adding a member moves to it
// only the shards it wins, and removing one moves only its shards.
// Members with an empty or repeated ID are an error.
func Assign(shards int, members []Member) ([]string, error) {
	if shards <= 0 {
		return nil, fmt.Errorf("shard: %d shards (need at least one)", shards)
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	hashes := make([]uint64, len(ms))
	uniform := true
	for i, m := range ms {
		if m.ID == "" {
			return nil, fmt.Errorf("shard: a member has an empty ID")
		}
		if i > 0 && ms[i-1].ID == m.ID {
			return nil, fmt.Errorf("shard: member %q appears twice (each replica needs its own ID)", m.ID)
		}
		hashes[i] = Hash(m.ID)
		if m.weight() != ms[0].weight() {
			uniform = false
		}
	}
	owners := make([]string, shards)
	if len(ms) == 0 {
		return owners, nil
	}
	for s := range owners {
		best := 0
		if uniform {
			var top uint64
			for i, h := range hashes {
				// Ties (astronomically rare) go to the lower ID: the
				// members are sorted, so the first wins.
				if sc := score(h, s); i == 0 || sc > top {
					best, top = i, sc
				}
			}
		} else {
			var top float64
			for i, h := range hashes {
				if sc := weighted(score(h, s), ms[i].weight()); i == 0 || sc > top {
					best, top = i, sc
				}
			}
		}
		owners[s] = ms[best].ID
	}
	return owners, nil
}

// Owned returns the shards owners (as Assign returns) gives to id, in
// increasing order.
func Owned(owners []string, id string) []int {
	var out []int
	for s, o := range owners {
		if o == id {
			out = append(out, s)
		}
	}
	return out
}
