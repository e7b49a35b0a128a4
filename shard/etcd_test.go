package shard_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/shard"
)

func etcdBackend(t testing.TB, client *clientv3.Client, prefix string) *shard.Etcd {
	b, err := shard.NewEtcd(client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const lease = 2 * time.Second

func TestEtcdMembershipAssignmentFencing(t *testing.T) {
	e := harness.StartEtcd(t)
	client := e.Client(t)
	b := etcdBackend(t, client, "/test/shards")
	const shards = 32
	opts := func(id string) shard.Options { return shard.Options{ID: id, Shards: shards, Lease: lease} }
	a, bb, c := start(t, b, opts("a")), start(t, b, opts("b")), start(t, b, opts("c"))
	before := settled(t, shards, a, bb, c)

	// A fourth member takes only the shards it wins.
	d := start(t, b, opts("d"))
	after := settled(t, shards, a, bb, c, d)
	moved := 0
	for s := range after {
		if after[s] != before[s] {
			moved++
			if after[s] != "d" {
				t.Fatalf("shard %d moved from %s to %s when d joined", s, before[s], after[s])
			}
		}
	}
	if moved == 0 {
		t.Fatal("d joined and won no shard")
	}
	t.Logf("d joined: %d of %d shards moved, all to d", moved, shards)

	// Fencing: a write under a shard's term passes while the term holds,
	// and is refused once the shard moved.
	ctx := context.Background()
	sh := slices.Min(slices.Collect(maps.Keys(d.s.Owned())))
	term := d.s.Owned()[sh]
	fenced := func(term uint64) bool {
		resp, err := client.Txn(ctx).If(b.Fence(sh, term)).Then(clientv3.OpPut("/test/data", fmt.Sprint(term))).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return !resp.Succeeded
	}
	if fenced(term) {
		t.Fatalf("a write under the current term %d of shard %d was refused", term, sh)
	}
	d.stop(t) // graceful: d hands off, a, b, c take its shards back
	back := settled(t, shards, a, bb, c)
	for s := range back {
		if back[s] != before[s] {
			t.Fatalf("shard %d is %s's after d left, was %s's before d joined", s, back[s], before[s])
		}
	}
	if !fenced(term) {
		t.Fatalf("a write of deposed owner d under term %d of shard %d passed", term, sh)
	}
	var owner *replica
	for _, r := range []*replica{a, bb, c} {
		if r.s.ID() == back[sh] {
			owner = r
		}
	}
	newTerm := owner.s.Owned()[sh]
	if newTerm <= term {
		t.Fatalf("shard %d's new term %d is not above the old %d", sh, newTerm, term)
	}
	if fenced(newTerm) {
		t.Fatalf("a write of the new owner %s under term %d was refused", owner.s.ID(), newTerm)
	}
}

// A member whose connection freezes (TCP open, nothing passes) stops
// working on its shards two thirds into its lease, and the others take
// them once its lease expired.
func TestEtcdFrozenMemberLeaves(t *testing.T) {
	e := harness.StartEtcd(t)
	b := etcdBackend(t, e.Client(t), "/test/shards")
	frozenClient, px := e.ProxiedClient(t)
	const shards = 16
	opts := func(id string) shard.Options { return shard.Options{ID: id, Shards: shards, Lease: lease} }
	a, bb := start(t, b, opts("a")), start(t, b, opts("b"))
	f := start(t, etcdBackend(t, frozenClient, "/test/shards"), opts("f"))
	settled(t, shards, a, bb, f)
	frozenAt := time.Now()
	px.Freeze()
	settled(t, shards, a, bb)
	t.Logf("the frozen member's shards moved %v after the freeze (lease %v)", time.Since(frozenAt), lease)
	// Owned applies Begin's check: the frozen member hands out no work
	// (two thirds into its lease it stopped).
	if owned := f.s.Owned(); len(owned) != 0 {
		t.Fatalf("the frozen member still hands out work for shards %v", owned)
	}
	px.Thaw()
	// Back, it joins again and gets its share back.
	settled(t, shards, a, bb, f)
}

func TestEtcdJoinRefusesLiveID(t *testing.T) {
	e := harness.StartEtcd(t)
	b := etcdBackend(t, e.Client(t), "/test/shards")
	ctx := context.Background()
	s1, err := b.Join(ctx, shard.Member{ID: "x"}, lease)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close(ctx)
	if _, err := b.Join(ctx, shard.Member{ID: "x"}, lease); err == nil || !strings.Contains(err.Error(), "live session") {
		t.Fatalf("a second join as x: %v, want an error naming the live session", err)
	}
	informertest.Eventually(t, "members to list x", func() bool {
		ms, err := s1.Members(ctx)
		return err == nil && len(ms) == 1 && ms[0].ID == "x"
	})
}
