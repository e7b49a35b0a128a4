package natsinformer_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/filter"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// A Stateless event stream keeps no folded copy: its reducer never sees a
// previous state, a Watch from a sequence reads only what follows it (no
// replay of the stream before it), and a List still returns each
// entity's last state.
func TestEventStreamStateless(t *testing.T) {
	nsrv := harness.StartNATS(t)
	js := nsrv.JetStream(t)
	ctx := context.Background()
	_, root := newStream(t, js, jetstream.StreamConfig{MaxMsgsPerSubject: 1})
	var calls atomic.Int64
	var sawPrev atomic.Bool
	reduce := func(_ item, exists bool, m natsinformer.Message) (item, bool, error) {
		calls.Add(1)
		if exists {
			sawPrev.Store(true)
		}
		var it item
		if err := json.Unmarshal(m.Data, &it); err != nil {
			return item{}, false, err
		}
		return it, it.N >= 0, nil // a negative N deletes
	}
	es, err := natsinformer.NewEventStream(ctx, js, "T"+root[1:], natsinformer.EventStreamOptions[item]{Reduce: reduce, Stateless: true})
	if err != nil {
		t.Fatal(err)
	}
	pub := func(key string, n int) uint64 {
		b, _ := json.Marshal(item{N: n})
		ack, err := js.Publish(ctx, root+"."+key, b)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	for i := range 20 {
		pub("k"+strconv.Itoa(i%5), i)
	}
	got, rv := listAll[item](t, es)
	if len(got) != 5 || got["k4"].N != 19 {
		t.Fatalf("List = %v at %d, want k0..k4 with their last values (k4 = 19)", got, rv)
	}

	// A Watch from the List's version on a new event stream, as after a
	// restart (nothing parked): only the messages after it reach the
	// reducer.
	es2, err := natsinformer.NewEventStream(ctx, js, "T"+root[1:], natsinformer.EventStreamOptions[item]{Reduce: reduce, Stateless: true})
	if err != nil {
		t.Fatal(err)
	}
	calls.Store(0)
	w := startWatch[item](t, es2, rv)
	pub("k1", 100)
	last := pub("k2", -1)
	evs := w.wait(t, "the two changes", hasRV[item](core.ResourceVersion(last)))
	if err := w.stop(); !errors.Is(err, core.ErrWatchStopped) {
		t.Fatalf("Watch ended with %v, want ErrWatchStopped", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the reducer ran %d times for a Watch from %d with two messages after it: a Stateless watch must not replay the stream", n, rv)
	}
	if len(evs) != 2 || evs[0].Key != "k1" || evs[0].Type != core.Added || evs[0].Object.N != 100 ||
		evs[1].Key != "k2" || evs[1].Type != core.Deleted || evs[1].HasObject {
		t.Errorf("events = %+v, want k1 Added 100, then k2 Deleted with only its key", evs)
	}
	if sawPrev.Load() {
		t.Error("the reducer of a Stateless stream was given a previous state")
	}

	for _, opts := range []natsinformer.EventStreamOptions[item]{
		{Reduce: reduce, Stateless: true, Snapshot: map[string]item{"a": {}}},
		{Reduce: reduce, Stateless: true, Where: filter.MustNew[item](filter.Eq(filter.Key, "k1"))},
	} {
		if _, err := natsinformer.NewEventStream(ctx, js, "T"+root[1:], opts); err == nil {
			t.Errorf("NewEventStream accepted Stateless with Snapshot or Where (%+v)", opts)
		}
	}
}
