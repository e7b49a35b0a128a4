package relay_test

import (
	"context"
	"testing"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
)

// A row written before the relay ever ran reaches downstreams in the
// relay's first relist, published at the list's version: WaitFor of the
// write's own (earlier) version must not return before it is applied.
func TestRelistBeforeWaitFor(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	src := pgtest.New(t, pg, pgtest.Options{})
	ctx := context.Background()
	rv, _ := src.Put(ctx, "a", 1)
	js := nsrv.JetStream(t)
	if _, err := js.CreateStream(ctx, relay.StreamConfig("S", "s")); err != nil {
		t.Fatal(err)
	}
	down, err := relay.NewDownstream[pgtest.Row](ctx, js, "S", "s", relay.DownstreamOptions[pgtest.Row]{})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run(t, down, core.InformerOptions[pgtest.Row]{Name: "d"})
	el, _ := leader.NewPostgres(pg.ConnString(), "x", leader.PostgresOptions{})
	r, _ := relay.New(ctx, js, src.ListerWatcher(), relay.Options[pgtest.Row]{Stream: "S", Prefix: "s", Elector: el})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()
	informertest.WaitFor(t, inf, rv)
	if got, ok := inf.Indexer().Get("a"); !ok || got.V != 1 {
		t.Fatalf("after WaitFor(%d) (applied %d) the cache holds a=%v (present %v), want the row written before the relay started", rv, inf.AppliedVersion(), got, ok)
	}
}
