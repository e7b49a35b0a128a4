package shard_test

import (
	"net/url"
	"testing"
	"time"

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
