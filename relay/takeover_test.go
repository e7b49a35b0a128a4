package relay_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
)

// A new leader — another process, whose Source never listed the table —
// resumes the table from the stream's last version over the permanent
// slot (the table's Restore) instead of relisting it: no List, so no
// temporary slot and no COPY, and the changes written while no relay ran
// still reach downstreams, from the slot.
func TestTakeoverResumesFromSlot(t *testing.T) {
	t.Run("slot holds the changes", func(t *testing.T) { takeover(t, false, false) })
	// A slot that lost them (dropped meanwhile): the new leader relists,
	// and says why.
	t.Run("slot lost", func(t *testing.T) { takeover(t, true, false) })
	// The old leader's process still holds the slot (frozen, or its
	// Source still open): its walsender is terminated once the new term's
	// first message fenced it, instead of waiting for the server's
	// wal_sender_timeout.
	t.Run("stale walsender", func(t *testing.T) { takeover(t, false, true) })
}

func takeover(t *testing.T, lost, stale bool) {
	nsrv := harness.StartNATS(t)
	pg := harness.StartPostgres(t)
	h := pgtest.New(t, pg, pgtest.Options{Slot: "relay_takeover"})
	ctx := context.Background()
	js := nsrv.JetStream(t)
	if _, err := js.CreateStream(ctx, relay.StreamConfig("T", "t")); err != nil {
		t.Fatal(err)
	}
	down, err := relay.NewDownstream[pgtest.Row](ctx, js, "T", "t", relay.DownstreamOptions[pgtest.Row]{})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run(t, down, core.InformerOptions[pgtest.Row]{Name: "down"}, informertest.NewRecorder(t, h.Version))
	run := func(lw driver.ListerWatcher[pgtest.Row], log *slog.Logger, met relay.Metrics) (*relay.Relay[pgtest.Row], func()) {
		el, err := leader.NewPostgres(pg.ConnString(), "takeover", leader.PostgresOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := relay.New(ctx, js, lw, relay.Options[pgtest.Row]{Stream: "T", Prefix: "t", Elector: el, Logger: log, Metrics: met})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		return r, sync.OnceFunc(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	put := func(key string, n int64) core.ResourceVersion {
		t.Helper()
		rv, err := h.Put(ctx, key, n)
		if err != nil {
			t.Fatal(err)
		}
		return rv
	}

	// The first leader relays a few writes, then its process ends.
	_, stopA := run(h.ListerWatcher(), nil, nil)
	for i := range 20 {
		put("a"+string(rune('a'+i)), int64(i))
	}
	informertest.WaitFor(t, inf, put("a", 100))
	stopA()
	if stale {
		var active bool
		if err := pg.Conn(t).QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = 'relay_takeover'").Scan(&active); err != nil {
			t.Fatal(err)
		}
		if !active {
			t.Fatal("the old leader's Source does not hold the slot: the test needs a walsender to take over from")
		}
	} else if err := h.Source().Close(); err != nil {
		t.Fatal(err)
	}

	if lost {
		if err := pgtest.DropSlot(ctx, pg.ConnString(), "relay_takeover"); err != nil {
			t.Fatal(err)
		}
	}
	// Written while no relay runs: only the slot holds it.
	put("a", 101)
	put("gap", 1)

	// The new leader: a Source of its own over the same permanent slot.
	srcB, err := pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{PermanentSlot: true, Slot: "relay_takeover"})
	if err != nil {
		t.Fatal(err)
	}
	defer srcB.Close()
	tableB, err := pginformer.NewTable[pgtest.Row](ctx, srcB, h.TableName(), pginformer.TableOptions[pgtest.Row]{})
	if err != nil {
		t.Fatal(err)
	}
	lw := &countLists{ListerWatcher: tableB}
	want := "resumes the source from the stream's last version"
	if lost {
		want = "cannot resume the source from the stream's last version"
	}
	resumed := &flagHandler{want: want, t: t}
	met := &countMetrics{}
	rB, stopB := run(lw, slog.New(resumed), met)
	defer stopB()
	informertest.WaitFor(t, inf, put("after", 1))
	wantLists := int64(0)
	if lost {
		wantLists = 1
		// The relist's List may have read "after" already: the downstream
		// then has it before the relay counts the relist, which it does
		// once the stream has stored the whole group.
		informertest.Eventually(t, "the new leader counts its relist", func() bool { return met.relisted.Load() > 0 })
	}
	stopB() // its counts are final
	if n := lw.lists.Load(); n != wantLists {
		t.Errorf("the new leader listed the table %d times, want %d (each List is a temporary slot and a COPY)", n, wantLists)
	}
	if n := rB.Relists(); n != uint64(wantLists) {
		t.Errorf("the new leader published %d relists, want %d", n, wantLists)
	}
	if met.leading.Load() != 1 || met.relisted.Load() != wantLists || met.stored.Load() == 0 {
		t.Errorf("metrics: led %d times, %d relists, %d stored versions; want 1, %d, some", met.leading.Load(), met.relisted.Load(), met.stored.Load(), wantLists)
	}
	if !resumed.seen.Load() {
		t.Errorf("the new leader did not log %q", want)
	}
	var slots, temporary int
	if err := pg.Conn(t).QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE temporary) FROM pg_replication_slots").Scan(&slots, &temporary); err != nil {
		t.Fatal(err)
	}
	if slots != 1 || temporary != 0 {
		t.Errorf("the server holds %d replication slots (%d temporary), want only the permanent one", slots, temporary)
	}
	truth, err := h.Truth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, row := range inf.Indexer().List() {
		got[row.K] = row.V
	}
	if len(got) != len(truth) {
		t.Errorf("the cache holds %d keys, the table %d", len(got), len(truth))
	}
	for k, v := range truth {
		if got[k] != v {
			t.Errorf("key %s: cache %d, table %d", k, got[k], v)
		}
	}
}

// countLists is a Postgres table whose Lists are counted. It embeds the
// interface, as a wrapper is written by default: its other capabilities
// (Restore, the acknowledgement gate) are found only through
// driver.Capability.
type countLists struct {
	driver.ListerWatcher[pgtest.Row]
	lists atomic.Int64
}

func (c *countLists) List(ctx context.Context, sink driver.ListSink[pgtest.Row]) (core.ResourceVersion, error) {
	c.lists.Add(1)
	return c.ListerWatcher.List(ctx, sink)
}

// countMetrics counts a relay's metrics calls.
type countMetrics struct {
	relay.NoopMetrics
	leading, relisted, stored atomic.Int64
}

func (m *countMetrics) Leading(on bool, _ uint64) {
	if on {
		m.leading.Add(1)
	}
}
func (m *countMetrics) Relisted(int, int)           { m.relisted.Add(1) }
func (m *countMetrics) Stored(core.ResourceVersion) { m.stored.Add(1) }
