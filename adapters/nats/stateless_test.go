package natsinformer_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
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
	if err := w.stop(); !errors.Is(err, driver.ErrWatchStopped) {
		t.Fatalf("Watch ended with %v, want ErrWatchStopped", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the reducer ran %d times for a Watch from %d with two messages after it: a Stateless watch must not replay the stream", n, rv)
	}
	if len(evs) != 2 || evs[0].Key != "k1" || evs[0].Type != driver.Added || evs[0].Object.N != 100 ||
		evs[1].Key != "k2" || evs[1].Type != driver.Deleted || evs[1].HasObject {
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

// A Compacted stream removes a message only when a later one of its
// subject supersedes it, so a Watch from before its first retained
// sequence misses nothing but superseded messages: it starts where the
// stream does. Without Compacted the same Watch is expiry (a purge or an
// age limit looks the same from the stream's state). A stream that can
// remove a subject's last message is refused Compacted.
func TestEventStreamCompacted(t *testing.T) {
	nsrv := harness.StartNATS(t)
	js := nsrv.JetStream(t)
	ctx := context.Background()
	_, root := newStream(t, js, jetstream.StreamConfig{MaxMsgsPerSubject: 1})
	name := "T" + root[1:]
	reduce := func(_ item, _ bool, m natsinformer.Message) (item, bool, error) {
		var it item
		err := json.Unmarshal(m.Data, &it)
		return it, err == nil, err
	}
	pub := func(key string, n int) uint64 {
		b, _ := json.Marshal(item{N: n})
		ack, err := js.Publish(ctx, root+"."+key, b)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	from := pub("a", 1) // the List of a young stream ends here,
	pub("a", 2)         // and before its Watch starts
	pub("a", 3)         // both are superseded:
	pub("b", 4)         // the stream holds 3 and 4.

	plain, err := natsinformer.NewEventStream(ctx, js, name, natsinformer.EventStreamOptions[item]{Reduce: reduce, Stateless: true})
	if err != nil {
		t.Fatal(err)
	}
	err = plain.Watch(ctx, core.ResourceVersion(from), driver.WatchOptions[item]{Emit: func([]driver.Event[item]) error { return nil }})
	if !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Watch from %d of a stream whose first retained sequence is past it, without Compacted: %v, want ErrExpired", from, err)
	}

	es, err := natsinformer.NewEventStream(ctx, js, name, natsinformer.EventStreamOptions[item]{Reduce: reduce, Stateless: true, Compacted: true})
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch[item](t, es, core.ResourceVersion(from))
	end := pub("c", 5)
	evs := w.wait(t, "the retained messages and the next", hasRV[item](core.ResourceVersion(end)))
	if err := w.stop(); !errors.Is(err, driver.ErrWatchStopped) {
		t.Fatalf("Watch ended with %v, want ErrWatchStopped", err)
	}
	got := map[string]int{}
	for _, ev := range evs {
		got[ev.Key] = ev.Object.N
	}
	if len(got) != 3 || got["a"] != 3 || got["b"] != 4 || got["c"] != 5 {
		t.Errorf("a Compacted Watch from %d delivered %v, want a=3 b=4 c=5", from, got)
	}

	if _, err := natsinformer.NewEventStream(ctx, js, name, natsinformer.EventStreamOptions[item]{Reduce: reduce, Compacted: true}); err == nil {
		t.Error("NewEventStream accepted Compacted without Stateless")
	}
	_, aged := newStream(t, js, jetstream.StreamConfig{MaxMsgsPerSubject: 1, MaxAge: time.Hour})
	if _, err := natsinformer.NewEventStream(ctx, js, "T"+aged[1:], natsinformer.EventStreamOptions[item]{Reduce: reduce, Stateless: true, Compacted: true}); err == nil || !strings.Contains(err.Error(), "MaxAge") {
		t.Errorf("NewEventStream of a stream with an age limit, Compacted: %v, want an error naming MaxAge", err)
	}
}
