package natsinformer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsinformer "github.com/dbinformer/dbinformer/adapters/nats"
	"github.com/dbinformer/dbinformer/core"
	codecs "github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// newKVLW wraps the adapter in an informertest.Spy, so that tests can tell
// a resume from a relist (Spy.Lists).
func newKVLW(t *testing.T, js jetstream.JetStream, bucket string, opts natsinformer.KVOptions[item]) *informertest.Spy[item] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lw, err := natsinformer.NewKV(ctx, js, bucket, opts)
	if err != nil {
		t.Fatalf("NewKV: %v", err)
	}
	return informertest.Wrap[item](lw)
}

// startInformer runs an informer over lw until the test ends (no planned
// watch restarts) and waits for its first sync; it returns the errors the
// informer reports.
func startInformer[T any](t *testing.T, lw driver.ListerWatcher[T], handlers ...core.ResourceEventHandler[T]) (*core.SharedIndexInformer[T], *informertest.Errors) {
	t.Helper()
	return informertest.Run(t, lw, core.InformerOptions[T]{MinWatchTimeout: time.Hour}, handlers...)
}

// newRecorder fails the test when a handler sees a key's version go
// backwards (every writer in these tests writes increasing n).
func newRecorder(t *testing.T) *informertest.Recorder[item] {
	return informertest.NewRecorder(t, func(o item) int64 { return int64(o.N) })
}

func cacheOf[T any](inf *core.SharedIndexInformer[T], version func(T) int) map[string]int {
	m := make(map[string]int)
	inf.Indexer().Range(func(k string, o T) bool {
		m[k] = version(o)
		return true
	})
	return m
}

// bucketState reads every key of kv below prefix, directly.
func bucketState(t *testing.T, kv jetstream.KeyValue, prefix string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := make(map[string]int)
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return m
	}
	if err != nil {
		t.Fatalf("read bucket keys: %v", err)
	}
	for _, k := range keys {
		if len(k) < len(prefix) || k[:len(prefix)] != prefix {
			continue
		}
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("get %q: %v", k, err)
		}
		var it item
		if err := json.Unmarshal(e.Value(), &it); err != nil {
			t.Fatalf("decode %q: %v", k, err)
		}
		m[k[len(prefix):]] = it.N
	}
	return m
}

// converge waits until the cache equals want().
func converge[T any](t *testing.T, inf *core.SharedIndexInformer[T], version func(T) int, want func() map[string]int) {
	t.Helper()
	informertest.Eventually(t, "the cache to equal the source", func() bool {
		return maps.Equal(cacheOf(inf, version), want())
	})
}

func trim(m map[string]int) string {
	if len(m) > 20 {
		return fmt.Sprintf("(%d keys)", len(m))
	}
	return fmt.Sprint(m)
}

func waitFor[T any](t *testing.T, inf *core.SharedIndexInformer[T], rv uint64) {
	t.Helper()
	informertest.WaitFor(t, inf, core.ResourceVersion(rv))
}

func itemVersion(o item) int { return o.N }

