package natsinformer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// rywRounds is how many put → WaitFor → read rounds each case runs:
// NATS_RYW_ROUNDS for a long run, a few seconds' worth by default (a
// WaitFor under these writes waits for the watch's head proof, about one
// ProgressRequestInterval).
func rywRounds() int {
	if n, _ := strconv.Atoi(os.Getenv("NATS_RYW_ROUNDS")); n > 0 {
		return n
	}
	return 20
}

// rywSource is what readYourWritesUnderWrites drives: a ListerWatcher, a
// write of one watched key, and optionally one outside what it watches.
type rywSource struct {
	lw    driver.ListerWatcher[item]
	write func(ctx context.Context, key string, n int) (uint64, error)
	// other writes something the ListerWatcher does not watch; nil: none.
	other func(ctx context.Context, n int) (uint64, error)
}

// readYourWritesUnderWrites: writers hammer a few busy keys of a source
// that keeps one message per key, so the watch's consumer keeps finding
// messages superseded before it reached them, while the test writes a
// busy key, WaitFor's the write's version and reads the key from the
// cache: it must hold that write or a later one. Each key's writes are
// serialized (a key's values grow with its versions), so the handler
// check that no key's value goes backwards holds too.
func readYourWritesUnderWrites(t *testing.T, src rywSource, keys []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	locks := make([]sync.Mutex, len(keys))
	var counter atomic.Int64
	// write writes key i's next value under its lock and returns it with
	// its version.
	write := func(i int) (int, uint64, error) {
		locks[i].Lock()
		defer locks[i].Unlock()
		n := int(counter.Add(1))
		v, err := src.write(ctx, keys[i], n)
		return n, v, err
	}
	for i := range keys {
		if _, _, err := write(i); err != nil {
			t.Fatal(err)
		}
	}
	order := newRecorder(t)
	tr := &traceLW{ListerWatcher: src.lw}
	inf, _ := startInformer[item](t, tr, order)

	var (
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	defer func() { stop.Store(true); wg.Wait() }()
	for w := range 3 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 11))
			for j := 0; !stop.Load(); j++ {
				var err error
				if src.other != nil && j%4 == 3 {
					_, err = src.other(ctx, int(counter.Add(1)))
				} else {
					_, _, err = write(r.IntN(len(keys)))
				}
				if err != nil && ctx.Err() == nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	began := time.Now()
	r := rand.New(rand.NewPCG(99, 11))
	rounds := rywRounds()
	for round := range rounds {
		i := r.IntN(len(keys))
		n, v, err := write(i)
		if err != nil {
			t.Fatalf("round %d: write %q: %v", round, keys[i], err)
		}
		waitFor(t, inf, v)
		got, ok := inf.Indexer().Get(keys[i])
		if !ok || got.N < n {
			tr.dump(t)
			t.Fatalf("round %d: after WaitFor(%d), the version of the write of %q = %d, the cache holds %+v (present %v): a value from before it (informer at %v)",
				round, v, keys[i], n, got, ok, inf.LastSyncResourceVersion())
		}
	}
	t.Logf("%d rounds of write → WaitFor → read under writes of %d busy keys: %v (%d writes)", rounds, len(keys), time.Since(began).Round(time.Millisecond), counter.Load())
}

// busyKeys names n keys below prefix.
func busyKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sb%d", prefix, i)
	}
	return keys
}

// WaitFor(v) of a write never returns while the cache holds an older
// value of the key, though a busy key's messages are superseded (History
// 1) before the watch's consumer reaches them: a message stands for the
// changes of its key it superseded, and neither it nor a Bookmark may let
// the queue count their versions applied before it is.
func TestKVReadYourWritesBusyKeys(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix string // the informer's KVOptions.Prefix
		filter string
	}{
		{name: "Bucket"},
		{name: "Prefix", prefix: "busy."},
		{name: "Filter", prefix: "busy.", filter: "hot.>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := harness.StartNATS(t)
			js := srv.JetStream(t)
			kv := newBucket(t, js, jetstream.KeyValueConfig{History: 1})
			src := rywSource{
				lw: newKVLW(t, js, kv.Bucket(), natsinformer.KVOptions[item]{Prefix: tc.prefix, Filter: tc.filter}),
				write: func(ctx context.Context, key string, n int) (uint64, error) {
					return put(ctx, kv, tc.prefix+key, n)
				},
			}
			within := ""
			if tc.filter != "" {
				within = "hot."
			}
			if tc.prefix != "" {
				// Writes the watch does not match keep the stream moving
				// past its position without anything for it.
				src.other = func(ctx context.Context, n int) (uint64, error) {
					return put(ctx, kv, fmt.Sprintf("else.o%d", n%4), n)
				}
			}
			readYourWritesUnderWrites(t, src, busyKeys(within, 4))
		})
	}
}

