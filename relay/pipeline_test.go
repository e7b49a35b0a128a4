package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/leader"
	"github.com/dbinformer/dbinformer/relay"
)

// fixedElector grants one term of a fixed epoch at once: these tests are
// about the publish pipeline, not the election.
type fixedElector struct{ epoch uint64 }

func (e fixedElector) Run(ctx context.Context, lead func(context.Context, leader.Term) error) error {
	err := lead(ctx, leader.Term{Epoch: e.epoch, Identity: "fixed"})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// ackSource is an in-memory source that acknowledges positions the way
// the Postgres slot does (driver.DurableAcknowledger): it records every
// acknowledgement and checks it against the stream.
type ackSource struct {
	*memory.Source[int]
	check func(v core.ResourceVersion) error

	mu    sync.Mutex
	gated bool
	last  core.ResourceVersion
	bad   []error
}

func (s *ackSource) GateAcknowledgements(gated bool) {
	s.mu.Lock()
	s.gated = gated
	s.mu.Unlock()
}

func (s *ackSource) AcknowledgeDurable(v core.ResourceVersion) {
	err := s.check(v)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.bad = append(s.bad, err)
	}
	if !s.gated {
		s.bad = append(s.bad, fmt.Errorf("acknowledged %d before the relay gated the source's acknowledgements: until then the source acknowledges what Emit took, whether JetStream stored it or not", v))
	}
	if v < s.last {
		s.bad = append(s.bad, fmt.Errorf("acknowledged %d after %d", v, s.last))
	}
	s.last = max(s.last, v)
}

// committedIn returns the source version the stream holds completely: that
// of its last message if it ends a group or is progress, else the group
// before it (the prev field).
func committedIn(ctx context.Context, st jetstream.Stream, prefix string) (uint64, error) {
	m, err := st.GetLastMsgForSubject(ctx, prefix+".>")
	if err != nil {
		return 0, err
	}
	// Dbi: <version> <prev> <epoch>[ <op> <index> <count>[ flags]]
	f := strings.Fields(m.Header.Get("Dbi"))
	if len(f) < 3 {
		return 0, fmt.Errorf("the stream's last message (%s) has no relay header: %v", m.Subject, m.Header)
	}
	n := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
	if m.Subject == prefix+".progress" || m.Subject == prefix+".term" || (len(f) >= 6 && n(4)+1 == n(5)) {
		return n(0), nil
	}
	return n(1), nil
}

// With many changes in flight, the source is acknowledged (gated first)
// up to a version only once the stream holds every change up to it, and
// up to the last; the downstream cache still ends equal to the source.
func TestPipelineAcknowledgesSourceAfterJetStream(t *testing.T) {
	nsrv := harness.StartNATS(t)
	js := nsrv.JetStream(t)
	ctx := context.Background()
	stream, err := js.CreateStream(ctx, relay.StreamConfig("P", "p"))
	if err != nil {
		t.Fatal(err)
	}
	src := &ackSource{Source: memory.New[int](memory.Options{MaxBatch: 50})}
	src.check = func(v core.ResourceVersion) error {
		c, err := committedIn(ctx, stream, "p")
		if err != nil {
			return fmt.Errorf("acknowledged %d: read the stream: %v", v, err)
		}
		if c < uint64(v) {
			return fmt.Errorf("acknowledged %d while the stream holds only up to %d", v, c)
		}
		return nil
	}
	r, err := relay.New[int](ctx, js, src, relay.Options[int]{Stream: "P", Prefix: "p", Elector: fixedElector{1}, MaxInFlight: 16, ProgressInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	down, err := relay.NewDownstream[int](ctx, js, "P", "p", relay.DownstreamOptions[int]{})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run(t, down, core.InformerOptions[int]{Name: "down"})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()

	var last core.ResourceVersion
	for i := range 500 {
		ops := make([]memory.Op[int], 0, 5)
		for j := range 5 {
			ops = append(ops, memory.PutOp("k"+strconv.Itoa((i*5+j)%300), i))
		}
		if i%7 == 0 {
			// A key outside this transaction's five.
			ops = append(ops, memory.DeleteOp[int]("k"+strconv.Itoa((i*5+5)%300)))
		}
		if last, err = src.Apply(ops...); err != nil {
			t.Fatal(err)
		}
	}
	informertest.WaitFor(t, inf, last)
	want, _ := src.Items()
	got := map[string]int{}
	for _, k := range inf.Indexer().ListKeys() {
		got[k], _ = inf.Indexer().Get(k)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("downstream cache after WaitFor(%d):\n%v\nwant the source's:\n%v", last, got, want)
	}
	// The acknowledgement of the last version follows its store.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		src.mu.Lock()
		acked := src.last
		src.mu.Unlock()
		if acked >= last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source was acknowledged up to %d, not up to %d, which the downstream applied a minute ago", acked, last)
		}
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	for _, err := range src.bad {
		t.Error(err)
	}
}

// A message another writer slips into the stream while the relay has
// changes in flight fences the relay: at most what it had in flight lands
// after it (each message expects the stream to end at the sequence before
// its own, so one that expected the foreign message's sequence is stored
// behind it: see the pipeline), and, finding the later epoch, the relay
// stops publishing. On a replicated stream as on one server: the fencing
// must not rely on a check the replicas make only as they apply a message
// (see the pipeline).
func TestPipelineFencedByAnotherWriter(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		testPipelineFenced(t, harness.StartNATS(t).JetStream(t), 1)
	})
	t.Run("cluster", func(t *testing.T) {
		c := harness.StartNATSCluster(t, 3)
		c.WaitReady(t)
		testPipelineFenced(t, c.JetStream(t, 0), 3)
	})
}