// del publishes the same DEL marker kv.Delete does, to learn its revision.
func del(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string) (uint64, error) {
	m := nats.NewMsg("$KV." + kv.Bucket() + "." + key)
	m.Header.Set("KV-Operation", "DEL")
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Writers keep changing keys while the informer lists a large bucket; once
// they stop, the cache equals the bucket, and no handler saw a key's
// versions out of order.
//
// History 1 makes the list consumer a plain one from the first sequence;
// a longer history makes the server deliver the last message per subject
// from a skip list and then what came meanwhile.
func TestKVInformerWritersDuringList(t *testing.T) {
	for _, history := range []uint8{1, 8} {
		t.Run(fmt.Sprintf("History%d", history), func(t *testing.T) { writersDuringList(t, history) })
	}
}

func writersDuringList(t *testing.T, history uint8) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{History: history})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const keys = 3000
	version := make([]int, keys)
	for i := range keys {
		version[i] = 1
		if _, err := put(ctx, kv, fmt.Sprintf("k%d", i), 1); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
	lw := newKVLW(t, js, kv.Bucket(), natsinformer.KVOptions[item]{BatchSize: 64})
	order := newRecorder(t)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var last atomic.Uint64
	for w := range 3 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; !stop.Load() || i < 200; i++ {
				k := w + 3*r.IntN(keys/3) // each writer owns its keys
				version[k]++
				var rev uint64
				var err error
				if i%17 == 5 {
					rev, err = del(ctx, js, kv, fmt.Sprintf("k%d", k))
				} else {
					rev, err = put(ctx, kv, fmt.Sprintf("k%d", k), version[k])
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				for {
					l := last.Load()
					if rev <= l || last.CompareAndSwap(l, rev) {
						break
					}
				}
			}
		})
	}
	inf, sink := startInformer[item](t, lw, order)
	synced := lw.Lists() // a list retried before the first sync is not a relist
	stop.Store(true)
	wg.Wait()
	waitFor(t, inf, last.Load())
	want := bucketState(t, kv, "")
	if got := cacheOf(inf, itemVersion); !maps.Equal(got, want) {
		t.Fatalf("after WaitFor(%d) the cache differs from the bucket: got %s, want %s", last.Load(), trim(got), trim(want))
	}
	if n := lw.Lists(); n != synced {
		t.Errorf("informer listed %d times, want no relist after the first sync; errors: %v", n, sink.All())
	}
}

// The server stops and restarts from its store while the informer runs;
// the watch resumes from its last version (no relist) and the cache
// converges with writes made after the restart.
func TestKVInformerServerRestart(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for i := range 20 {
		put(ctx, kv, fmt.Sprintf("k%d", i), 1)
	}
	lw := newKVLW(t, js, kv.Bucket(), natsinformer.KVOptions[item]{IdleCheck: 200 * time.Millisecond})
	order := newRecorder(t)
	inf, sink := startInformer[item](t, lw, order)
	synced := lw.Lists() // a list retried before the first sync is not a relist
	rev, _ := put(ctx, kv, "k1", 2)
	waitFor(t, inf, rev)

	srv.Restart(t)
	for i := range 20 {
		if rev := putAfterRestart(t, ctx, kv, fmt.Sprintf("k%d", i), 3); i == 19 {
			waitFor(t, inf, rev)
		}
	}
	if _, err := del(ctx, js, kv, "k7"); err != nil {
		t.Fatalf("delete after restart: %v", err)
	}
	converge(t, inf, itemVersion, func() map[string]int { return bucketState(t, kv, "") })
	if n := lw.Lists(); n != synced {
		t.Errorf("informer listed %d times after a server restart, want no relist (resume from the last version)", n)
	}
	errs := sink.All()
	t.Logf("errors reported across the restart: %d (first: %v)", len(errs), first(errs))
	for _, err := range errs {
		if errors.Is(err, driver.ErrExpired) {
			t.Errorf("restart reported expiry: %v", err)
		}
	}
}

func first(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}

