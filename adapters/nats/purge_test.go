package natsinformer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/internal/testkit/proxy"
)

// The informer's connection is cut (and new ones refused) while the bucket's
// stream is purged below its head; then the connection comes back and
// writes go on. The watch's consumer lives on the server and survives the
// outage: the server moves it past the purged messages, so the watch sees
// at most a jump in stream sequence and never a delete. Without a check at
// that point WaitFor(head) is satisfied by the messages that follow and the
// cache keeps every purged key. The idle check is an hour away, so only the
// watch's own checks can save it.
//
// "gap": writes during the outage, so the purged ones were never delivered
// and the watch's next message jumps. "no gap": the informer had reached
// the head; only values it already delivered are purged and the next
// message follows its position. "quiet": as "no gap", with no write after
// the outage, so that only the reconnect can tell the watch to look.
// "consumer lost": as "no gap", but the
// consumer is deleted too, so the watch is opened again from its version,
// which the stream's first sequence has not passed. "rewrites": History 1 rewrites every key
// during the outage; the jump hides nothing lost and must not relist.
func TestKVPurgeWhileDisconnected(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	for _, history := range []uint8{1, 5} {
		for _, tc := range []purgeCase{
			{name: "gap", writes: 3, purge: true},
			{name: "no gap", purge: true},
			{name: "quiet", purge: true, quiet: true},
			{name: "rewrites"},
			{name: "consumer lost", purge: true, drop: true},
		} {
			t.Run(fmt.Sprintf("History%d/%s", history, tc.name), func(t *testing.T) {
				purgeWhileDisconnected(t, srv, js, history, tc)
			})
		}
	}
}

type purgeCase struct {
	name   string
	writes int  // during the outage
	purge  bool // below the head, during the outage; else rewrite every key
	drop   bool // delete the watch's consumer during the outage
	quiet  bool // no writes after the outage: wait for the cache, not a version
}

func purgeWhileDisconnected(t *testing.T, srv *harness.NATS, js jetstream.JetStream, history uint8, tc purgeCase) {
	writes, purge, drop := tc.writes, tc.purge, tc.drop
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	kv := newBucket(t, js, jetstream.KeyValueConfig{History: history})
	st, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	px, err := proxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	nc, err := nats.Connect("nats://"+px.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close) // before the proxy closes: cleanups run last-in first-out
	ijs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	const keys = 9
	for i := range keys {
		mustPut(t, ctx, kv, fmt.Sprintf("k%d", i), 1)
	}
	lw := newKVLW(t, ijs, kv.Bucket(), natsinformer.KVOptions[item]{IdleCheck: time.Hour})
	inf, sink := startInformer[item](t, lw)
	// A write delivered by the watch: the watch, not only the List, is up
	// before the outage.
	head := mustPut(t, ctx, kv, "last", 1)
	waitHeld(t, inf, "last")
	synced := lw.Lists()
	reconnects := nc.Stats().Reconnects

	px.Pause()
	px.Cut()
	if drop {
		dropConsumers(t, ctx, st)
	}
	for i := range writes {
		head = mustPut(t, ctx, kv, fmt.Sprintf("x%d", i), 1)
	}
	if !purge {
		for n := 2; n <= 4; n++ {
			for i := range keys {
				head = mustPut(t, ctx, kv, fmt.Sprintf("k%d", i), n)
			}
		}
	} else if err := st.Purge(ctx, jetstream.WithPurgeSequence(head)); err != nil {
		t.Fatal(err)
	}
	px.Resume()
	want := bucketState(t, kv, "")
	if tc.quiet {
		// Nothing will come to the watch; its reconnect alone must make it
		// look (the idle check is an hour away).
		converge(t, inf, itemVersion, func() map[string]int { return want })
	} else {
		for i := range 3 {
			head = mustPut(t, ctx, kv, fmt.Sprintf("after%d", i), 1)
		}
		waitHeld(t, inf, "after2")
		want = bucketState(t, kv, "")
	}
	if nc.Stats().Reconnects == reconnects {
		t.Fatal("setup: the informer's connection was not cut")
	}

	if _, ok := want["k0"]; purge == ok {
		t.Fatalf("setup: purge %v, yet the bucket holds k0: %v", purge, ok)
	}
	if got := cacheOf(inf, itemVersion); !maps.Equal(got, want) {
		t.Fatalf("with version %d applied the cache is not the bucket:\n got %v\nwant %v\nerrors: %v", head, got, want, sink.All())
	}
	if !purge {
		if n := lw.Lists(); n != synced {
			t.Errorf("History %d rewrites made the informer list %d more times, want none; errors: %v", history, n-synced, sink.All())
		}
	} else if n := lw.Lists(); n == synced {
		t.Errorf("a purge of %d cached keys did not relist", keys)
	}
}

// dropConsumers deletes the stream's consumers, as InactiveThreshold or a
// server that lost them would: the watch is opened again from its version.
func dropConsumers(t *testing.T, ctx context.Context, st jetstream.Stream) {
	t.Helper()
	names := st.ConsumerNames(ctx)
	var all []string
	for n := range names.Name() {
		all = append(all, n)
	}
	if err := names.Err(); err != nil {
		t.Fatalf("list consumers: %v", err)
	}
	if len(all) == 0 {
		t.Fatal("setup: the watch has no consumer to drop")
	}
	for _, n := range all {
		if err := st.DeleteConsumer(ctx, n); err != nil {
			t.Fatalf("delete consumer %s: %v", n, err)
		}
	}
}

// waitHeld waits until the cache holds key, written once (the last write
// of a step): the watch delivered everything before it. Unlike WaitFor it
// asks the watch for nothing: a progress request makes the watch read the
// stream's state, which would hide a watch that trusts its messages alone.
// (Nor can it wait for the applied version: a bucket's watch moves it by
// bookmarks only, see driver.SupersededSkipper.)
func waitHeld[T any](t *testing.T, inf *core.SharedIndexInformer[T], key string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, ok := inf.Indexer().Get(key); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %q not in the cache within 60s", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustPut(t *testing.T, ctx context.Context, kv jetstream.KeyValue, key string, n int) uint64 {
	t.Helper()
	rev, err := put(ctx, kv, key, n)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return rev
}

// A watch opened from a version whose values were purged, although the
// stream's first sequence (the head kept by the purge) has not passed
// version+1, expires: the first-sequence rule alone would let it resume
// with every purged key still cached.
func TestKVWatchFromVersionWithPurgedValues(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{History: 5})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 5 {
		mustPut(t, ctx, kv, fmt.Sprintf("k%d", i), 1)
	}
	lw, err := natsinformer.NewKV(ctx, js, kv.Bucket(), natsinformer.KVOptions[item]{})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := lw.List(ctx, driver.ListSink[item]{Emit: func(driver.Event[item]) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(uint64(rv))); err != nil {
		t.Fatal(err)
	}
	err = lw.Watch(ctx, rv, driver.WatchOptions[item]{Emit: func([]driver.Event[item]) error { return nil }})
	if !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Watch(%d): %v; want an error matching core.ErrExpired", rv, err)
	}
}