func testPipelineFenced(t *testing.T, js jetstream.JetStream, replicas int) {
	ctx := context.Background()
	cfg := relay.StreamConfig("F", "f")
	cfg.Replicas = replicas
	stream, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	src := memory.New[int](memory.Options{MaxBatch: 20})
	deposed := make(chan struct{})
	var once sync.Once
	log := slog.New(&signalHandler{t: t, msg: "relay deposed; waiting for the election to notice", fire: func() { once.Do(func() { close(deposed) }) }})
	r, err := relay.New[int](ctx, js, src, relay.Options[int]{Stream: "F", Prefix: "f", Elector: fixedElector{1}, MaxInFlight: 64, ProgressInterval: -1, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	down, err := relay.NewDownstream[int](ctx, js, "F", "f", relay.DownstreamOptions[int]{})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run(t, down, core.InformerOptions[int]{Name: "down"})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(rctx) }()
	var ran error
	stopRelay := sync.OnceFunc(func() { cancel(); ran = <-done })
	defer stopRelay()
	informertest.WaitFor(t, inf, src.Put("first", 0))

	// The writer goes on while the foreign message is published.
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; wctx.Err() == nil && i < 20000; i++ {
			src.Put("k"+strconv.Itoa(i%500), i)
		}
	})
	foreign := nats.NewMsg("f.progress")
	foreign.Header.Set("Dbi", strconv.FormatUint(uint64(src.HeadRV()), 10)+" 0 2")
	ack, err := js.PublishMsg(ctx, foreign)
	if err != nil {
		t.Fatal(err)
	}
	// At least one change comes after it, whenever the writer ends.
	src.Put("after", 1)
	select {
	case <-deposed:
	case <-time.After(time.Minute):
		t.Fatal("the relay did not stop within a minute after a later epoch wrote to its stream")
	}
	stop()
	wg.Wait()
	stopRelay()
	if ran != nil {
		t.Fatalf("the fenced relay returned %v", ran)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const inFlight = 64
	if after := info.State.LastSeq - ack.Sequence; after > inFlight {
		t.Fatalf("the stream's last sequence is %d, %d after the foreign message at %d: the fenced relay published more than the %d messages it can have had in flight", info.State.LastSeq, after, ack.Sequence, inFlight)
	}
	for seq := ack.Sequence + 1; seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			continue // superseded by a later message of its key
		}
		if f := strings.Fields(m.Header.Get("Dbi")); len(f) < 3 || f[2] != "1" {
			t.Errorf("sequence %d after the foreign message is not the fenced relay's (epoch 1): %v", seq, m.Header)
		}
	}
}

// signalHandler calls fire when a record with message msg is logged.
type signalHandler struct {
	t    *testing.T
	msg  string
	fire func()
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	var attrs []any
	r.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a); return true })
	h.t.Log(r.Message, attrs)
	if r.Message == h.msg {
		h.fire()
	}
	return nil
}
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }

// The stream's leader goes down with messages of the relay in flight and
// more published while the stream elects another: the relay sends what
// got no acknowledgement again (each copy deduplicated by its
// Nats-Msg-Id and chained by its expected last sequence) and goes on
// within its term, instead of waiting out its ackTimeout and restarting
// from the stream; the downstream ends with the source.
func TestPipelineResendsAcrossStreamLeaderLoss(t *testing.T) {
	c := harness.StartNATSCluster(t, 3)
	c.WaitReady(t)
	ctx := context.Background()
	cfg := relay.StreamConfig("R", "r")
	cfg.Replicas = 3
	if _, err := c.JetStream(t, 0).CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	lead := c.WaitStreamLeader(t, "R")
	// The relay and the downstream are on another node, which stays up.
	node := (lead + 1) % 3
	js := c.JetStream(t, node)
	src := memory.New[int](memory.Options{MaxBatch: 20})
	restarted := &flagHandler{want: "relay restarts from the stream", t: t}
	r, err := relay.New[int](ctx, js, src, relay.Options[int]{Stream: "R", Prefix: "r", Elector: fixedElector{1}, Logger: slog.New(restarted)})
	if err != nil {
		t.Fatal(err)
	}
	down, err := relay.NewDownstream[int](ctx, js, "R", "r", relay.DownstreamOptions[int]{})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := informertest.Run(t, down, core.InformerOptions[int]{Name: "down"}, informertest.NewRecorder(t, func(v int) int64 { return int64(v) }))
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()
	informertest.WaitFor(t, inf, src.Put("first", 0))

	// A writer all along.
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var writes atomic.Int64
	wg.Go(func() {
		for i := 1; wctx.Err() == nil; i++ {
			src.Put("k"+strconv.Itoa(i%200), i)
			writes.Add(1)
			time.Sleep(time.Millisecond) // about the benchmark's pace
		}
	})
	informertest.Eventually(t, "the writer goes on", func() bool { return writes.Load() > 500 })
	c.Nodes[lead].Stop()
	informertest.WaitFor(t, inf, src.Put("while down", 1))
	c.Nodes[lead].Restart(t)
	informertest.WaitFor(t, inf, src.Put("back", 1))
	stop()
	wg.Wait()
	informertest.WaitFor(t, inf, src.HeadRV())
	want, _ := src.Items()
	got := map[string]int{}
	for _, k := range inf.Indexer().ListKeys() {
		got[k], _ = inf.Indexer().Get(k)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("downstream cache:\n%v\nwant the source's:\n%v", got, want)
	}
	if restarted.seen.Load() {
		t.Errorf("the relay restarted its term across the stream leader's election; it should have sent the lost messages again")
	}
	if n := r.Relists(); n != 1 {
		t.Errorf("the relay published %d relists, want only its first", n)
	}
}