// Purge, delete and PurgeDeletes arrive as deletes; values expiring by
// MaxAge, and a purge of the stream below the informer's version, make the
// informer relist, after which the cache equals the bucket again.
func TestKVInformerRemovals(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	t.Run("PurgeDeletePurgeDeletes", func(t *testing.T) {
		kv := newBucket(t, js, jetstream.KeyValueConfig{})
		for i := range 6 {
			put(ctx, kv, fmt.Sprintf("k%d", i), 1)
		}
		lw := newKVLW(t, js, kv.Bucket(), natsinformer.KVOptions[item]{IdleCheck: 100 * time.Millisecond})
		inf, _ := startInformer[item](t, lw)
		if err := kv.Purge(ctx, "k1"); err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(ctx, "k2"); err != nil {
			t.Fatal(err)
		}
		converge(t, inf, itemVersion, func() map[string]int { return bucketState(t, kv, "") })
		if _, ok := inf.Indexer().Get("k1"); ok {
			t.Fatalf("purged key still cached")
		}
		if err := kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
			t.Fatal(err)
		}
		rev, _ := put(ctx, kv, "k3", 2)
		waitFor(t, inf, rev)
		converge(t, inf, itemVersion, func() map[string]int { return bucketState(t, kv, "") })
		if len(cacheOf(inf, itemVersion)) != 4 {
			t.Fatalf("cache %v, want 4 keys", cacheOf(inf, itemVersion))
		}
	})
	t.Run("MaxAge", func(t *testing.T) {
		kv := newBucket(t, js, jetstream.KeyValueConfig{TTL: 5 * time.Second})
		for i := range 4 {
			put(ctx, kv, fmt.Sprintf("k%d", i), 1)
		}
		lw := newKVLW(t, js, kv.Bucket(), natsinformer.KVOptions[item]{IdleCheck: 200 * time.Millisecond})
		inf, _ := startInformer[item](t, lw)
		synced := lw.Lists() // a list retried before the first sync is not a relist
		if got := len(cacheOf(inf, itemVersion)); got != 4 {
			t.Fatalf("listed %d keys, want 4", got)
		}
		// The values expire without delete markers; the idle watch notices
		// and the relist empties the cache.
		converge(t, inf, itemVersion, func() map[string]int { return map[string]int{} })
		if n := lw.Lists(); n <= synced {
			t.Errorf("informer listed %d times, want a relist after expiry", n)
		}
		rev, _ := put(ctx, kv, "fresh", 5)
		waitFor(t, inf, rev)
		if o, ok := inf.Indexer().Get("fresh"); !ok || o.N != 5 {
			t.Fatalf("after expiry a new key is not cached: %v %v", o, ok)
		}
	})
	// The informer's own connection reconnects slowly, so that the stream
	// can be purged behind its back while it is away. Purging from k9 on
	// leaves the first sequence at RV+1 but removes every listed value;
	// purging from k10 puts it past RV+1.
	for _, c := range []struct {
		name string
		from string
	}{{"FirstSeqAtRVPlus1", "k9"}, {"FirstSeqPastRV", "k10"}} {
		t.Run(c.name, func(t *testing.T) {
			kv := newBucket(t, js, jetstream.KeyValueConfig{})
			for i := range 5 {
				put(ctx, kv, fmt.Sprintf("k%d", i), 1)
			}
			nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(3*time.Second), nats.ReconnectJitter(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			ijs, _ := jetstream.New(nc)
			lw := newKVLW(t, ijs, kv.Bucket(), natsinformer.KVOptions[item]{IdleCheck: time.Hour})
			inf, _ := startInformer[item](t, lw)
			synced := lw.Lists() // a list retried before the first sync is not a relist
			srv.Restart(t)
			st := afterRestart(t, ctx, "stream info", func(ctx context.Context) (jetstream.Stream, error) {
				return js.Stream(ctx, "KV_"+kv.Bucket())
			})
			revs := map[string]uint64{}
			revs["k9"], _ = put(ctx, kv, "k9", 9)
			revs["k10"], _ = put(ctx, kv, "k10", 10)
			if err := st.Purge(ctx, jetstream.WithPurgeSequence(revs[c.from])); err != nil {
				t.Fatal(err)
			}
			put(ctx, kv, "k11", 11)
			converge(t, inf, itemVersion, func() map[string]int { return bucketState(t, kv, "") })
			if n := lw.Lists(); n <= synced {
				t.Errorf("informer listed %d times, want a relist after the purge", n)
			}
			if got := cacheOf(inf, itemVersion); len(got) > 3 || got["k11"] != 11 {
				t.Errorf("cache %v after the purge", got)
			}
		})
	}
}

// WaitFor returns for a revision written outside the informer's prefix.
func TestKVReadYourWritesOtherKey(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lw := newKVLW(t, js, kv.Bucket(), natsinformer.KVOptions[item]{Prefix: "mine.", IdleCheck: time.Hour})
	inf, _ := startInformer[item](t, lw)
	rev, _ := put(ctx, kv, "mine.a", 1)
	waitFor(t, inf, rev)
	for i := range 5 {
		rev, err := put(ctx, kv, "theirs.b", i)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, inf, rev) // only a bookmark can satisfy this
	}
	if got := cacheOf(inf, itemVersion); !maps.Equal(got, map[string]int{"a": 1}) {
		t.Fatalf("cache %v, want only a=1", got)
	}
}

