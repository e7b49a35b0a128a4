package etcdinformer_test

import (
	"context"
	"testing"
	"time"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// The only member an informer uses is killed and restarted. While it is
// down, a read fails with "context deadline exceeded" (the client retries
// the refused connection until its deadline), not "connection refused";
// once it is back, the first read of WaitHealed succeeds at once. That is
// still a heal: WaitHealed returns nil, and the informer's backoff sleep
// is cut short (it used to answer "not down" and let the sleep run out).
// Once taken, the heal is not granted again: the next WaitHealed without
// a new failure answers "not down".
func TestRestartedMemberCutsBackoffShort(t *testing.T) {
	e := harness.StartEtcd(t)
	c := e.Client(t)
	lw, err := etcdinformer.NewPrefix(context.Background(), c, "/r", etcdinformer.Options[item]{})
	if err != nil {
		t.Fatal(err)
	}
	var hw driver.HealWaiter = lw
	ctx := context.Background()
	if err := hw.WaitHealed(ctx); err == nil {
		t.Fatal("WaitHealed with etcd up and no failure before: nil, want an error saying it was not down")
	}

	e.Stop()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = lw.Head(rctx)
	cancel()
	if err == nil {
		t.Fatal("Head with the only member stopped: no error")
	}
	t.Logf("read while the member is down: %v", err)
	e.Restart(t)
	// The first read after the restart may still fail while the client
	// reconnects: either way WaitHealed must report the heal.
	if err := hw.WaitHealed(ctx); err != nil {
		t.Fatalf("WaitHealed after the only member restarted: %v, want nil (a heal)", err)
	}
	if err := hw.WaitHealed(ctx); err == nil {
		t.Error("WaitHealed again with no failure since the heal: nil, want an error saying it was not down")
	}
}

// An informer over the only member, which is killed and restarted while
// the informer watches: its cache catches up with a write made after the
// restart.
func TestInformerOverRestartedMember(t *testing.T) {
	e := harness.StartEtcd(t)
	c := e.Client(t)
	ctx := context.Background()
	if _, err := putItem(ctx, c, "/s/a", item{Version: 1}); err != nil {
		t.Fatal(err)
	}
	lw, err := etcdinformer.NewPrefix(ctx, c, "/s/", etcdinformer.Options[item]{})
	if err != nil {
		t.Fatal(err)
	}
	inf, errs := informertest.Run(t, lw, core.InformerOptions[item]{})
	e.Stop()
	informertest.Eventually(t, "the informer to report the member down", func() bool { return len(errs.All()) > 0 })
	start := time.Now()
	e.Restart(t)
	rv, err := putItem(ctx, c, "/s/b", item{Version: 2})
	if err != nil {
		t.Fatal(err)
	}
	informertest.WaitFor(t, inf, rv)
	t.Logf("caught up %v after the restart began (errors while down: %v)", time.Since(start), errs.All())
}
