package relay_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/relay"
)

// A deposed leader's pipelined message lands behind messages of the
// current term, not right behind its first: a frozen leader, thawed once
// the new term had published that many, sends its queued publishes, and
// one finds the stream at the length it expected. The current term's own
// message for that sequence is refused, and with it the change it
// carried. Either the late write stays in the stream, behind this term's
// messages, or the term's next pipelined message, expecting the stream to
// end at the late write's sequence, is stored after it (a broken chain).
// In both, every change
// the stream may lack is one the term sent after the last version it
// acknowledged the source at, so the next attempt repairs the stream from
// there: no List, no relist, and the downstream that read the late write
// (and confirmed a version past the lost change) gets the lost change.
// Both downstreams end with the table.
func TestLateWriteBehindTerm(t *testing.T) {
	t.Run("behind this term's messages: repair", func(t *testing.T) { lateBehind(t, false) })
	t.Run("broken chain: repair", func(t *testing.T) { lateBehind(t, true) })
}

func lateBehind(t *testing.T, broken bool) {
	env := newLateEnv(t, "relay_behind")
	h, js, stream, inf, put := env.h, env.js, env.stream, env.inf, env.put
	ctx := context.Background()

	gate := &gateSource{ListerWatcher: h.ListerWatcher(), tokens: make(chan struct{}, 1), opened: make(chan struct{})}
	lw := &countLists{ListerWatcher: gate}
	logs := &recordHandler{t: t}
	r, stop := env.run(lw, 2, slog.New(logs))
	defer stop()

	// The term relists the empty table, then relays a few writes: the
	// stream ends with a message of this term that is not its first.
	informertest.Eventually(t, "the leader relists", func() bool { return r.Relists() > 0 })
	for i := range 5 {
		put("a"+strconv.Itoa(i), int64(i))
	}
	before := put("a", 100)
	informertest.WaitFor(t, inf, core.ResourceVersion(before))
	m, f := lastMessage(t, stream)
	if m.Subject == "l.term" || len(f) < 3 || f[2] != "2" {
		t.Fatalf("the stream ends with %s %v, not a message of the term after its first", m.Subject, f)
	}
	top := m.Sequence
	lists, relists := lw.lists.Load(), r.Relists()

	// The term's next changes wait at the gate: "lost", and "late", which
	// the deposed leader (epoch 1) relayed too. With a broken chain they
	// are one transaction, one group sent back to back, "refused" and
	// "stored": the first is refused, the second stored behind the late
	// write, which was of the same key and which it supersedes.
	gate.on.Store(true)
	lateKey := "late"
	var late, prev uint64
	if broken {
		lateKey = "stored"
		v, err := h.PutAll(ctx, []string{"refused", "stored"}, 7)
		if err != nil {
			t.Fatal(err)
		}
		late, prev = uint64(v), before
	} else {
		prev = put("lost", 5)
		late = put("late", 7)
	}
	data, err := json.Marshal(pgtest.Row{K: lateKey, V: 7})
	if err != nil {
		t.Fatal(err)
	}
	lateMsg := nats.NewMsg(relay.KeySubject("l", lateKey))
	lateMsg.Header.Set("Dbi", strconv.FormatUint(late, 10)+" "+strconv.FormatUint(prev, 10)+" 1 put 0 1 commit")
	lateMsg.Data = data
	ack, err := js.PublishMsg(ctx, lateMsg, jetstream.WithExpectLastSequence(top))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Sequence != top+1 {
		t.Fatalf("the late write was stored at %d, not %d", ack.Sequence, top+1)
	}
	// The downstream reads the late write.
	informertest.Eventually(t, "the downstream reads the late write", func() bool {
		got, ok := inf.Indexer().Get(lateKey)
		return ok && got.V == 7
	})
	// One version through: its message is refused, the attempt ends, and
	// the next one (a second Watch) finds the stream as the fault left it.
	gate.tokens <- struct{}{}
	informertest.Eventually(t, "the term's next attempt watches the source", func() bool { return gate.watches.Load() >= 2 })
	_, lateErr := stream.GetMsg(ctx, top+1)
	next, err := stream.GetMsg(ctx, top+2)
	switch {
	case broken && (lateErr == nil || err != nil || next.Subject != relay.KeySubject("l", "stored") || !strings.HasSuffix(strings.Fields(next.Header.Get("Dbi"))[2], "2")):
		t.Fatalf("the late write is there (%v), or the message behind it is not the term's of key stored (%v, %v): the chain did not break as the test means", lateErr, next, err)
	case !broken && (lateErr != nil || (err == nil && next.Subject != "l.term")):
		t.Fatalf("the late write is gone (%v), or a message of the term after it is not the next attempt's first: %v", lateErr, next.Subject)
	}
	close(gate.opened)

	after := put("after", 1)
	informertest.WaitFor(t, inf, core.ResourceVersion(after))
	stop()
	if n := lw.lists.Load() - lists; n != 0 {
		t.Errorf("the leader listed the table %d more times, want 0", n)
	}
	if n := r.Relists() - relists; n != 0 {
		t.Errorf("the leader published %d more relists, want 0", n)
	}
	if n := r.RelayStatus(ctx).Repairs; n != 1 {
		t.Errorf("the leader's status counts %d repairs, want 1", n)
	}
	want := []string{"late write of an earlier term behind this term's messages; repairing", "repaired a late write of an earlier term from the source (no relist)"}
	if broken {
		want = []string{"message stored after one that failed", "repaired a broken chain from the source (no relist)"}
	}
	for _, w := range want {
		if !logs.seen(w) {
			t.Errorf("the leader did not log %q", w)
		}
	}

	sameAsTable(t, js, h, inf, after)
}

// gateSource holds a source's changes while on: each version with a
// change waits for a token (or for the gate to open, or the watch to
// end), so that a test lets the relay publish exactly one version and
// holds the next. A batch is passed on version by version.
type gateSource struct {
	driver.ListerWatcher[pgtest.Row]
	on      atomic.Bool
	tokens  chan struct{}
	opened  chan struct{}
	watches atomic.Int64
}

func (g *gateSource) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[pgtest.Row]) error {
	g.watches.Add(1)
	emit := opts.Emit
	opts.Emit = func(batch []driver.Event[pgtest.Row]) error {
		for i := 0; i < len(batch); {
			j := i
			changes := false
			for ; j < len(batch) && batch[j].RV == batch[i].RV; j++ {
				changes = changes || batch[j].Type != driver.Bookmark
			}
			if changes && g.on.Load() {
				select {
				case <-g.tokens:
				case <-g.opened:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if err := emit(batch[i:j]); err != nil {
				return err
			}
			i = j
		}
		return nil
	}
	return g.ListerWatcher.Watch(ctx, from, opts)
}

// recordHandler keeps every log message (and logs it to t).
type recordHandler struct {
	t    testing.TB
	mu   sync.Mutex
	msgs []string
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	h.t.Logf("%s %s%s", r.Level, r.Message, b.String())
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// seen reports whether a message containing s was logged.
func (h *recordHandler) seen(s string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(h.msgs, func(m string) bool { return strings.Contains(m, s) })
}
