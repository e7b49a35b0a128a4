package etcdinformer_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// A watch found silent on a frozen member (the cluster answering reads)
// is reopened, and the reopened watch leaves that member at once if its
// stream went there (the client balances each new stream round robin, so
// it used to land back on the frozen member, 1–3 s each time, until the
// silence showed again). With each member frozen in turn and several
// writes read through the informer while it is, the watch is found stuck
// on a frozen member at most once per freeze.
func TestReopenedWatchAvoidsFrozenMember(t *testing.T) {
	cluster := harness.StartEtcdCluster(t, 3)
	cfg := cluster.ClientConfig()
	cfg.Endpoints = cluster.ProxiedEndpoints()
	viaProxies, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = viaProxies.Close() })
	prefix := uniquePrefix("avoid")
	direct := cluster.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	if _, err := putItem(ctx, direct, prefix+"k", item{Version: 1}); err != nil {
		t.Fatal(err)
	}
	var stuck atomic.Int64
	inf, _ := informertest.Run(t, newLW(t, viaProxies, prefix, 0), core.InformerOptions[item]{
		Backoff: fastBackoff,
		ErrorHandler: func(err error) {
			if strings.Contains(err.Error(), "the member serving the watch is frozen") {
				stuck.Add(1)
			}
			t.Logf("%s informer: %v", time.Now().Format("15:04:05.000"), err)
		},
	})
	requireConverged(t, inf, direct, prefix)
	for i := range 3 {
		cluster.Freeze(i)
		c := others(t, cluster, i)
		before := stuck.Load()
		for n := range 4 {
			informertest.Eventually(t, fmt.Sprintf("write %d while member %d is frozen", n, i), func() bool {
				_, err := putItem(ctx, c, fmt.Sprintf("%sk%d", prefix, n), item{Version: 10*i + n})
				return err == nil
			})
			requireConverged(t, inf, c, prefix)
		}
		if n := stuck.Load() - before; n > 1 {
			t.Errorf("member %d frozen: the watch was found stuck on it %d times, want at most once (reopened watches must avoid it)", i, n)
		}
		cluster.Heal(i)
	}
	requireConverged(t, inf, direct, prefix)
}
