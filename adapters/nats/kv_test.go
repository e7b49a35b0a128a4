package natsinformer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/adapters/nats/natstest"
	"github.com/dbinformer/dbinformer/core"
	codecs "github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
)

func TestKVMissingBucket(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := natsinformer.NewKV(ctx, js, "nope", natsinformer.KVOptions[item]{})
	if !errors.Is(err, jetstream.ErrBucketNotFound) || !strings.Contains(err.Error(), `bucket "nope" does not exist`) {
		t.Fatalf("NewKV on a missing bucket: %v, want an error naming it and matching ErrBucketNotFound", err)
	}
}

func TestKVOptionsValidated(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, o := range []natsinformer.KVOptions[item]{
		{Prefix: "users"},  // no trailing dot
		{Prefix: "us*rs."}, // wildcard in a prefix
		{Prefix: "a..b."},  // empty token
		{Filter: "a.>.b"},  // > not last
		{Filter: "a*"},     // wildcard inside a token
		{Filter: "a b"},    // whitespace
		{Prefix: ">."},     // wildcard prefix
	} {
		if _, err := natsinformer.NewKV(ctx, js, kv.Bucket(), o); err == nil {
			t.Errorf("NewKV with %+v: no error", o)
		}
	}
	if _, err := natsinformer.NewKV(ctx, js, kv.Bucket(), natsinformer.KVOptions[item]{Prefix: "eu.", Filter: "*.config"}); err != nil {
		t.Errorf("NewKV with a valid prefix and filter: %v", err)
	}
}

// A watch whose context ends returns driver.Stopped: it matches
// ErrWatchStopped and the context's cause, whatever the watch was doing.
func TestKVWatchStopped(t *testing.T) {
	srv := harness.StartNATS(t)
	h := natstest.NewKV(t, natstest.Config{Server: srv})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, rv := listAll(t, h.ListerWatcher())
	w := startWatch(t, h.ListerWatcher(), rv)
	put, err := h.Put(ctx, "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	w.wait(t, "the put", hasRV[natstest.Obj](put))
	err = w.stop()
	if !errors.Is(err, driver.ErrWatchStopped) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch after its context was cancelled: %v, want ErrWatchStopped and context.Canceled", err)
	}
}

// A bucket deleted while a watch runs, or before a List, is permanent.
func TestKVBucketDeletedIsPermanent(t *testing.T) {
	srv := harness.StartNATS(t)
	h := natstest.NewKV(t, natstest.Config{Server: srv})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rv, err := h.Put(ctx, "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, h.ListerWatcher(), rv)
	w.requestProgress()
	w.wait(t, "a bookmark", hasRV[natstest.Obj](rv))
	if err := h.Writer().DeleteKeyValue(ctx, h.Bucket().Bucket()); err != nil {
		t.Fatal(err)
	}
	if err := w.ended(t); !errors.Is(err, driver.ErrPermanent) || !strings.Contains(err.Error(), "was deleted") {
		t.Fatalf("Watch of a deleted bucket: %v, want a permanent error saying so", err)
	}
	_, err = h.ListerWatcher().List(ctx, driver.ListSink[natstest.Obj]{Emit: func(driver.Event[natstest.Obj]) error { return nil }})
	if !errors.Is(err, driver.ErrPermanent) {
		t.Fatalf("List of a deleted bucket: %v, want a permanent error", err)
	}
}

// A codec that panics yields a *driver.DecodeError for that value; the watch
// goes on.
func TestKVCodecPanic(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	codec := codecs.Funcs[item]{DecodeFunc: func(b []byte) (item, error) {
		if string(b) == "boom" {
			panic("boom")
		}
		return codecs.JSON[item]{}.Decode(b)
	}}
	lw, err := natsinformer.NewKV(ctx, js, kv.Bucket(), natsinformer.KVOptions[item]{Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	_, rv := listAll(t, driver.ListerWatcher[item](lw))
	w := startWatch(t, driver.ListerWatcher[item](lw), rv)
	if _, err := kv.Put(ctx, "bad", []byte("boom")); err != nil {
		t.Fatal(err)
	}
	good, err := put(ctx, kv, "good", 7)
	if err != nil {
		t.Fatal(err)
	}
	evs := w.wait(t, "both puts", hasRV[item](core.ResourceVersion(good)))
	var de *driver.DecodeError
	if len(evs) != 2 || !errors.As(evs[0].Err, &de) || de.Key != "bad" || evs[1].Object.N != 7 {
		t.Fatalf("events %+v, want a DecodeError for \"bad\" then good=7", evs)
	}
}

// A watch answers a progress request with a Bookmark at the head, also
// for a write outside what it watches.
func TestKVBookmarkOnRequest(t *testing.T) {
	srv := harness.StartNATS(t)
	h := natstest.NewKV(t, natstest.Config{Server: srv, IdleCheck: -1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, rv := listAll(t, h.ListerWatcher())
	w := startWatch(t, h.ListerWatcher(), rv)
	other, err := h.PutUnwatched(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.requestProgress()
	evs := w.wait(t, "a bookmark", hasRV[natstest.Obj](other))
	if ev := evs[len(evs)-1]; ev.Type != driver.Bookmark || ev.RV != other {
		t.Fatalf("got %+v, want a Bookmark at %d", ev, other)
	}
}

// The adapter reads the head and the "nothing pending" proof from the
// stream leader only: it never sends a direct get, which any replica may
// answer before it has stored the newest messages (issue 17). A plain
// subscriber on the direct-get subjects sees every such request.
func TestKVNoDirectGets(t *testing.T) {
	srv := harness.StartNATS(t)
	h := natstest.NewKV(t, natstest.Config{Server: srv, History: 1, IdleCheck: -1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spy := srv.Conn(t)
	direct := make(chan string, 100)
	for _, subj := range []string{"$JS.API.DIRECT.GET." + h.StreamName(), "$JS.API.DIRECT.GET." + h.StreamName() + ".>"} {
		if _, err := spy.Subscribe(subj, func(m *nats.Msg) { direct <- m.Subject }); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := h.Put(ctx, fmt.Sprintf("k%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	_, rv := listAll(t, h.ListerWatcher())
	// Rewrite every key (History 1 drops the listed values) and write
	// outside the watch: the resumed watch skips sequences and checks each
	// held key's last value; the bookmark proves nothing is pending.
	var last core.ResourceVersion
	for i := range 5 {
		if _, err := h.Put(ctx, fmt.Sprintf("k%d", i), 2); err != nil {
			t.Fatal(err)
		}
		var err error
		if last, err = h.PutUnwatched(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w := startWatch(t, h.ListerWatcher(), rv)
	w.requestProgress()
	w.wait(t, "a bookmark at the head", hasRV[natstest.Obj](last))
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case subj := <-direct:
		t.Fatalf("the adapter sent a direct get (%s)", subj)
	default:
	}
}
