package relay_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	pginformer "github.com/dbinformer/dbinformer/adapters/postgres"
	"github.com/dbinformer/dbinformer/adapters/postgres/pgtest"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/relay"
)

// A deposed leader's message stored after the new term's first one (a
// frozen leader whose publishes were already on their way: its message
// for the sequence the new term's progress took is refused, and its next
// one, expecting the stream to end at that very sequence, is stored
// behind it). The stream is laid out so by hand, on a real server, after
// a first relay (epoch 1) stopped: a progress message of epoch 2 at the
// sequence after the first relay's last, then the first relay's late
// change. A new leader (epoch 3, its own Source over the permanent slot)
// resumes from the stream when the refused message provably carried no
// change (its late successor starts a group with the same last complete
// group). When it carried one (the late successor names a group the
// stream does not hold), the new leader repairs it from the slot, which
// still holds every change since the intruder's version: no List, no
// relist, and the downstream that already read the late write (and
// confirmed its version without the lost change) gets the lost change
// too. Only a slot that lost those changes makes it relist. Every
// downstream ends with the table, and no key's version goes backwards.
func TestLateWriteOfDeposedTerm(t *testing.T) {
	t.Run("lost progress: resume", func(t *testing.T) { lateWrite(t, lostProgress) })
	t.Run("lost change: repair", func(t *testing.T) { lateWrite(t, lostChange) })
	// Nothing written after the late write: the table's bookmark, as
	// its stream moves on, is the first version past it.
	t.Run("lost change, idle table: repair", func(t *testing.T) { lateWrite(t, lostChangeIdle) })
	t.Run("lost change, slot lost: relist", func(t *testing.T) { lateWrite(t, lostChangeSlotLost) })
	// A leader (epoch 3) that found the late write ended before its
	// repair or relist was stored: its first message, which superseded
	// the later term's progress message that showed the late write, is
	// the stream's last. A leader in another process (epoch 4) carries
	// on with the same repair, or relists.
	t.Run("lost change, repairing leader died: repair", func(t *testing.T) { lateWrite(t, lostChangeRepairDied) })
	t.Run("lost change, relisting leader died: relist", func(t *testing.T) { lateWrite(t, lostChangeRelistDied) })
	// The deposed leader's next pipelined message lands behind the
	// first message of the leader that died: the repair covers both.
	t.Run("lost change, repairing leader died, late again: repair", func(t *testing.T) { lateWrite(t, lostChangeRepairDiedLate) })
	// The later term is a real relay (epoch 2) that stored its first
	// message and ended; the deposed leader's late writes behind it end
	// with progress, which the stream keeps one message of per subject:
	// were the first message progress too, the late one would remove it
	// and, with it, every trace of the late writes.
	t.Run("lost change, late progress: repair", func(t *testing.T) { lateWrite(t, lostChangeLateProgress) })
}

// What the deposed term's refused message carried, and whether the slot
// still holds the changes since.
const (
	lostProgress = iota
	lostChange
	lostChangeIdle
	lostChangeSlotLost
	lostChangeRepairDied
	// The late write changes the key of the deposed term's message
	// before the intruder, superseding it: nothing proves which version
	// the source was acknowledged up to, and the new leader relists.
	lostChangeRelistDied
	lostChangeRepairDiedLate
	lostChangeLateProgress
)

