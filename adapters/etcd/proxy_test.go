package etcdinformer_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/internal/testkit/proxy"
)

// TestInformerSurvivesConnectionCut cuts the informer's connection to a
// running etcd while others keep writing: once it is back, the watch
// resumes and delivers exactly the writes made during the cut, without a
// relist.
func TestInformerSurvivesConnectionCut(t *testing.T) {
	srv := harness.StartEtcd(t)
	direct := srv.Client(t)
	u, err := url.Parse(srv.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	px, err := proxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	cfg := srv.ClientConfig()
	cfg.Endpoints = []string{"http://" + px.Addr()}
	viaProxy, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = viaProxy.Close() })

	prefix := uniquePrefix("cut")
	ctx, cancel := context.WithTimeout(context.Background(), 5*converge)
	defer cancel()
	for i := 0; i < 5; i++ {
		if _, err := putItem(ctx, direct, fmt.Sprintf("%sk%d", prefix, i), item{Version: 1}); err != nil {
			t.Fatal(err)
		}
	}
	spy := informertest.Wrap[item](newLW(t, viaProxy, prefix, 0))
	rec := informertest.NewRecorder(t, itemVersion)
	inf, _ := informertest.Run(t, spy, core.InformerOptions[item]{Backoff: fastBackoff}, rec)
	if _, err := putItem(ctx, direct, prefix+"k0", item{Version: 2}); err != nil {
		t.Fatal(err)
	}
	requireConverged(t, inf, direct, prefix)

	px.Pause()
	px.Cut()
	for i := 0; i < 5; i++ {
		if _, err := putItem(ctx, direct, fmt.Sprintf("%sk%d", prefix, i), item{Version: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := direct.Delete(ctx, prefix+"k4"); err != nil {
		t.Fatal(err)
	}
	if _, err := putItem(ctx, direct, prefix+"new", item{Version: 1}); err != nil {
		t.Fatal(err)
	}
	// The proxy refuses every connection until Resume, so nothing
	// written during the cut can have reached the cache.
	if got := cacheState(inf); got["k0"].Version != 2 {
		t.Fatalf("the cache saw k0 = %+v while the connection was cut: the proxy does not cut", got["k0"])
	}
	px.Resume()

	requireConverged(t, inf, direct, prefix)
	expectKey(t, rec, "k0", "add k0 v=1 initial", "update k0 1->2", "update k0 2->3")
	expectKey(t, rec, "k4", "add k4 v=1 initial", "update k4 1->3", "delete k4 v=3")
	expectKey(t, rec, "new", "add new v=1")
	if n := spy.Lists(); n != 1 {
		t.Fatalf("informer listed %d times, want 1", n)
	}
}
