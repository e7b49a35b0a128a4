package etcdinformer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// converge is the deadline for a cache to catch up with etcd: a bound for
// a wedged informer, not a performance target.
const converge = 60 * time.Second

// itemVersion is the version the Recorders read.
func itemVersion(it item) int64 { return int64(it.Version) }

// fastBackoff retries at once, so that a test does not wait out client-go's
// defaults after the faults it injects.
var fastBackoff = core.Backoff{Initial: 50 * time.Millisecond, Max: time.Second}

// keyLog returns the lines rec logged for key.
func keyLog(log []string, key string) []string {
	var out []string
	for _, l := range log {
		if f := strings.Fields(l); len(f) > 1 && f[1] == key {
			out = append(out, l)
		}
	}
	return out
}

// expectKey waits until the lines rec logged for key are want.
func expectKey(t *testing.T, rec *informertest.Recorder[item], key string, want ...string) {
	t.Helper()
	rec.Wait(fmt.Sprintf("%s: %q", key, want), func(log []string, _ map[string]int64) bool {
		return slices.Equal(keyLog(log, key), want)
	})
}

// etcdState reads the items under prefix straight from etcd.
func etcdState(t *testing.T, c *clientv3.Client, prefix string) (map[string]item, core.ResourceVersion) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read %q from etcd: %v", prefix, err)
	}
	m := make(map[string]item, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var it item
		if err := json.Unmarshal(kv.Value, &it); err != nil {
			continue // undecodable values are not in the cache either
		}
		m[strings.TrimPrefix(string(kv.Key), prefix)] = it
	}
	return m, core.ResourceVersion(resp.Header.Revision)
}

func cacheState(inf *core.SharedIndexInformer[item]) map[string]item {
	m := make(map[string]item)
	inf.Indexer().Range(func(key string, obj item) bool {
		m[key] = obj
		return true
	})
	return m
}

// requireConverged waits until the cache has applied etcd's revision as
// read now, then requires the cache to equal the prefix.
func requireConverged(t *testing.T, inf *core.SharedIndexInformer[item], c *clientv3.Client, prefix string) map[string]item {
	t.Helper()
	want, rev := etcdState(t, c, prefix)
	informertest.WaitFor(t, inf, rev)
	got := cacheState(inf)
	if !maps.Equal(got, want) {
		t.Fatalf("cache after WaitFor(%d) differs from etcd:\n cache %v\n etcd  %v", rev, got, want)
	}
	return got
}

func newLW(t testing.TB, c *clientv3.Client, prefix string, pageSize int64) *etcdinformer.Prefix[item] {
	t.Helper()
	lw, err := etcdinformer.NewPrefix(context.Background(), c, prefix, etcdinformer.Options[item]{PageSize: pageSize})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return lw
}

