package shard_test

import (
	"net/url"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
	"github.com/dbinformer/dbinformer/shard"
)

func kubeBackend(t *testing.T, client kubernetes.Interface) *shard.Kube {
	b, err := shard.NewKube(client, "default", "test")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Membership and ownership on Kubernetes Leases: a joining member takes
// only the shards it wins, a graceful leave hands its shards back at
// once, a member whose connection freezes loses its shards once the others
// saw its Lease unchanged for the lease time, and comes back after.
func TestKubeMembership(t *testing.T) {
	k := harness.StartKube(t)
	b := kubeBackend(t, k.Client(t))
	frozenClient, px := proxiedKube(t, k)
	const shards = 16
	opts := func(id string) shard.Options { return shard.Options{ID: id, Shards: shards, Lease: lease} }
	a, bb := start(t, b, opts("a")), start(t, b, opts("b"))
	before := settled(t, shards, a, bb)
	f := start(t, kubeBackend(t, frozenClient), opts("f"))
	after := settled(t, shards, a, bb, f)
	for s := range after {
		if after[s] != before[s] && after[s] != "f" {
			t.Fatalf("shard %d moved from %s to %s when f joined", s, before[s], after[s])
		}
	}
	frozenAt := time.Now()
	px.Freeze()
	settled(t, shards, a, bb)
	t.Logf("the frozen member's shards moved %v after the freeze (lease %v)", time.Since(frozenAt), lease)
	if owned := f.s.Owned(); len(owned) != 0 {
		t.Fatalf("the frozen member still hands out work for shards %v", owned)
	}
	px.Thaw()
	settled(t, shards, a, bb, f)
	bb.stop(t)
	settled(t, shards, a, f)
}

// The churn test with membership and ownership on Leases (data in etcd).
func TestKubeChurn(t *testing.T) {
	k := harness.StartKube(t)
	e := harness.StartEtcd(t)
	frozenClient, px := proxiedKube(t, k)
	churn(t, e.Client(t), kubeBackend(t, k.Client(t)), kubeBackend(t, frozenClient), px)
}

// proxiedKube is a client of k whose connection a proxy can freeze.
func proxiedKube(t *testing.T, k *harness.Kube) (kubernetes.Interface, *proxy.Proxy) {
	cfg := k.Config()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	px, err := proxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	cfg.Host = "https://" + px.Addr()
	cfg.Timeout = 5 * time.Second
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, px
}

// A join, a release and a leave wake the other sessions (Changed); a
// renewal, which every member makes every third of a lease, does not.
func TestKubeChangedSignals(t *testing.T) {
	k := harness.StartKube(t)
	b, err := shard.NewKube(k.Client(t), "default", "changed")
	if err != nil {
		t.Fatal(err)
	}
	changedSignals(t, b, "watching") // the Leases as they are, when the watch starts

	held, empty := "a/uid", ""
	member := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"shard.dbinformer.io/group": "changed-members"}}, Spec: coordv1.LeaseSpec{HolderIdentity: &held}}
	shardLease := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"shard.dbinformer.io/group": "changed-shards"}}, Spec: coordv1.LeaseSpec{HolderIdentity: &held}}
	released := shardLease.DeepCopy()
	released.Spec.HolderIdentity = &empty
	for _, c := range []struct {
		what string
		t    watch.EventType
		l    *coordv1.Lease
		want bool
	}{
		{"member joined", watch.Added, member, true},
		{"member left", watch.Deleted, member, true},
		{"member renewed", watch.Modified, member, false},
		{"shard taken or renewed", watch.Modified, shardLease, false},
		{"shard released", watch.Modified, released, true},
	} {
		if got := shard.KubeChange(c.t, c.l, "changed"); got != c.want {
			t.Errorf("%s: wakes a round = %v, want %v", c.what, got, c.want)
		}
	}
}