// An undecodable value is reported with bucket, key and revision; the rest
// of the cache stays right and the watch goes on.
func TestKVBadPayload(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	put(ctx, kv, "good", 1)
	badListed, _ := kv.Put(ctx, "bad1", []byte("{not json"))
	lw := newKVLW(t, js, kv.Bucket(), natsinformer.KVOptions[item]{})
	inf, sink := startInformer[item](t, lw)
	badWatched, _ := kv.Put(ctx, "bad2", []byte("\x00garbage"))
	rev, _ := put(ctx, kv, "good", 2)
	waitFor(t, inf, rev)
	if got := cacheOf(inf, itemVersion); !maps.Equal(got, map[string]int{"good": 2}) {
		t.Fatalf("cache %v, want good=2 only", got)
	}
	want := map[string]uint64{"bad1": badListed, "bad2": badWatched}
	for _, err := range sink.All() {
		var de *driver.DecodeError
		if errors.As(err, &de) {
			if r, ok := want[de.Key]; ok && uint64(de.RV) == r && strings.Contains(de.Source, kv.Bucket()) {
				delete(want, de.Key)
			}
		}
	}
	if len(want) > 0 {
		t.Fatalf("no DecodeError naming bucket, key and revision for %v; reported: %v", want, sink.All())
	}
	rev, _ = put(ctx, kv, "bad2", 7)
	waitFor(t, inf, rev)
	if o, ok := inf.Indexer().Get("bad2"); !ok || o.N != 7 {
		t.Fatalf("a fixed value is not cached: %v %v", o, ok)
	}
}

// A bucket deleted and created again restarts its revisions: a watch
// from a version of the old bucket must not take the new bucket's
// revisions for the old one's (it expires, and a List reads the new
// bucket). An informer that sees the bucket gone in between stops with a
// permanent error instead (TestKVBucketDeletedIsPermanent).
func TestKVBucketRecreated(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	// Another bucket keeps the account's stream directory from emptying:
	// after a stream delete nats-server 2.15.2 removes that directory, if
	// empty, in a goroutine (stream.go, stop), which can race the new
	// bucket's mkdir ("could not create storage directory", seen in CI).
	newBucket(t, js, jetstream.KeyValueConfig{})
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 3 {
		put(ctx, kv, fmt.Sprintf("old%d", i), 1)
	}
	lw, err := natsinformer.NewKV(ctx, js, kv.Bucket(), natsinformer.KVOptions[item]{})
	if err != nil {
		t.Fatal(err)
	}
	_, rv := listAll[item](t, lw)
	if err := js.DeleteKeyValue(ctx, kv.Bucket()); err != nil {
		t.Fatal(err)
	}
	kv = newBucket(t, js, jetstream.KeyValueConfig{Bucket: kv.Bucket()})
	for i := range 5 { // past the old head, so that positions alone look fine
		put(ctx, kv, fmt.Sprintf("new%d", i), 2)
	}
	err = lw.Watch(ctx, rv, driver.WatchOptions[item]{Emit: func(evs []driver.Event[item]) error {
		t.Errorf("watch of the recreated bucket from the old one's version %d emitted %+v", rv, evs)
		return nil
	}})
	if !errors.Is(err, driver.ErrExpired) {
		t.Fatalf("Watch(%d) on the recreated bucket: %v, want an error matching core.ErrExpired", rv, err)
	}
	listed, _ := listAll[item](t, lw)
	if len(listed) != 5 || listed["new4"].N != 2 {
		t.Fatalf("List of the recreated bucket: %v, want new0..new4", listed)
	}
}

