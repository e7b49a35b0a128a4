package relay_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/relay"
)

// A relist whose source lists at the very version the stream ends at: a
// source whose List answers its current revision (an etcd prefix; the
// memory source here) when nothing was written since the stream's last
// change. A deposed term's late write cost a change and the shape of its
// late writes makes the new leader relist; the downstream already read
// the late write and confirmed its version, so a relist's group at that
// version would look delivered to it, and it would never get the lost
// change. The group waits for the source's next version instead and
// carries its changes too: the downstream ends with the source.
func TestRelistAtTheStreamsVersion(t *testing.T) {
	nsrv := harness.StartNATS(t)
	ctx := context.Background()
	js := nsrv.JetStream(t)
	stream, err := js.CreateStream(ctx, relay.StreamConfig("V", "v"))
	if err != nil {
		t.Fatal(err)
	}
	src := memory.New[int](memory.Options{})
	down, err := relay.NewDownstream[int](ctx, js, "V", "v", relay.DownstreamOptions[int]{})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run(t, down, core.InformerOptions[int]{Name: "down"})
	lead := func(epoch uint64, log *slog.Logger) (*relay.Relay[int], context.CancelFunc, chan error) {
		r, err := relay.New(ctx, js, src, relay.Options[int]{Stream: "V", Prefix: "v", Elector: fixedElector{epoch}, Logger: log, ProgressInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		return r, cancel, done
	}

	// The first leader relays a few writes; its last message is key a's.
	rA, cancelA, doneA := lead(1, nil)
	informertest.Eventually(t, "the first leader relists the empty source", func() bool { return rA.Relists() > 0 })
	for i := range 5 {
		src.Put("k"+strconv.Itoa(i), i)
	}
	informertest.WaitFor(t, inf, src.Put("a", 1))
	cancelA()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	m, f := lastMessage(t, stream)
	top := m.Sequence
	if m.Subject != relay.KeySubject("v", "a") || len(f) < 7 || f[6] != "commit" {
		t.Fatalf("the first leader's last message (sequence %d) is %s %v, not key a's whole group", top, m.Subject, f)
	}

	// The deposed leader's writes: the lost change, then a late write of
	// key a, which supersedes its message before the intruder (nothing
	// proves where the source was acknowledged to: the new leader
	// relists). Nothing is written after them.
	lost := src.Put("lost", 5)
	late := src.Put("a", 7)
	publish := func(m *nats.Msg, after uint64) {
		t.Helper()
		if _, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(after)); err != nil {
			t.Fatal(err)
		}
	}
	intruder := nats.NewMsg("v.progress")
	intruder.Header.Set("Dbi", f[0]+" "+f[0]+" 2")
	publish(intruder, top)
	lateMsg := nats.NewMsg(relay.KeySubject("v", "a"))
	lateMsg.Header.Set("Dbi", strconv.FormatUint(uint64(late), 10)+" "+strconv.FormatUint(uint64(lost), 10)+" 1 put 0 1 commit")
	lateMsg.Data = []byte("7")
	publish(lateMsg, top+1)
	informertest.WaitFor(t, inf, late)
	if _, ok := inf.Indexer().Get("lost"); ok {
		t.Fatal("the downstream holds the lost change before the relist: the test lost nothing")
	}

	logged := &flagHandler{want: "late write of an earlier term; relisting", t: t}
	rB, cancelB, doneB := lead(3, slog.New(logged))
	defer func() {
		cancelB()
		if err := <-doneB; err != nil {
			t.Error(err)
		}
	}()
	informertest.Eventually(t, "the new leader relists", func() bool { return logged.seen.Load() })
	after := src.Put("after", 1)
	informertest.Eventually(t, "the new leader counts its relist", func() bool { return rB.Relists() > 0 })
	informertest.WaitFor(t, inf, after)
	items, _ := src.Items()
	got := map[string]int{}
	for _, k := range inf.Indexer().ListKeys() {
		got[k], _ = inf.Indexer().Get(k)
	}
	if len(got) != len(items) {
		t.Errorf("the downstream holds %d keys, the source %d", len(got), len(items))
	}
	for k, v := range items {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("key %s: downstream %d (present %v), source %d", k, g, ok, v)
		}
	}
}
