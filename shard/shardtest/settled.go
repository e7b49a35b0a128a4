package shardtest

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/shard"
)

// Settled waits until the live Sharders own, between them, every one of
// shards exactly once, each exactly the shards Assign gives it over their
// IDs (unweighted), and returns the owner of each shard.
func Settled(t testing.TB, shards int, live ...*shard.Sharder) []string {
	t.Helper()
	var members []shard.Member
	for _, s := range live {
		members = append(members, shard.Member{ID: s.ID()})
	}
	want, err := shard.Assign(shards, members)
	if err != nil {
		t.Fatal(err)
	}
	informertest.Eventually(t, fmt.Sprintf("%d replicas to own their assigned shards", len(live)), func() bool {
		for _, s := range live {
			got := slices.Sorted(maps.Keys(s.Owned()))
			if !slices.Equal(got, shard.Owned(want, s.ID())) {
				return false
			}
		}
		return true
	})
	return want
}
