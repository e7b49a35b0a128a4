package etcdinformer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// clusterInformer starts a three-member cluster and an informer whose
// client reaches every member through its client proxy (with the
// harness's keepalives), and returns them with a client that writes to
// the members directly.
func clusterInformer(t *testing.T) (*harness.EtcdCluster, *core.SharedIndexInformer[item], *clientv3.Client, string) {
	t.Helper()
	cluster := harness.StartEtcdCluster(t, 3)
	cfg := cluster.ClientConfig()
	cfg.Endpoints = cluster.ProxiedEndpoints()
	viaProxies, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = viaProxies.Close() })
	prefix := uniquePrefix("cluster")
	direct := cluster.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	for i := range 5 {
		if _, err := putItem(ctx, direct, fmt.Sprintf("%sk%d", prefix, i), item{Version: 1}); err != nil {
			t.Fatal(err)
		}
	}
	inf, _ := informertest.Run(t, newLW(t, viaProxies, prefix, 0), core.InformerOptions[item]{Backoff: fastBackoff})
	requireConverged(t, inf, direct, prefix)
	return cluster, inf, direct, prefix
}

// others returns a client of every member but skip, so that what it does
// needs no answer from the member under fault.
func others(t *testing.T, cluster *harness.EtcdCluster, skip int) *clientv3.Client {
	t.Helper()
	cfg := cluster.ClientConfig()
	cfg.Endpoints = append(append([]string(nil), cfg.Endpoints[:skip]...), cfg.Endpoints[skip+1:]...)
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// faultEach puts the members under fault one at a time, writes through the
// others, and requires the informer to converge before the fault ends.
func faultEach(t *testing.T, fault func(*harness.EtcdCluster, int)) {
	cluster, inf, direct, prefix := clusterInformer(t)
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	for i := range 3 {
		fault(cluster, i)
		c := others(t, cluster, i)
		// Isolating the leader makes the others elect a new one; writes
		// time out meanwhile (the cluster's doing, not the informer's).
		informertest.Eventually(t, fmt.Sprintf("a write while member %d is under fault", i), func() bool {
			_, err := putItem(ctx, c, fmt.Sprintf("%sk%d", prefix, i), item{Version: 10 + i})
			if err == nil {
				_, err = c.Delete(ctx, fmt.Sprintf("%sk%d", prefix, i+1))
			}
			if err != nil {
				t.Logf("write while member %d is under fault: %v", i, err)
			}
			return err == nil
		})
		start := time.Now()
		requireConverged(t, inf, c, prefix)
		// Measured, never asserted (issue 18 asks for seconds).
		t.Logf("member %d under fault: the cache converged %v after the write", i, time.Since(start).Round(time.Millisecond))
		cluster.Heal(i)
	}
	requireConverged(t, inf, direct, prefix)
}

// TestClusterMemberFrozen freezes each member in turn, as SIGSTOP or a
// half-open connection would (connections open, no byte passes), while the
// others take writes: the informer's watch is on one of them, and its
// client's keepalives must notice and move it to another member, so that
// the cache converges with the member still frozen.
func TestClusterMemberFrozen(t *testing.T) {
	faultEach(t, (*harness.EtcdCluster).Freeze)
}

// TestClusterMemberIsolated cuts each member in turn off from its peers
// while the others take writes: the isolated member has no leader, so its
// RequireLeader watches end and its reads fail, and the informer must
// carry on through another member, converging before the member heals.
func TestClusterMemberIsolated(t *testing.T) {
	faultEach(t, (*harness.EtcdCluster).Isolate)
}
