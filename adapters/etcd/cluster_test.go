package etcdinformer_test

import (
	"context"
	"fmt"
	"strings"
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
	inf, _ := informertest.Run(t, newLW(t, viaProxies, prefix, 0), core.InformerOptions[item]{
		Backoff: fastBackoff,
		// What the informer reports says why it waited: logged with the
		// time, to read beside the convergence times below.
		ErrorHandler: func(err error) { t.Logf("%s informer: %v", time.Now().Format("15:04:05.000"), err) },
	})
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
		t.Logf("%s member %d under fault: written", start.Format("15:04:05.000"), i)
		requireConverged(t, inf, c, prefix)
		// Measured, never asserted (issue 18 asks for seconds).
		t.Logf("member %d under fault: the cache converged %v after the write", i, time.Since(start).Round(time.Millisecond))
		cluster.Heal(i)
	}
	requireConverged(t, inf, direct, prefix)
}

// TestClusterMemberFrozen freezes each member in turn, as SIGSTOP or a
// half-open connection would (connections open, no byte passes), while the
// others take writes: the informer's watch is on one of them, and must
// notice the silence (a progress request unanswered, the cluster answering
// a read) and be reopened on another member, so that the cache converges
// with the member still frozen. gRPC keepalives (10s at the least) would
// take 13s here.
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

// TestClusterIsolatedMemberNamesCause starts an informer whose client
// reaches only a member without a leader (every member cut off from its
// peers): its list is refused at
// once ("etcdserver: no leader", RequireLeader) instead of hanging in the
// client's retries, the refusal reaches the error handler and the sync
// status while it lasts, and WaitForCacheSyncTimeout's error names it.
// Once the member is back with its cluster, the informer syncs.
func TestClusterIsolatedMemberNamesCause(t *testing.T) {
	cluster := harness.StartEtcdCluster(t, 3)
	direct := cluster.Client(t)
	prefix := uniquePrefix("isolated")
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	if _, err := putItem(ctx, direct, prefix+"k", item{Version: 1}); err != nil {
		t.Fatal(err)
	}
	// Every member cut off from its peers: member 0 answers its clients
	// but has no leader. (Isolate cuts a member's inbound peer traffic
	// only; the member still reaches its peers through their ports, which
	// is enough for it to keep a leader.)
	for i := range 3 {
		cluster.Isolate(i)
	}
	cfg := cluster.ClientConfig()
	cfg.Endpoints = cfg.Endpoints[:1]
	only0, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = only0.Close() })
	informertest.Eventually(t, "member 0 to lose its leader", func() bool {
		// Long enough for the client's own retries of "no leader" (100,
		// 25ms apart) to end on a loaded machine and return it.
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := only0.Get(clientv3.WithRequireLeader(rctx), prefix+"k")
		if err == nil || !strings.Contains(err.Error(), "no leader") {
			t.Logf("member 0 still answers a read that requires a leader with %v", err)
			return false
		}
		return true
	})

	// Not informertest.Run, which waits for the sync.
	errs := &informertest.Errors{}
	inf := core.NewSharedIndexInformer(newLW(t, only0, prefix, 0), core.InformerOptions[item]{Backoff: fastBackoff, ErrorHandler: errs.Add})
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = inf.Run(runCtx) }()
	defer func() { stop(); <-done }()
	informertest.Eventually(t, "the sync status to name the missing leader", func() bool {
		return strings.Contains(inf.SyncStatus().String(), "etcdserver: no leader")
	})
	if errs.Find(func(err error) bool { return strings.Contains(err.Error(), "etcdserver: no leader") }) == nil {
		t.Errorf("the error handler got %v, none naming the missing leader", errs.All())
	}
	err = core.WaitForCacheSyncTimeout(ctx, 100*time.Millisecond, inf)
	if err == nil || !strings.Contains(err.Error(), "etcdserver: no leader") {
		t.Errorf("WaitForCacheSyncTimeout = %v, want an error naming etcdserver: no leader", err)
	}
	t.Logf("sync status while isolated: %s", inf.SyncStatus())

	for i := range 3 {
		cluster.Heal(i)
	}
	requireConverged(t, inf, direct, prefix)
}