func lateWrite(t *testing.T, lost int) {
	env := newLateEnv(t, "relay_late")
	pg, h, js, stream, inf, run, put := env.pg, env.h, env.js, env.stream, env.inf, env.run, env.put
	ctx := context.Background()

	// The first leader (epoch 1) relays a few writes, then stops.
	rA, stopA := run(h.ListerWatcher(), 1, nil)
	// Its relist of the empty table first, so that the writes are
	// groups of their own and key a's is the last.
	informertest.Eventually(t, "the first leader relists", func() bool { return rA.Relists() > 0 })
	for i := range 10 {
		put("a"+strconv.Itoa(i), int64(i))
	}
	informertest.WaitFor(t, inf, core.ResourceVersion(put("a", 100)))
	stopA()
	if err := h.Source().Close(); err != nil {
		t.Fatal(err)
	}

	// The stream's last message: where the deposed leader's chain was
	// when the new term read the stream.
	m, f := lastMessage(t, stream)
	top := m.Sequence
	committed, _ := strconv.ParseUint(f[0], 10, 64)
	lastChange, _ := strconv.ParseUint(f[1], 10, 64)
	switch {
	case len(f) == 3: // progress
	case len(f) >= 7 && f[6] == "commit": // the last key of its group
		lastChange = committed
	default:
		t.Fatalf("the first leader's last message (sequence %d) ends no group: %v", top, f)
	}
	if lost == lostChangeRelistDied && len(f) != 3 && m.Subject != relay.KeySubject("l", "a") {
		t.Fatalf("the first leader's last message (sequence %d) is %s, not key a's or progress: the late write would not supersede it", top, m.Subject)
	}

	// The deposed leader's writes, in the slot only: the refused message
	// was a change ("lost", completing a group whose version the late one
	// names as its prev), or progress (carrying nothing).
	prev := lastChange
	if lost != lostProgress {
		prev = put("lost", 5)
	}
	lateKey, lateV := "late", int64(7)
	if lost == lostChangeRelistDied {
		lateKey, lateV = "a", 107 // a row's value is its version, for the recorder
	}
	late := put(lateKey, lateV)
	var late2 uint64
	if lost == lostChangeRepairDiedLate {
		late2 = put("late2", 9)
	}
	if lost != lostChangeIdle {
		put("gap", 1)
	}

	publish := func(m *nats.Msg, after uint64) {
		t.Helper()
		ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequence(after))
		if err != nil {
			t.Fatal(err)
		}
		if ack.Sequence != after+1 {
			t.Fatalf("stored at %d, not %d", ack.Sequence, after+1)
		}
	}
	// A leader of a later term: a Source of its own over the same
	// permanent slot, as in another process.
	table := func() (driver.ListerWatcher[pgtest.Row], *pginformer.Source) {
		src, err := pginformer.NewSource(ctx, pg.ConnString(), pginformer.Options{PermanentSlot: true, Slot: "relay_late"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		tbl, err := pginformer.NewTable[pgtest.Row](ctx, src, h.TableName(), pginformer.TableOptions[pgtest.Row]{})
		if err != nil {
			t.Fatal(err)
		}
		return tbl, src
	}
	// The later term's first message, from its read of the stream.
	if lost == lostChangeLateProgress {
		tableL, srcL := table()
		stalled := &stallSource{ListerWatcher: tableL, entered: make(chan struct{})}
		_, stopL := run(stalled, 2, nil)
		<-stalled.entered
		stopL()
		if err := srcL.Close(); err != nil {
			t.Fatal(err)
		}
		if m, f := lastMessage(t, stream); m.Sequence != top+1 || len(f) != 3 || f[2] != "2" {
			t.Fatalf("the stream ends with %s %v at %d, not the later term's first message at %d", m.Subject, f, m.Sequence, top+1)
		}
	} else {
		intruder := nats.NewMsg("l.term")
		intruder.Header.Set("Dbi", strconv.FormatUint(committed, 10)+" "+strconv.FormatUint(lastChange, 10)+" 2")
		publish(intruder, top)
	}
	// The deposed leader's next message, stored behind it.
	data, err := json.Marshal(pgtest.Row{K: lateKey, V: lateV})
	if err != nil {
		t.Fatal(err)
	}
	lateMsg := nats.NewMsg(relay.KeySubject("l", lateKey))
	lateMsg.Header.Set("Dbi", strconv.FormatUint(late, 10)+" "+strconv.FormatUint(prev, 10)+" 1 put 0 1 commit")
	lateMsg.Data = data
	publish(lateMsg, top+1)
	if lost == lostChangeLateProgress {
		// The deposed leader's next pipelined message: progress at the
		// late write's version.
		lateProgress := nats.NewMsg("l.progress")
		lateProgress.Header.Set("Dbi", strconv.FormatUint(late, 10)+" "+strconv.FormatUint(late, 10)+" 1")
		publish(lateProgress, top+2)
	}
	if lost != lostProgress {
		// The downstream reads the late write and confirms its version
		// without the lost change (a late write cannot be told from a
		// superseded message), before the new leader repairs it.
		informertest.WaitFor(t, inf, core.ResourceVersion(late))
		if got, ok := inf.Indexer().Get(lateKey); !ok || got.V != lateV {
			t.Fatal("the downstream confirmed the late write's version without it")
		}
		if _, ok := inf.Indexer().Get("lost"); ok {
			t.Fatal("the downstream holds the lost change before the repair: the test lost nothing")
		}
	}
	if lost == lostChangeSlotLost {
		if err := pgtest.DropSlot(ctx, pg.ConnString(), "relay_late"); err != nil {
			t.Fatal(err)
		}
	}

	// A new leader, as in another process.
	epoch := uint64(3)
	if lost == lostChangeRepairDied || lost == lostChangeRelistDied || lost == lostChangeRepairDiedLate {
		// The leader that finds the late write stops once it has
		// stored its first message and started to mend: its source
		// never answers the repair's watch or the relist's List.
		tableC, srcC := table()
		stalled := &stallSource{ListerWatcher: tableC, entered: make(chan struct{})}
		logged := &flagHandler{want: map[int]string{
			lostChangeRepairDied:     "late write of an earlier term that lost a change; repairing it from the source",
			lostChangeRepairDiedLate: "late write of an earlier term that lost a change; repairing it from the source",
			lostChangeRelistDied:     "late write of an earlier term; relisting",
		}[lost], t: t}
		_, stopC := run(stalled, epoch, slog.New(logged))
		<-stalled.entered
		stopC()
		if err := srcC.Close(); err != nil {
			t.Fatal(err)
		}
		if !logged.seen.Load() {
			t.Fatalf("the leader that died did not log %q", logged.want)
		}
		m, f := lastMessage(t, stream)
		if m.Subject != "l.term" || len(f) != 3 || f[2] != "3" {
			t.Fatalf("the stream ends with %s %v, not the first message of the leader that died", m.Subject, f)
		}
		if lost == lostChangeRepairDiedLate {
			data, err := json.Marshal(pgtest.Row{K: "late2", V: 9})
			if err != nil {
				t.Fatal(err)
			}
			late2Msg := nats.NewMsg(relay.KeySubject("l", "late2"))
			late2Msg.Header.Set("Dbi", strconv.FormatUint(late2, 10)+" "+strconv.FormatUint(late, 10)+" 1 put 0 1 commit")
			late2Msg.Data = data
			publish(late2Msg, m.Sequence)
			informertest.WaitFor(t, inf, core.ResourceVersion(late2))
		}
		epoch++
	}
	tableB, _ := table()
	lw := &countLists{ListerWatcher: tableB}
	want := map[int]string{
		lostProgress:             "late write of an earlier term that lost no change; resuming",
		lostChange:               "repaired a late write of an earlier term from the source (no relist)",
		lostChangeIdle:           "repaired a late write of an earlier term from the source (no relist)",
		lostChangeSlotLost:       "cannot repair a late write of an earlier term from the source",
		lostChangeRepairDied:     "repaired a late write of an earlier term from the source (no relist)",
		lostChangeRelistDied:     "ended before its relist was stored",
		lostChangeRepairDiedLate: "repaired a late write of an earlier term from the source (no relist)",
		lostChangeLateProgress:   "repaired a late write of an earlier term from the source (no relist)",
	}[lost]
	logged := &flagHandler{want: want, t: t}
	rB, stopB := run(lw, epoch, slog.New(logged))
	defer stopB()
	if lost == lostChangeIdle {
		informertest.Eventually(t, "the new leader repairs before the next write", logged.seen.Load)
	}
	after := put("after", 1)
	informertest.WaitFor(t, inf, core.ResourceVersion(after))
	wantLists := int64(0)
	if lost == lostChangeSlotLost || lost == lostChangeRelistDied {
		wantLists = 1
		informertest.Eventually(t, "the new leader counts its relist", func() bool { return rB.Relists() > 0 })
	}
	stopB()

	if n := lw.lists.Load(); n != wantLists {
		t.Errorf("the new leader listed the table %d times, want %d", n, wantLists)
	}
	if n := rB.Relists(); n != uint64(wantLists) {
		t.Errorf("the new leader published %d relists, want %d", n, wantLists)
	}
	wantRepairs := uint64(0)
	if strings.Contains(want, "repaired") {
		wantRepairs = 1
	}
	if n := rB.RelayStatus(ctx).Repairs; n != wantRepairs {
		t.Errorf("the new leader's status counts %d repairs, want %d", n, wantRepairs)
	}
	if !logged.seen.Load() {
		t.Errorf("the new leader did not log %q", want)
	}
	// A downstream that lists the stream after the new term reads the
	// same.
	sameAsTable(t, js, h, inf, after)
}

// lateEnv is a late-write test's world: a Postgres table, a stream L
// (prefix l) on a nats-server, and a downstream informer over it.
type lateEnv struct {
	t      *testing.T
	pg     *harness.Postgres
	h      *pgtest.Harness
	js     jetstream.JetStream
	stream jetstream.Stream
	inf    *core.SharedIndexInformer[pgtest.Row]
}

func newLateEnv(t *testing.T, slot string) *lateEnv {
	ctx := context.Background()
	env := &lateEnv{t: t, pg: harness.StartPostgres(t)}
	env.h = pgtest.New(t, env.pg, pgtest.Options{Slot: slot})
	env.js = harness.StartNATS(t).JetStream(t)
	var err error
	if env.stream, err = env.js.CreateStream(ctx, relay.StreamConfig("L", "l")); err != nil {
		t.Fatal(err)
	}
	down, err := relay.NewDownstream[pgtest.Row](ctx, env.js, "L", "l", relay.DownstreamOptions[pgtest.Row]{})
	if err != nil {
		t.Fatal(err)
	}
	env.inf, _ = informertest.Run(t, down, core.InformerOptions[pgtest.Row]{Name: "down"}, informertest.NewRecorder(t, env.h.Version))
	return env
}

// run starts a relay of term epoch over lw; the function returned stops
// it (once; later calls do nothing).
func (env *lateEnv) run(lw driver.ListerWatcher[pgtest.Row], epoch uint64, log *slog.Logger) (*relay.Relay[pgtest.Row], func()) {
	t := env.t
	r, err := relay.New(context.Background(), env.js, lw, relay.Options[pgtest.Row]{Stream: "L", Prefix: "l", Elector: fixedElector{epoch}, Logger: log, ProgressInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	stopped := false
	return r, func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// put upserts key with value n and returns the commit's version.
func (env *lateEnv) put(key string, n int64) uint64 {
	env.t.Helper()
	rv, err := env.h.Put(context.Background(), key, n)
	if err != nil {
		env.t.Fatal(err)
	}
	return uint64(rv)
}

// sameAsTable checks that inf, and a downstream that lists stream L
// (prefix l) once it holds version after, both hold exactly the table.
func sameAsTable(t *testing.T, js jetstream.JetStream, h *pgtest.Harness, inf *core.SharedIndexInformer[pgtest.Row], after uint64) {
	t.Helper()
	ctx := context.Background()
	truth, err := h.Truth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	down2, err := relay.NewDownstream[pgtest.Row](ctx, js, "L", "l", relay.DownstreamOptions[pgtest.Row]{})
	if err != nil {
		t.Fatal(err)
	}
	inf2, _ := informertest.Run(t, down2, core.InformerOptions[pgtest.Row]{Name: "down2"}, informertest.NewRecorder(t, h.Version))
	informertest.WaitFor(t, inf2, core.ResourceVersion(after))
	for name, inf := range map[string]*core.SharedIndexInformer[pgtest.Row]{"the downstream": inf, "a downstream listing after": inf2} {
		got := map[string]int64{}
		for _, row := range inf.Indexer().List() {
			got[row.K] = row.V
		}
		if len(got) != len(truth) {
			t.Errorf("%s: the cache holds %d keys, the table %d", name, len(got), len(truth))
		}
		for k, v := range truth {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: key %s: cache %d (present %v), table %d", name, k, g, ok, v)
			}
		}
	}
}

// stallSource is a Postgres table whose List and Watch never answer:
// a leader over it stops after its first message, before it stores a
// relist or a repair. entered is closed at the first call.
type stallSource struct {
	driver.ListerWatcher[pgtest.Row]
	entered chan struct{}
	once    sync.Once
}

func (s *stallSource) List(ctx context.Context, _ driver.ListSink[pgtest.Row]) (core.ResourceVersion, error) {
	s.once.Do(func() { close(s.entered) })
	<-ctx.Done()
	return 0, ctx.Err()
}

func (s *stallSource) Watch(ctx context.Context, _ core.ResourceVersion, _ driver.WatchOptions[pgtest.Row]) error {
	s.once.Do(func() { close(s.entered) })
	<-ctx.Done()
	return ctx.Err()
}

// lastMessage returns the stream's last message and the fields of its
// Dbi header.
func lastMessage(t *testing.T, stream jetstream.Stream) (*jetstream.RawStreamMsg, []string) {
	t.Helper()
	ctx := context.Background()
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	return m, strings.Fields(m.Header.Get("Dbi"))
}
