package natsinformer_test

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/adapters/nats/natstest"
	codecs "github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/conformance"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
)

type tagged struct {
	N   int    `json:"n"`
	Tag string `json:"tag"`
}

// filteredKV is a KV bucket watched through a filter: a key prefix pushed
// down as the subject filter (the in. keys) and a condition on the decoded
// value evaluated in the adapter (even versions).
type filteredKV struct{ *natstest.KV }

func (filteredKV) Matches(key string, n int64) bool {
	return strings.HasPrefix(key, "in.") && n%2 == 0
}

// TestKVWhereEnterLeave runs the filter conformance case: keys entering
// and leaving under concurrent writers, and across a relist.
func TestKVWhereEnterLeave(t *testing.T) {
	srv := harness.StartNATS(t)
	conformance.RunFiltered(t, natsCaps, func(t *testing.T) conformance.Harness[natstest.Obj] {
		f := filter.MustNew[natstest.Obj](filter.And(
			filter.Prefix(filter.Key, "in."),
			filter.Where("even version", func(o natstest.Obj) bool { return o.V%2 == 0 }),
		))
		return filteredKV{natstest.NewKV(t, natstest.Config{Server: srv, KVWhere: f})}
	})
}

// TestKVWhereDecodesOnlyTheSubjectFilter: the key prefix is pushed down as
// the subject filter, so values of other keys never reach the codec, and
// a write only to them still advances WaitFor.
func TestKVWhereDecodesOnlyTheSubjectFilter(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := filter.MustNew[tagged](filter.And(filter.Prefix(filter.Key, "in."), filter.Eq("tag", "yes")))
	var decodedOut atomic.Int64
	codec := codecs.Funcs[tagged]{DecodeFunc: func(b []byte) (tagged, error) {
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
	put := func(key string, v tagged) uint64 {
		b, _ := json.Marshal(v)
		rev, err := kv.Put(ctx, key, b)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	put("in.a", tagged{N: 1, Tag: "yes"})
	put("in.b", tagged{N: 2, Tag: "no"})
	put("out.a", tagged{N: 3, Tag: "out-key"})
	inf, _ := startInformer[tagged](t, lw)
	waitFor(t, inf, put("out.b", tagged{N: 4, Tag: "out-key"}))
	if got := cacheOf(inf, func(o tagged) int { return o.N }); !maps.Equal(got, map[string]int{"in.a": 1}) {
		t.Errorf("cache %v, want only in.a", got)
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
