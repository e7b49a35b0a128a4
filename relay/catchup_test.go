package relay_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
)

// A downstream that falls behind while keys are rewritten finds groups
// whose messages later changes of the same keys removed (the stream keeps
// one per key). It reads on to a consistent point and delivers the keys'
// last changes there instead of relisting, and its cache ends equal to the
// source.
func TestCatchUpInsteadOfRelist(t *testing.T) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	src := pgtest.New(t, pg, pgtest.Options{})
	ctx := context.Background()
	js := nsrv.JetStream(t)
	if _, err := js.CreateStream(ctx, relay.StreamConfig("C", "c")); err != nil {
		t.Fatal(err)
	}
	el, err := leader.NewPostgres(pg.ConnString(), "catchup", leader.PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(ctx, js, src.ListerWatcher(), relay.Options[pgtest.Row]{Stream: "C", Prefix: "c", Elector: el})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()

	caught := &flagHandler{want: "caught up over superseded messages"}
	down, err := relay.NewDownstream[pgtest.Row](ctx, nsrv.JetStream(t), "C", "c", relay.DownstreamOptions[pgtest.Row]{Logger: slog.New(caught)})
	if err != nil {
		t.Fatal(err)
	}
	g := &heldDown{Downstream: down}
	inf, _ := informertest.Run(t, g, core.InformerOptions[pgtest.Row]{Name: "held"})
	must := func(rv core.ResourceVersion, err error) core.ResourceVersion {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return rv
	}
	informertest.WaitFor(t, inf, must(src.Put(ctx, "start", 1)))

	// Hold the informer's watch while 40 transactions rewrite the same
	// 50 keys: far more messages than the watch buffers, so that most of
	// them are removed before it reads them.
	release := make(chan struct{})
	g.hold.Store(&release)
	keys := make([]string, 50)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	for n := range 40 {
		must(src.PutAll(ctx, keys, int64(n)))
	}
	must(src.Delete(ctx, "k3"))
	last := must(src.PutAll(ctx, keys[:2], 1000))
	g.hold.Store(nil)
	close(release)
	informertest.WaitFor(t, inf, last)

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
	if _, ok := got["k3"]; ok {
		t.Error("k3 was deleted at the source but the cache holds it")
	}
	if !caught.seen.Load() {
		t.Error("the downstream never caught up over superseded messages: the test did not make its watch miss any")
	}
	if n := g.lists.Load(); n != 1 {
		t.Errorf("the informer listed %d times, want once (its first list): it relisted instead of catching up", n)
	}
}

// heldDown holds its watches' Emit while hold is set, and counts Lists.
type heldDown struct {
	*relay.Downstream[pgtest.Row]
	hold  atomic.Pointer[chan struct{}]
	slow  atomic.Bool // each batch waits a little before it is applied
	lists atomic.Int64
}

func (d *heldDown) List(ctx context.Context, sink driver.ListSink[pgtest.Row]) (core.ResourceVersion, error) {
	d.lists.Add(1)
	return d.Downstream.List(ctx, sink)
}

func (d *heldDown) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[pgtest.Row]) error {
	emit := opts.Emit
	opts.Emit = func(b []driver.Event[pgtest.Row]) error {
		if h := d.hold.Load(); h != nil {
			select {
			case <-*h:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if d.slow.Load() {
			// Load shaping, not a timed assertion: it keeps the watch
			// behind a writer that never pauses.
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return emit(b)
	}
	return d.Downstream.Watch(ctx, from, opts)
}

// flagHandler is a slog.Handler that notes a record whose message
// contains want.
type flagHandler struct {
	want string
	seen atomic.Bool
	// count names an integer attribute whose largest value is kept in most.
	count string
	most  atomic.Int64
	// t, when set, gets every record, so a failing test shows the log.
	t testing.TB
}

func (h *flagHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *flagHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.want) {
		h.seen.Store(true)
	}
	if h.t != nil {
		var b strings.Builder
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		h.t.Logf("%s %s%s", r.Level, r.Message, b.String())
	}
	if h.count != "" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == h.count && a.Value.Kind() == slog.KindInt64 && a.Value.Int64() > h.most.Load() {
				h.most.Store(a.Value.Int64())
			}
			return true
		})
	}
	return nil
}
func (h *flagHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *flagHandler) WithGroup(string) slog.Handler      { return h }