// With LimitMarkerTTL the server leaves a marker when MaxAge removes a
// value: the watch reports it as a delete, and no relist is needed.
func TestKVMaxAgeWithMarkers(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{TTL: 5 * time.Second, LimitMarkerTTL: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 3 {
		put(ctx, kv, fmt.Sprintf("k%d", i), 1)
	}
	lw := newKVLW(t, js, kv.Bucket(), natsinformer.KVOptions[item]{IdleCheck: time.Hour})
	var deletes atomic.Int32
	inf, _ := startInformer[item](t, lw, core.ResourceEventHandlerFuncs[item]{
		DeleteFunc: func(string, item, bool) { deletes.Add(1) },
	})
	synced := lw.Lists() // a list retried before the first sync is not a relist
	converge(t, inf, itemVersion, func() map[string]int { return map[string]int{} })
	if n := lw.Lists(); n != synced {
		t.Errorf("informer listed %d times, want no relist after the first sync (markers are deletes)", n)
	}
	if n := deletes.Load(); n != 3 {
		t.Errorf("handler saw %d deletes, want 3", n)
	}
}

// A pluggable codec decodes values that are not JSON.
func TestKVCustomCodec(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv.Put(ctx, "a", []byte("v=3"))
	codec := codecs.Funcs[item]{DecodeFunc: func(b []byte) (item, error) {
		var it item
		_, err := fmt.Sscanf(string(b), "v=%d", &it.N)
		return it, err
	}}
	lw := newKVLW(t, js, kv.Bucket(), natsinformer.KVOptions[item]{Codec: codec})
	inf, _ := startInformer[item](t, lw)
	rev, _ := kv.Put(ctx, "b", []byte("v=4"))
	waitFor(t, inf, rev)
	if got := cacheOf(inf, itemVersion); !maps.Equal(got, map[string]int{"a": 3, "b": 4}) {
		t.Fatalf("cache %v, want a=3 b=4", got)
	}
}

// The stream is purged while the informer's first List reads it: messages
// the server counted as pending vanish before delivery. The List must still
// finish, and the cache must end up equal to the (empty, then refilled)
// bucket, whichever way the race goes.
func TestKVPurgeDuringList(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{History: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for i := range 3000 {
		put(ctx, kv, fmt.Sprintf("k%d", i), 1)
	}
	st, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	lw := newKVLW(t, js, kv.Bucket(), natsinformer.KVOptions[item]{BatchSize: 16, IdleCheck: 200 * time.Millisecond})
	purged := make(chan error, 1)
	go func() {
		time.Sleep(5 * time.Millisecond) // aims at the List; either outcome is checked
		purged <- st.Purge(ctx)
	}()
	inf, _ := startInformer[item](t, lw)
	if err := <-purged; err != nil {
		t.Fatal(err)
	}
	rev, _ := put(ctx, kv, "after", 2)
	waitFor(t, inf, rev)
	converge(t, inf, itemVersion, func() map[string]int { return bucketState(t, kv, "") })
}

// With History 1, rewriting keys while the informer is away moves the
// first sequence past its version without losing anything it needs: each
// key's newest value is still there. The watch resumes without a relist.
func TestKVHistoryOneResumesWithoutRelist(t *testing.T) {
	srv := harness.StartNATS(t)
	js := srv.JetStream(t)
	kv := newBucket(t, js, jetstream.KeyValueConfig{History: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for i := range 5 {
		put(ctx, kv, fmt.Sprintf("k%d", i), 1)
	}
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(3*time.Second), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ijs, _ := jetstream.New(nc)
	lw := newKVLW(t, ijs, kv.Bucket(), natsinformer.KVOptions[item]{IdleCheck: time.Hour})
	order := newRecorder(t)
	inf, sink := startInformer[item](t, lw, order)
	synced := lw.Lists()
	rv := inf.LastSyncResourceVersion()
	srv.Restart(t)
	for n := 2; n <= 4; n++ {
		for i := range 5 {
			putAfterRestart(t, ctx, kv, fmt.Sprintf("k%d", i), n)
		}
	}
	st, _ := js.Stream(ctx, "KV_"+kv.Bucket())
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq <= uint64(rv)+1 {
		t.Fatalf("setup: first sequence %d is not past the informer's version %d", info.State.FirstSeq, rv)
	}
	converge(t, inf, itemVersion, func() map[string]int { return bucketState(t, kv, "") })
	if n := lw.Lists(); n != synced {
		t.Errorf("informer listed %d times, want no relist; errors: %v", n, sink.All())
	}
}