// TestInformerListUnderConcurrentWriters starts an informer while writers
// put and delete their own keys, then checks that every handler saw each
// key's changes after its first sighting without a gap or a repeat, and
// that the cache equals the prefix.
func TestInformerListUnderConcurrentWriters(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("writers")
	ctx, cancel := context.WithTimeout(context.Background(), 5*converge)
	defer cancel()

	// Enough keys for many pages of 7, so that the List takes a while and
	// writes land between its pages.
	for i := 0; i < 200; i++ {
		if _, err := putItem(ctx, c, fmt.Sprintf("%sseed-%03d", prefix, i), item{Version: 1}); err != nil {
			t.Fatal(err)
		}
	}

	// Each writer owns its keys. A key's operations are numbered 1, 2, ...;
	// every 5th is a delete, the others put the operation's number, so a
	// put of n follows either a put of n-1 or a delete that came after a
	// put of n-2.
	const writers, keysPerWriter, opsPerWriter = 4, 5, 150
	var wg sync.WaitGroup
	writeErr := make(chan error, writers)
	started := make(chan struct{})
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := make([]int, keysPerWriter)
			for op := 0; op < opsPerWriter; op++ {
				if op == 10 && w == 0 {
					close(started)
				}
				k := op % keysPerWriter
				n[k]++
				key := fmt.Sprintf("%sw%d-k%d", prefix, w, k)
				var err error
				if n[k]%5 == 0 {
					_, err = c.Delete(ctx, key)
				} else {
					_, err = putItem(ctx, c, key, item{Version: n[k]})
				}
				if err != nil {
					writeErr <- err
					return
				}
			}
		}()
	}

	<-started
	// The Recorder fails the test if a key's version goes backwards; the
	// checks below add that no change is skipped.
	rec := informertest.NewRecorder(t, itemVersion)
	inf, errs := informertest.Run(t, newLW(t, c, prefix, 7), core.InformerOptions[item]{Name: "writers"}, rec)
	wg.Wait()
	close(writeErr)
	for err := range writeErr {
		t.Fatalf("writer: %v", err)
	}
	final := requireConverged(t, inf, c, prefix)
	// The cache is up to date; let the handler catch up with it.
	want := make(map[string]int64, len(final))
	for k, it := range final {
		want[k] = itemVersion(it)
	}
	rec.WaitState(want)

	for _, err := range errs.All() {
		t.Errorf("informer reported: %v", err)
	}
	events := map[string][]string{}
	for _, l := range rec.Log() {
		key := strings.Fields(l)[1]
		events[key] = append(events[key], l)
	}
	checked := 0
	for key, seq := range events {
		if strings.HasPrefix(key, "seed-") {
			if len(seq) != 1 || seq[0] != "add "+key+" v=1 initial" {
				t.Errorf("seed key %s: %v, want one initial add", key, seq)
			}
			continue
		}
		checked++
		// After the first sighting, every change must be the next one.
		last, deleted := int64(-1), false
		for i, ev := range seq {
			kind, v := parseLine(t, ev)
			switch {
			case i == 0:
			case strings.HasSuffix(ev, " unknown"):
				t.Errorf("%s: delete inferred by a relist, but nothing should have been relisted: %v", key, seq)
			case kind == "delete":
				if deleted || v != last {
					t.Errorf("%s: %s after version %d (deleted %v): %v", key, ev, last, deleted, seq)
				}
			case deleted:
				if kind != "add" || v != last+2 {
					t.Errorf("%s: %s after the delete of version %d: %v", key, ev, last, seq)
				}
			default:
				if kind != "update" || v != last+1 {
					t.Errorf("%s: %s after version %d: %v", key, ev, last, seq)
				}
			}
			deleted = kind == "delete"
			last = v
		}
	}
	if checked != writers*keysPerWriter {
		t.Errorf("handler saw %d writer keys, want %d", checked, writers*keysPerWriter)
	}
}

// parseLine returns the kind and the (new) version of a Recorder line:
// "add k v=3 [initial]", "update k 3->4", "delete k v=4 [unknown]".
func parseLine(t *testing.T, line string) (kind string, v int64) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 3 {
		t.Fatalf("bad Recorder line %q", line)
	}
	num := strings.TrimPrefix(f[2], "v=")
	if i := strings.Index(num, "->"); i >= 0 {
		num = num[i+2:]
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		t.Fatalf("bad Recorder line %q: %v", line, err)
	}
	return f[0], v
}

