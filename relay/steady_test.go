package relay_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
)

// A downstream behind a source whose writes never pause, on keys so busy
// that nearly every group it reads has lost a message: it catches up
// while the writes go on, its informer applying as it reads, rather than
// waiting for them to stop (the catch-up's target used to move with the
// stream's head, so that it ended only once the writes did). Each key's
// versions only grow, and the cache ends equal to the source, with one
// list.
func TestCatchUpUnderSteadyWrites(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	src := pgtest.New(t, pg, pgtest.Options{})
	ctx := context.Background()
	js := nsrv.JetStream(t)
	if _, err := js.CreateStream(ctx, relay.StreamConfig("S", "s")); err != nil {
		t.Fatal(err)
	}
	el, err := leader.NewPostgres(pg.ConnString(), "steady", leader.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(ctx, js, src.ListerWatcher(), relay.Options[pgtest.Row]{Stream: "S", Prefix: "s", Elector: el})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()

	behind := &flagHandler{want: "catching up", count: "deliveries"}
	down, err := relay.NewDownstream[pgtest.Row](ctx, nsrv.JetStream(t), "S", "s", relay.DownstreamOptions[pgtest.Row]{Logger: slog.New(behind)})
	if err != nil {
		t.Fatal(err)
	}
	g := &heldDown{Downstream: down}
	rec := informertest.NewRecorder(t, src.Version)
	inf, _ := informertest.Run(t, g, core.InformerOptions[pgtest.Row]{Name: "steady"}, rec)
	start, err := src.Put(ctx, "start", 1)
	if err != nil {
		t.Fatal(err)
	}
	informertest.WaitFor(t, inf, start)

	// A writer that never pauses until the test is done: every
	// transaction rewrites the same three keys, with a growing value.
	hot := []string{"h0", "h1", "h2"}
	var (
		written  atomic.Uint64 // version of the last write
		n        atomic.Int64  // writes done
		wg       sync.WaitGroup
		writeErr atomic.Pointer[error]
	)
	// Stopped by a flag, not by cancelling a write: a cancelled commit
	// may still land after the writer has returned.
	var stopping atomic.Bool
	wg.Go(func() {
		for i := int64(1); !stopping.Load(); i++ {
			v, err := src.PutAll(ctx, hot, i)
			if err != nil {
				writeErr.Store(&err)
				return
			}
			written.Store(uint64(v))
			n.Store(i)
		}
	})
	stopWriter := sync.OnceFunc(func() { stopping.Store(true); wg.Wait() })
	defer stopWriter()

	// Hold the watch until the writer has rewritten the keys far more
	// often than the watch buffers, then let it go slowly (each batch
	// waits a little), so that it stays behind the busy keys.
	release := make(chan struct{})
	g.hold.Store(&release)
	for n.Load() < 300 && writeErr.Load() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	g.hold.Store(nil)
	g.slow.Store(true)
	close(release)

	// While the writer goes on, the informer confirms versions written
	// after the hold: several times, each later than the one before.
	var last core.ResourceVersion
	var behindBy []int64 // writes done between taking v and its confirmation: for the log
	for range 5 {
		for core.ResourceVersion(written.Load()) <= last && writeErr.Load() == nil {
			time.Sleep(time.Millisecond) // the writer's next commit
		}
		v, at := core.ResourceVersion(written.Load()), n.Load()
		informertest.WaitFor(t, inf, v)
		last = v
		behindBy = append(behindBy, n.Load()-at)
	}
	writing := n.Load()
	stopWriter()
	if err := writeErr.Load(); err != nil {
		t.Fatal(*err)
	}
	if !behind.seen.Load() {
		t.Error("the downstream never fell behind the busy keys: the test did not exercise a catch-up")
	}
	t.Logf("confirmed 5 versions while the writer went on (%d transactions; writes done while each was awaited: %v; most confirmations in one catch-up: %d)", writing, behindBy, behind.most.Load())

	final, err := src.Put(ctx, "end", 1)
	if err != nil {
		t.Fatal(err)
	}
	g.slow.Store(false)
	informertest.WaitFor(t, inf, final)
	truth, err := src.Truth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, row := range inf.Indexer().List() {
		got[row.K] = row.V
	}
	if len(got) != len(truth) {
		t.Errorf("the cache holds %d keys, the source %d", len(got), len(truth))
	}
	for k, v := range truth {
		if got[k] != v {
			t.Errorf("key %s: cache %d, source %d", k, got[k], v)
		}
	}
	if n := g.lists.Load(); n != 1 {
		t.Errorf("the informer listed %d times, want once (its first list): it relisted instead of catching up", n)
	}
}