// The same for a Stateless event stream that keeps one message per
// subject, watched through a subject filter.
func TestEventStreamReadYourWritesBusyKeys(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	ctx := context.Background()
	_, root := newStream(t, js, jetstream.StreamConfig{MaxMsgsPerSubject: 1})
	reduce := func(_ item, _ bool, m natsinformer.Message) (item, bool, error) {
		var it item
		err := json.Unmarshal(m.Data, &it)
		return it, true, err
	}
	es, err := natsinformer.NewEventStream(ctx, js, "T"+root[1:], natsinformer.EventStreamOptions[item]{
		Reduce: reduce, Stateless: true, Filter: root + ".busy.*",
	})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(ctx context.Context, subject string, n int) (uint64, error) {
		b, _ := json.Marshal(item{N: n})
		ack, err := js.Publish(ctx, subject, b)
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	readYourWritesUnderWrites(t, rywSource{
		lw: es,
		write: func(ctx context.Context, key string, n int) (uint64, error) {
			return publish(ctx, root+".busy."+key, n)
		},
		other: func(ctx context.Context, n int) (uint64, error) {
			return publish(ctx, fmt.Sprintf("%s.else.o%d", root, n%4), n)
		},
	}, busyKeys("", 4))
}

// traceLW keeps the batches its watches emitted, for a failure's report.
type traceLW struct {
	driver.ListerWatcher[item]
	mu      sync.Mutex
	batches []string
}

func (l *traceLW) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[item]) error {
	emit := opts.Emit
	opts.Emit = func(b []driver.Event[item]) error {
		line := fmt.Sprintf("watch from %d:", from)
		for _, ev := range b {
			line += fmt.Sprintf(" %v %s=%d@%d", ev.Type, ev.Key, ev.Object.N, ev.RV)
		}
		l.mu.Lock()
		l.batches = append(l.batches, line)
		l.mu.Unlock()
		return emit(b)
	}
	return l.ListerWatcher.Watch(ctx, from, opts)
}

// dump logs the last batches.
func (l *traceLW) dump(t *testing.T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.batches[max(len(l.batches)-30, 0):] {
		t.Log(b)
	}
}

// A progress request reads the stream's head, then asks the leader whether
// a watched message lies between the watch's position and it. When the
// message there (k = "b") is superseded in between by one past the head
// (k = "c"), nothing is left up to the head, but a Bookmark there would
// let WaitFor of "b" return before the watch delivered either value: the
// watch must deliver k first. The test serves the JetStream API through a
// prefix and makes both writes while the head read is answered.
func TestHeadBookmarkWaitsForSupersedingMessage(t *testing.T) {
	srv := harness.StartNATS(t)
	ctx := context.Background()
	nc := srv.Conn(t)
	writer := srv.JetStream(t)
	var (
		trap      atomic.Bool
		b, c      atomic.Uint64
		trapErr   atomic.Pointer[error]
		published = func(v *atomic.Uint64, data string) {
			ack, err := writer.Publish(ctx, "busy.k", []byte(data))
			if err != nil {
				trapErr.Store(&err)
				return
			}
			v.Store(ack.Sequence)
		}
	)
	js := servedJetStream(t, nc, func(m, fwd *nats.Msg) bool {
		if !strings.HasPrefix(fwd.Subject, "$JS.API.STREAM.INFO.") || !trap.CompareAndSwap(true, false) {
			return false
		}
		published(&b, "b") // the head includes it
		fwd.Reply = ""
		resp, err := nc.RequestMsg(fwd, testWait)
		if err != nil {
			trapErr.Store(&err)
			return true
		}
		published(&c, "c") // past the head, and b is gone
		_ = m.Respond(resp.Data)
		return true
	})
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BUSY", Subjects: []string{"busy.>"}, MaxMsgsPerSubject: 1}); err != nil {
		t.Fatal(err)
	}
	lw, err := natsinformer.NewEventStream(ctx, js, "BUSY", natsinformer.EventStreamOptions[string]{
		Reduce:    func(_ string, _ bool, m natsinformer.Message) (string, bool, error) { return string(m.Data), true, nil },
		Stateless: true,
		IdleCheck: -1, // head reads on request only
	})
	if err != nil {
		t.Fatal(err)
	}
	a := func() uint64 {
		var v atomic.Uint64
		published(&v, "a")
		return v.Load()
	}()
	_, from := listAll[string](t, lw)
	w := startWatch[string](t, lw, from)
	w.requestProgress()
	w.wait(t, "a bookmark at the list's version", hasRV[string](from))
	trap.Store(true)
	w.requestProgress()
	evs := w.wait(t, `k = "c"`, func(evs []driver.Event[string]) bool {
		return c.Load() > 0 && len(evs) > 0 && evs[len(evs)-1].RV >= core.ResourceVersion(c.Load())
	})
	if p := trapErr.Load(); p != nil {
		t.Fatal(*p)
	}
	if a == 0 || b.Load() == 0 {
		t.Fatalf("writes a = %d, b = %d", a, b.Load())
	}
	for _, ev := range evs {
		if ev.Type != driver.Bookmark {
			break
		}
		if ev.RV >= core.ResourceVersion(b.Load()) {
			t.Fatalf("Bookmark at %d before k's write at %d (superseded by %d) was delivered: events %v", ev.RV, b.Load(), c.Load(), evs)
		}
	}
}
