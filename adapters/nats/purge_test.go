package natsinformer_test

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/integration/harness"
	"github.com/dbinformer/dbinformer/integration/proxy"
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
// message follows its position. "consumer lost": as "no gap", but the
// consumer is deleted too, so the watch is opened again from its version,
// which the stream's first sequence has not passed. "rewrites": History 1 rewrites every key
// during the outage; the jump hides nothing lost and must not relist.
func TestKVPurgeWhileDisconnected(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	for _, history := range []uint8{1, 5} {
		for _, tc := range []struct {
			name   string
			writes int
			purge  bool
			drop   bool
		}{{"gap", 3, true, false}, {"no gap", 0, true, false}, {"rewrites", 0, false, false}, {"consumer lost", 0, true, true}} {
			t.Run(fmt.Sprintf("History%d/%s", history, tc.name), func(t *testing.T) {
				purgeWhileDisconnected(t, srv, js, history, tc.writes, tc.purge, tc.drop)
			})
		}
	}
}

func purgeWhileDisconnected(t *testing.T, srv *harness.NATS, js jetstream.JetStream, history uint8, writes int, purge, drop bool) {
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
	sink := &errSink{}
	inf := startInformer(t, core.ListerWatcher[item](lw), sink, nil)
	// A write delivered by the watch: the watch, not only the List, is up
	// before the outage.
	head := mustPut(t, ctx, kv, "last", 1)
	waitApplied(t, inf, head)
	synced := lw.lists.Load()
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
	for i := range 3 {
		head = mustPut(t, ctx, kv, fmt.Sprintf("after%d", i), 1)
	}
	waitApplied(t, inf, head)
	if nc.Stats().Reconnects == reconnects {
		t.Fatal("setup: the informer's connection was not cut")
	}

	want := bucketState(t, kv, "")
	if _, ok := want["k0"]; purge == ok {
		t.Fatalf("setup: purge %v, yet the bucket holds k0: %v", purge, ok)
	}
	if got := cacheOf(inf, itemVersion); !maps.Equal(got, want) {
		t.Fatalf("with version %d applied the cache is not the bucket:\n got %v\nwant %v\nerrors: %v", head, got, want, sink.all())
	}
	if !purge {
		if n := lw.lists.Load(); n != synced {
			t.Errorf("History %d rewrites made the informer list %d more times, want none; errors: %v", history, n-synced, sink.all())
		}
	} else if n := lw.lists.Load(); n == synced {
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

// waitApplied waits until the cache has applied rv. Unlike WaitFor it asks
// the watch for nothing: a progress request makes the watch read the
// stream's state, which would hide a watch that trusts its messages alone.
func waitApplied[T any](t *testing.T, inf *core.SharedIndexInformer[T], rv uint64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for inf.AppliedVersion() < core.ResourceVersion(rv) {
		if time.Now().After(deadline) {
			t.Fatalf("version %d not applied within 60s (applied %d)", rv, inf.AppliedVersion())
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