// TestInformerResumesAfterServerRestart stops etcd under a running
// informer and starts it again on the same data dir: the informer must
// carry on from its last revision without listing again.
func TestInformerResumesAfterServerRestart(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("restart")
	ctx, cancel := context.WithTimeout(context.Background(), 5*converge)
	defer cancel()
	for i := 0; i < 10; i++ {
		if _, err := putItem(ctx, c, fmt.Sprintf("%sk%d", prefix, i), item{Version: 1}); err != nil {
			t.Fatal(err)
		}
	}
	spy := informertest.Wrap[item](newLW(t, c, prefix, 0))
	rec := informertest.NewRecorder(t, itemVersion)
	inf, _ := informertest.Run(t, spy, core.InformerOptions[item]{Backoff: fastBackoff}, rec)
	for i := 0; i < 5; i++ {
		if _, err := putItem(ctx, c, fmt.Sprintf("%sk%d", prefix, i), item{Version: 2}); err != nil {
			t.Fatal(err)
		}
	}
	requireConverged(t, inf, c, prefix)

	srv.Stop()
	srv.Restart(t)
	for i := 3; i < 8; i++ {
		if _, err := putItem(ctx, c, fmt.Sprintf("%sk%d", prefix, i), item{Version: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Delete(ctx, prefix+"k9"); err != nil {
		t.Fatal(err)
	}
	got := requireConverged(t, inf, c, prefix)
	if got["k7"].Version != 3 || got["k0"].Version != 2 || len(got) != 9 {
		t.Fatalf("cache after restart: %v", got)
	}
	if n := spy.Lists(); n != 1 {
		t.Fatalf("informer listed %d times, want 1 (the restart must resume the watch, not relist)", n)
	}
	expectKey(t, rec, "k9", "add k9 v=1 initial", "delete k9 v=1") // the delete carries the last object
	expectKey(t, rec, "k4", "add k4 v=1 initial", "update k4 1->2", "update k4 2->3")
	expectKey(t, rec, "k0", "add k0 v=1 initial", "update k0 1->2")
}

// TestInformerRelistsAfterCompaction keeps the informer's watch down while
// keys change and etcd compacts past the informer's revision: the watch
// then expires, the informer relists, and keys deleted meanwhile leave the
// cache as deletes.
func TestInformerRelistsAfterCompaction(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("compact")
	ctx, cancel := context.WithTimeout(context.Background(), 5*converge)
	defer cancel()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := putItem(ctx, c, prefix+k, item{Version: 1}); err != nil {
			t.Fatal(err)
		}
	}
	spy := informertest.Wrap[item](newLW(t, c, prefix, 0))
	rec := informertest.NewRecorder(t, itemVersion)
	inf, errs := informertest.Run(t, spy, core.InformerOptions[item]{Backoff: fastBackoff}, rec)
	requireConverged(t, inf, c, prefix)
	applied := inf.AppliedVersion()

	// Keep the informer's watch down while etcd moves on and compacts.
	gate := spy.HoldWatches()
	spy.Break(errors.New("connection dropped by the test"))
	if _, err := c.Delete(ctx, prefix+"b"); err != nil {
		t.Fatal(err)
	}
	if _, err := putItem(ctx, c, prefix+"a", item{Version: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := putItem(ctx, c, prefix+"d", item{Version: 1}); err != nil {
		t.Fatal(err)
	}
	head := srv.Head(t)
	srv.Compact(t, head)
	if core.ResourceVersion(head) <= applied {
		t.Fatalf("compacted at %d, not past the informer's %d", head, applied)
	}
	gate.Release()

	got := requireConverged(t, inf, c, prefix)
	if _, ok := got["b"]; ok || got["a"].Version != 2 || got["d"].Version != 1 {
		t.Fatalf("cache after relist: %v", got)
	}
	if n := spy.Lists(); n != 2 {
		t.Fatalf("informer listed %d times, want 2 (the first list and the relist after expiry)", n)
	}
	expectKey(t, rec, "b", "add b v=1 initial", "delete b v=1 unknown") // a delete inferred by the relist
	expectKey(t, rec, "d", "add d v=1")                                 // a relist's adds are not initial
	err := errs.Wait(t, "an expired error", func(err error) bool { return errors.Is(err, driver.ErrExpired) })
	if !strings.Contains(err.Error(), prefix) {
		t.Errorf("expired error does not name the prefix %q: %v", prefix, err)
	}
}

// TestInformerReadYourWrites: after WaitFor(R) for the revision R of a
// write, the lister sees the write; WaitFor also returns for a revision
// written under another prefix, which only a progress request reaches
// (the server's periodic notifications are turned off here).
func TestInformerReadYourWrites(t *testing.T) {
	srv := harness.StartEtcdWith(t, harness.EtcdOptions{ProgressNotifyInterval: time.Hour})
	c := srv.Client(t)
	prefix := uniquePrefix("ryw")
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	inf, _ := informertest.Run(t, newLW(t, c, prefix, 0), core.InformerOptions[item]{})
	lister := inf.Lister()

	for i := 1; i <= 20; i++ {
		rev, err := putItem(ctx, c, prefix+"counter", item{Version: i})
		if err != nil {
			t.Fatal(err)
		}
		if err := inf.WaitFor(ctx, rev); err != nil {
			t.Fatalf("WaitFor(%d): %v", rev, err)
		}
		got, ok := lister.Get("counter")
		if !ok || got.Version != i {
			t.Fatalf("after WaitFor(%d) the lister has %v (present %v), want version %d", rev, got, ok, i)
		}
	}

	other, err := putItem(ctx, c, prefix[:len(prefix)-1]+"-elsewhere/x", item{Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.WaitFor(ctx, other); err != nil {
		t.Fatalf("WaitFor(%d) for a write under another prefix: %v", other, err)
	}
	if av := inf.AppliedVersion(); av < other {
		t.Fatalf("WaitFor(%d) returned with AppliedVersion %d", other, av)
	}
	if _, ok := lister.Get("x"); ok {
		t.Fatal("a key of another prefix is in the cache")
	}
}

// TestInformerUndecodableValue: a value that is not JSON is reported with
// the prefix, key and revision (not its bytes), the rest of the cache stays
// right, and a later good value for the key is applied.
func TestInformerUndecodableValue(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("bad")
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	if _, err := putItem(ctx, c, prefix+"good", item{Version: 1}); err != nil {
		t.Fatal(err)
	}
	const secret = "password=hunter2"
	listed, err := c.Put(ctx, prefix+"bad-listed", secret)
	if err != nil {
		t.Fatal(err)
	}
	inf, reported := informertest.Run(t, newLW(t, c, prefix, 0), core.InformerOptions[item]{})

	watched, err := c.Put(ctx, prefix+"bad-watched", secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := putItem(ctx, c, prefix+"after", item{Version: 7}); err != nil {
		t.Fatal(err)
	}
	requireConverged(t, inf, c, prefix)

	errs := reported.All()
	want := map[string]int64{"bad-listed": listed.Header.Revision, "bad-watched": watched.Header.Revision}
	for _, err := range errs {
		var de *driver.DecodeError
		if !errors.As(err, &de) {
			t.Errorf("unexpected error: %v", err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error shows the value: %v", err)
		}
		if !strings.Contains(err.Error(), prefix) {
			t.Errorf("error does not name the prefix %q: %v", prefix, err)
		}
		if rev, ok := want[de.Key]; !ok || int64(de.RV) != rev {
			t.Errorf("decode error for key %q at %d; want one of %v", de.Key, de.RV, want)
		}
		delete(want, de.Key)
	}
	if len(want) != 0 {
		t.Fatalf("no decode error for %v; errors: %v", want, errs)
	}

	rev, err := putItem(ctx, c, prefix+"bad-watched", item{Version: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.WaitFor(ctx, core.ResourceVersion(rev)); err != nil {
		t.Fatal(err)
	}
	if got, ok := inf.Lister().Get("bad-watched"); !ok || got.Version != 3 {
		t.Fatalf("fixed value not applied: %v %v", got, ok)
	}
}

// TestInformerValueNoLongerDecodes: a key whose value a producer rewrites
// in a shape the type cannot hold leaves the cache with a delete
// (finalStateUnknown, carrying the last value that decoded) and a
// DecodeError naming it; the previous value never stays looking current.
// Under StopOnUndecodable the informer stops instead, frozen and not Live.
func TestInformerValueNoLongerDecodes(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()

	prefix := uniquePrefix("undecodable")
	if _, err := putItem(ctx, c, prefix+"k", item{Version: 1}); err != nil {
		t.Fatal(err)
	}
	rec := informertest.NewRecorder(t, func(it item) int64 { return int64(it.Version) })
	inf, reported := informertest.Run(t, newLW(t, c, prefix, 0), core.InformerOptions[item]{}, rec)
	rec.Expect("add k v=1 initial")
	bad, err := c.Put(ctx, prefix+"k", `{"version":"not a number"}`)
	if err != nil {
		t.Fatal(err)
	}
	rec.Expect("delete k v=1 unknown")
	informertest.WaitFor(t, inf, core.ResourceVersion(bad.Header.Revision))
	if got, ok := inf.Lister().Get("k"); ok {
		t.Fatalf("k = %+v after its value stopped decoding", got)
	}
	var de *driver.DecodeError
	if !slices.ContainsFunc(reported.All(), func(err error) bool {
		return errors.As(err, &de) && de.Key == "k" && int64(de.RV) == bad.Header.Revision
	}) {
		t.Fatalf("no DecodeError for k at %d: %v", bad.Header.Revision, reported.All())
	}
	requireConverged(t, inf, c, prefix)

	prefix = uniquePrefix("undecodable-stop")
	if _, err := putItem(ctx, c, prefix+"k", item{Version: 1}); err != nil {
		t.Fatal(err)
	}
	stopping, _ := informertest.Run(t, newLW(t, c, prefix, 0), core.InformerOptions[item]{Undecodable: core.StopOnUndecodable})
	if _, err := c.Put(ctx, prefix+"k", `{"version":"not a number"}`); err != nil {
		t.Fatal(err)
	}
	if err := stopping.WaitFor(ctx, core.ResourceVersion(bad.Header.Revision+1_000_000)); !errors.Is(err, driver.ErrPermanent) || !errors.As(err, &de) {
		t.Fatalf("WaitFor past the undecodable value = %v; want the permanent DecodeError", err)
	}
	if stopping.Live() || !stopping.HasSynced() {
		t.Fatalf("stopped informer: Live %v, HasSynced %v; want false, true", stopping.Live(), stopping.HasSynced())
	}
	if got, _ := stopping.Lister().Get("k"); got.Version != 1 {
		t.Fatalf("frozen cache holds %+v, want version 1", got)
	}
}
