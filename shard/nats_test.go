package shard_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
	"github.com/dbinformer/dbinformer/shard"
)

func natsBackend(t testing.TB, js jetstream.JetStream, bucket string) *shard.NATS {
	b, err := shard.NewNATS(context.Background(), js, bucket)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// proxiedJetStream is a JetStream client of n whose connection a proxy
// can freeze (TCP open, nothing passes).
func proxiedJetStream(t *testing.T, n *harness.NATS) (jetstream.JetStream, *proxy.Proxy) {
	px, err := proxy.New(strings.TrimPrefix(n.URL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	nc, err := nats.Connect("nats://"+px.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, px
}

// Membership, assignment and fencing on a NATS KV bucket: a joining member
// takes only the shards it wins; a write fenced on a shard's term passes
// while the term holds and is refused by the server once the shard moved;
// the new term is higher.
func TestNATSMembershipAssignmentFencing(t *testing.T) {
	n := harness.StartNATS(t)
	js := n.JetStream(t)
	b := natsBackend(t, js, "test_shards")
	const shards = 32
	opts := func(id string) shard.Options { return shard.Options{ID: id, Shards: shards, Lease: lease} }
	a, bb, c := start(t, b, opts("a")), start(t, b, opts("b")), start(t, b, opts("c"))
	before := settled(t, shards, a, bb, c)
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

	ctx := context.Background()
	sh := slices.Min(slices.Collect(maps.Keys(d.s.Owned())))
	term := d.s.Owned()[sh]
	write := func(term uint64) error {
		_, err := js.Publish(ctx, "$KV.test_shards.data", []byte(fmt.Sprint(term)), b.Fence(sh, term))
		return err
	}
	if err := write(term); err != nil {
		t.Fatalf("a write under the current term %d of shard %d: %v", term, sh, err)
	}
	d.stop(t) // graceful: d's member key goes, a, b, c take its shards back
	back := settled(t, shards, a, bb, c)
	for s := range back {
		if back[s] != before[s] {
			t.Fatalf("shard %d is %s's after d left, was %s's before d joined", s, back[s], before[s])
		}
	}
	var apiErr *jetstream.APIError
	if err := write(term); !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("a write of deposed owner d under term %d of shard %d: %v, want the server's wrong last sequence error", term, sh, err)
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
	if err := write(newTerm); err != nil {
		t.Fatalf("a write of the new owner %s under term %d: %v", owner.s.ID(), newTerm, err)
	}
}

// A member whose connection freezes loses its shards once the server
// expired its member key (the lease as the key's TTL), stops handing out
// work two thirds into its lease, and comes back after.
func TestNATSFrozenMemberLeaves(t *testing.T) {
	n := harness.StartNATS(t)
	b := natsBackend(t, n.JetStream(t), "test_shards")
	fjs, px := proxiedJetStream(t, n)
	const shards = 16
	opts := func(id string) shard.Options { return shard.Options{ID: id, Shards: shards, Lease: lease} }
	a, bb := start(t, b, opts("a")), start(t, b, opts("b"))
	f := start(t, natsBackend(t, fjs, "test_shards"), opts("f"))
	settled(t, shards, a, bb, f)
	frozenAt := time.Now()
	px.Freeze()
	settled(t, shards, a, bb)
	t.Logf("the frozen member's shards moved %v after the freeze (lease %v)", time.Since(frozenAt), lease)
	if owned := f.s.Owned(); len(owned) != 0 {
		t.Fatalf("the frozen member still hands out work for shards %v", owned)
	}
	px.Thaw()
	settled(t, shards, a, bb, f)
}

func TestNATSJoinRefusesLiveID(t *testing.T) {
	n := harness.StartNATS(t)
	js := n.JetStream(t)
	b := natsBackend(t, js, "test_shards")
	ctx := context.Background()
	if _, err := b.Join(ctx, shard.Member{ID: "x.y"}, lease); err == nil || !strings.Contains(err.Error(), `"x.y"`) {
		t.Fatalf("join as x.y: %v, want an error naming the ID", err)
	}
	s1, err := b.Join(ctx, shard.Member{ID: "x", Weight: 2}, lease)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close(ctx)
	if _, err := b.Join(ctx, shard.Member{ID: "x"}, lease); err == nil || !strings.Contains(err.Error(), "live session") {
		t.Fatalf("a second join as x: %v, want an error naming the live session", err)
	}
	ms, err := s1.Members(ctx)
	if err != nil || len(ms) != 1 || ms[0] != (shard.Member{ID: "x", Weight: 2}) {
		t.Fatalf("members: %v, %v; want x of weight 2", ms, err)
	}
	// A bucket without per-key TTLs cannot hold leases: refused with the fix.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "plain"}); err != nil {
		t.Fatal(err)
	}
	if _, err := shard.NewNATS(ctx, js, "plain"); err == nil || !strings.Contains(err.Error(), "per-key TTLs") {
		t.Fatalf("NewNATS over a bucket without TTLs: %v, want an error naming the fix", err)
	}
	// Not renewed, the member key expires by the server's clock.
	informertest.Eventually(t, "the unrenewed member to expire", func() bool {
		ms, err := s1.Members(ctx)
		return err == nil && len(ms) == 0
	})
	if err := s1.Renew(ctx); !errors.Is(err, shard.ErrSessionLost) {
		t.Fatalf("renew after the member key expired: %v, want ErrSessionLost", err)
	}
	s2, err := b.Join(ctx, shard.Member{ID: "x"}, lease)
	if err != nil {
		t.Fatalf("join as x after the old session expired: %v", err)
	}
	defer s2.Close(ctx)
}

// The churn test with membership and ownership on a NATS bucket (data in
// etcd).
func TestNATSChurn(t *testing.T) {
	n := harness.StartNATS(t)
	e := harness.StartEtcd(t)
	fjs, px := proxiedJetStream(t, n)
	churn(t, e.Client(t), natsBackend(t, n.JetStream(t), "churn_shards"), natsBackend(t, fjs, "churn_shards"), px)
}
