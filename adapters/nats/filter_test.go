package natsinformer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
)

type tagged struct {
	N   int    `json:"n"`
	Tag string `json:"tag"`
}

// enterLeave follows one key through its writes as a filtered informer's
// handler must see it.
type enterLeave struct {
	held bool
	n    int
	log  []string
}

func (m *enterLeave) put(key string, n int, in bool) {
	switch {
	case in && m.held:
		m.log = append(m.log, fmt.Sprintf("update %s %d->%d", key, m.n, n))
	case in:
		m.log = append(m.log, fmt.Sprintf("add %s v=%d", key, n))
	case m.held:
		m.log = append(m.log, fmt.Sprintf("delete %s v=%d", key, m.n))
	}
	if in {
		m.n = n
	}
	m.held = in
}

func (m *enterLeave) del(key string) {
	if m.held {
		m.log = append(m.log, fmt.Sprintf("delete %s v=%d", key, m.n))
	}
	m.held = false
}

func linesOf(log []string, key string) []string {
	var out []string
	for _, l := range log {
		if f := strings.Fields(l); len(f) > 1 && f[1] == key {
			out = append(out, l)
		}
	}
	return out
}

// TestKVWhereEnterLeave: keys move into and out of a filter (a key prefix
// pushed down as the subject filter, a value field evaluated in the
// adapter) under concurrent writers. Each key's handler log is exactly its
// enter/leave history, the cache equals the bucket's matching keys, values
// of keys outside the subject filter are never decoded, and a write that
// touches only such keys still advances WaitFor.
func TestKVWhereEnterLeave(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := filter.MustNew[tagged](filter.And(filter.Prefix(filter.Key, "in."), filter.Eq("tag", "yes")))
	var decodedOut atomic.Int64
	codec := core.CodecFuncs[tagged]{DecodeFunc: func(b []byte) (tagged, error) {
		var v tagged
		err := json.Unmarshal(b, &v)
		if v.Tag == "out-key" {
			decodedOut.Add(1)
		}
		return v, err
	}}
	lw, err := natsinformer.NewKV(ctx, js, kv.Bucket(), natsinformer.KVOptions[tagged]{Where: f, Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	var version atomic.Int64
	const writers, keysPerWriter, ops = 4, 4, 60
	models := map[string]*enterLeave{}
	var keys []string
	for w := range writers {
		for k := range keysPerWriter {
			for _, dir := range []string{"in", "out"} {
				key := fmt.Sprintf("%s.w%d-k%d", dir, w, k)
				keys = append(keys, key)
				models[key] = &enterLeave{}
			}
		}
	}
	write := func(key string, tag string) (uint64, int) {
		n := int(version.Add(1))
		if strings.HasPrefix(key, "out.") {
			tag = "out-key" // marks values that must never be decoded
		}
		b, _ := json.Marshal(tagged{N: n, Tag: tag})
		rev, err := kv.Put(ctx, key, b)
		if err != nil {
			t.Error(err)
		}
		return rev, n
	}
	for i, key := range keys {
		tag := map[bool]string{true: "yes", false: "no"}[i%4 < 2]
		_, n := write(key, tag)
		if strings.HasPrefix(key, "in.") {
			models[key].put(key, n, tag == "yes")
			for j := range models[key].log {
				models[key].log[j] += " initial"
			}
		}
	}
	rec := informertest.NewRecorder(t, func(o tagged) int64 { return int64(o.N) })
	inf, _ := startInformer[tagged](t, lw, rec)

	var wg sync.WaitGroup
	var mu sync.Mutex
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for range ops {
				key := fmt.Sprintf("%s.w%d-k%d", []string{"in", "out"}[r.IntN(2)], w, r.IntN(keysPerWriter))
				m := models[key]
				if r.IntN(6) == 0 {
					if err := kv.Delete(ctx, key); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					m.del(key)
					mu.Unlock()
					continue
				}
				tag := []string{"yes", "no"}[r.IntN(2)]
				_, n := write(key, tag)
				mu.Lock()
				m.put(key, n, tag == "yes" && strings.HasPrefix(key, "in."))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, key := range keys {
		rec.Wait(key, func(log []string, _ map[string]int64) bool {
			return slices.Equal(linesOf(log, key), models[key].log)
		})
	}
	// Only the out. keys were written last: WaitFor still returns.
	rev, _ := write("out.last", "yes")
	waitFor(t, inf, rev)
	truth := map[string]int{}
	for _, key := range keys {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var v tagged
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			t.Fatal(err)
		}
		if f.Match(key, v) {
			truth[key] = v.N
		}
	}
	if got := cacheOf(inf, func(o tagged) int { return o.N }); !maps.Equal(got, truth) {
		t.Fatalf("cache differs from the bucket's matching keys:\n cache %v\n truth %v", got, truth)
	}
	if len(truth) == 0 {
		t.Fatal("nothing matched at the end: the test proves little")
	}
	if n := decodedOut.Load(); n != 0 {
		t.Errorf("%d values of keys outside the subject filter were decoded", n)
	}
}

// TestEventStreamWhere: an Eq on the key fills the subject filter's key
// token, and a condition on the folded state makes entities enter and
// leave.
func TestEventStreamWhere(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	st, root := newStream(t, js, jetstream.StreamConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var folded sync.Map
	reduce := func(prev Account, exists bool, m natsinformer.Message) (Account, bool, error) {
		folded.Store(m.Subject, true)
		return reduceAccount(prev, exists, m)
	}
	f := filter.MustNew[Account](filter.And(filter.Eq(filter.Key, "a1"), filter.Ge("Balance", 10)))
	lw, err := natsinformer.NewEventStream(ctx, js, st.CachedInfo().Config.Name, natsinformer.EventStreamOptions[Account]{
		Reduce: reduce, Filter: root + ".acct.*", Where: f,
	})
	if err != nil {
		t.Fatal(err)
	}
	publishAccount(ctx, t, js, root, "a1", accountEvent{Type: "open"})
	publishAccount(ctx, t, js, root, "a2", accountEvent{Type: "open"})
	publishAccount(ctx, t, js, root, "a1", accountEvent{Type: "deposit", Amount: 20})
	rec := informertest.NewRecorder(t, func(a Account) int64 { return int64(a.Events) })
	inf, _ := startInformer[Account](t, lw, rec)
	rec.Expect("add a1 v=2 initial")
	publishAccount(ctx, t, js, root, "a2", accountEvent{Type: "deposit", Amount: 50})
	publishAccount(ctx, t, js, root, "a1", accountEvent{Type: "withdraw", Amount: 15}) // leaves, carrying v=2
	publishAccount(ctx, t, js, root, "a1", accountEvent{Type: "deposit", Amount: 1})   // still out
	last := publishAccount(ctx, t, js, root, "a1", accountEvent{Type: "deposit", Amount: 10})
	rec.Expect("delete a1 v=2", "add a1 v=5")
	waitFor(t, inf, last)
	rec.ExpectNone()
	if _, ok := folded.Load(root + ".acct.a2"); ok {
		t.Error("an event of a2, outside the subject filter, was folded")
	}
	// A Server condition the stream cannot evaluate is refused.
	_, err = natsinformer.NewEventStream(ctx, js, st.CachedInfo().Config.Name, natsinformer.EventStreamOptions[Account]{
		Reduce: reduce, Where: filter.MustNew[Account](filter.Server(filter.Ge("Balance", 10))),
	})
	if err == nil || !strings.Contains(err.Error(), "cannot evaluate Balance >= 10") {
		t.Errorf("a Server condition on folded state: %v", err)
	}
}
