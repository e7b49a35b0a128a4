package etcdinformer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	etcdinformer "github.com/dbinformer/dbinformer/adapters/etcd"
	"github.com/dbinformer/dbinformer/core"
	codecs "github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/integration/harness"
)

// list collects a List into key -> event.
func list[T any](t *testing.T, lw driver.ListerWatcher[T]) (map[string]driver.Event[T], core.ResourceVersion) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	got := make(map[string]driver.Event[T])
	rv, err := lw.List(ctx, driver.ListSink[T]{Emit: func(ev driver.Event[T]) error {
		if _, dup := got[ev.Key]; dup {
			t.Errorf("List emitted %q twice", ev.Key)
		}
		got[ev.Key] = ev
		return nil
	}})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return got, rv
}

func keysOf[T any](m map[string]driver.Event[T]) []string {
	return slices.Sorted(maps.Keys(m))
}

// openWatch is a Watch running on its own goroutine, its batches copied
// to a channel (Watch may reuse the slice once Emit returns).
type openWatch[T any] struct {
	batches  chan []driver.Event[T]
	progress chan struct{}
	cancel   context.CancelFunc
	done     chan error
	pending  []driver.Event[T] // changes received, not yet returned by nextChange
}

// startWatch starts lw.Watch(from); the watch is stopped at cleanup.
func startWatch[T any](t *testing.T, lw driver.ListerWatcher[T], from core.ResourceVersion) *openWatch[T] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &openWatch[T]{
		batches:  make(chan []driver.Event[T]),
		progress: make(chan struct{}),
		cancel:   cancel,
		done:     make(chan error, 1),
	}
	go func() {
		w.done <- lw.Watch(ctx, from, driver.WatchOptions[T]{
			Progress: w.progress,
			Emit: func(b []driver.Event[T]) error {
				if len(b) == 0 {
					t.Errorf("Watch emitted an empty batch")
				}
				select {
				case w.batches <- slices.Clone(b):
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			},
		})
	}()
	t.Cleanup(func() { w.stop(t) })
	return w
}

// stop cancels the watch and requires it to end with driver.ErrWatchStopped
// (unless it had already ended).
func (w *openWatch[T]) stop(t *testing.T) {
	t.Helper()
	w.cancel()
	if w.done == nil {
		return
	}
	err := <-w.done
	w.done = nil
	if !errors.Is(err, driver.ErrWatchStopped) || !errors.Is(err, context.Canceled) {
		t.Errorf("Watch after cancel returned %v, want core.ErrWatchStopped and context.Canceled", err)
	}
}

// end waits for Watch to return on its own and returns its error.
func (w *openWatch[T]) end(t *testing.T) error {
	t.Helper()
	select {
	case err := <-w.done:
		w.done = nil
		if err == nil {
			t.Fatal("Watch returned nil")
		}
		return err
	case b := <-w.batches:
		t.Fatalf("watch delivered %+v, want it to end", b)
	case <-time.After(converge):
		t.Fatalf("Watch did not return within %v", converge)
	}
	return nil
}

// next returns the next batch.
func (w *openWatch[T]) next(t *testing.T) []driver.Event[T] {
	t.Helper()
	select {
	case b := <-w.batches:
		return b
	case err := <-w.done:
		w.done = nil
		t.Fatalf("Watch returned %v", err)
	case <-time.After(converge):
		t.Fatalf("no batch within %v", converge)
	}
	return nil
}

// nextChange returns the next event that is not a Bookmark (one at a
// time: a watch response may carry several).
func (w *openWatch[T]) nextChange(t *testing.T) driver.Event[T] {
	t.Helper()
	deadline := time.Now().Add(converge)
	for len(w.pending) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no change within %v, only bookmarks", converge)
		}
		for _, ev := range w.next(t) {
			if ev.Type != driver.Bookmark {
				w.pending = append(w.pending, ev)
			}
		}
	}
	ev := w.pending[0]
	w.pending = w.pending[1:]
	return ev
}

// requestProgress asks the watch for a Bookmark.
func (w *openWatch[T]) requestProgress(t *testing.T) {
	t.Helper()
	select {
	case w.progress <- struct{}{}:
	case err := <-w.done:
		w.done = nil
		t.Fatalf("Watch returned %v", err)
	case <-time.After(converge):
		t.Fatalf("the watch took no progress request within %v", converge)
	}
}

func mustPut(t *testing.T, c *clientv3.Client, key, value string) core.ResourceVersion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	resp, err := c.Put(ctx, key, value)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return core.ResourceVersion(resp.Header.Revision)
}

func mustDelete(t *testing.T, c *clientv3.Client, key string) core.ResourceVersion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	resp, err := c.Delete(ctx, key)
	if err != nil {
		t.Fatalf("delete %q: %v", key, err)
	}
	return core.ResourceVersion(resp.Header.Revision)
}

func rawLW(t *testing.T, c *clientv3.Client, prefix string, literal bool) *etcdinformer.Prefix[[]byte] {
	t.Helper()
	lw, err := etcdinformer.NewPrefix(context.Background(), c, prefix, etcdinformer.Options[[]byte]{LiteralPrefix: literal, Codec: codecs.Raw{}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return lw
}

// TestPrefixIsADirectory: "/a" and "/ab" do not mix unless LiteralPrefix
// asks for byte-for-byte matching; keys are what follows the prefix.
func TestPrefixIsADirectory(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	for _, k := range []string{"/a/x", "/a/y/z", "/ab/x", "/a", "/b/x"} {
		mustPut(t, c, k, "v"+k)
	}

	for _, p := range []string{"/a", "/a/"} {
		lw := rawLW(t, c, p, false)
		if lw.Prefix() != "/a/" {
			t.Errorf("Prefix(%q) = %q, want /a/", p, lw.Prefix())
		}
		got, _ := list(t, lw)
		if k := keysOf(got); !slices.Equal(k, []string{"x", "y/z"}) {
			t.Errorf("prefix %q lists %v, want [x y/z]", p, k)
		}
		if string(got["y/z"].Object) != "v/a/y/z" {
			t.Errorf("prefix %q: y/z = %q", p, got["y/z"].Object)
		}
	}
	lw := rawLW(t, c, "/ab", false)
	if got, _ := list(t, lw); !slices.Equal(keysOf(got), []string{"x"}) || string(got["x"].Object) != "v/ab/x" {
		t.Errorf("prefix /ab lists %v", got)
	}
	lit := rawLW(t, c, "/a", true)
	if got, _ := list(t, lit); !slices.Equal(keysOf(got), []string{"", "/x", "/y/z", "b/x"}) {
		t.Errorf("literal prefix /a lists %v, want [\"\" /x /y/z b/x]", keysOf(got))
	}

	// The watch of "/a" ignores "/ab", and "/ab" ignores "/a".
	_, rv := list(t, lw)
	wa := startWatch[[]byte](t, rawLW(t, c, "/a", false), rv)
	wab := startWatch[[]byte](t, lw, rv)
	mustPut(t, c, "/ab/only-ab", "1")
	mustPut(t, c, "/a/only-a", "1")
	if ev := wa.nextChange(t); ev.Key != "only-a" {
		t.Errorf("watch of /a got %+v, want only-a", ev)
	}
	if ev := wab.nextChange(t); ev.Key != "only-ab" {
		t.Errorf("watch of /ab got %+v, want only-ab", ev)
	}
}

// TestEmptyPrefix covers every key, and keys are the whole etcd keys.
func TestEmptyPrefix(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	mustPut(t, c, "plain", "1")
	mustPut(t, c, "/dir/k", "2")
	mustPut(t, c, "\xff\xff", "3")
	lw := rawLW(t, c, "", false)
	if lw.Prefix() != "" {
		t.Fatalf("Prefix() = %q, want empty", lw.Prefix())
	}
	got, rv := list(t, lw)
	if k := keysOf(got); !slices.Equal(k, []string{"/dir/k", "plain", "\xff\xff"}) {
		t.Fatalf("empty prefix lists %q", k)
	}
	w := startWatch[[]byte](t, lw, rv)
	mustPut(t, c, "anything", "4")
	if ev := w.nextChange(t); ev.Key != "anything" || string(ev.Object) != "4" {
		t.Fatalf("watch of the empty prefix got %+v", ev)
	}
}

// TestListPinnedAcrossPages writes between the pages of a List: every page
// must still read the first page's revision.
func TestListPinnedAcrossPages(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("pinned")
	for i := 0; i < 10; i++ {
		mustPut(t, c, fmt.Sprintf("%sk%02d", prefix, i), fmt.Sprint(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	lw, err := etcdinformer.NewPrefix(ctx, c, prefix, etcdinformer.Options[[]byte]{Codec: codecs.Raw{}, PageSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	var estimate int64 = -1
	got := map[string]string{}
	emitted := 0
	rv, err := lw.List(ctx, driver.ListSink[[]byte]{
		Estimate: func(n int64) { estimate = n },
		Emit: func(ev driver.Event[[]byte]) error {
			emitted++
			got[ev.Key] = string(ev.Object)
			if ev.Type != driver.Added || !ev.HasObject || ev.Err != nil {
				t.Errorf("list event %+v", ev)
			}
			if emitted == 2 {
				// Changes behind and ahead of the reader, after the
				// first page was read.
				mustPut(t, c, prefix+"k00", "changed")
				mustPut(t, c, prefix+"k09", "changed")
				mustPut(t, c, prefix+"k05a", "new")
				mustDelete(t, c, prefix+"k07")
			}
			return nil
		},
	})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if estimate != 10 {
		t.Errorf("Estimate got %d, want 10", estimate)
	}
	want := map[string]string{}
	for i := 0; i < 10; i++ {
		want[fmt.Sprintf("k%02d", i)] = fmt.Sprint(i)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("List at %d saw writes made after its first page:\n got  %v\n want %v", rv, got, want)
	}
	// The watch from the List's revision delivers exactly those writes.
	w := startWatch[[]byte](t, lw, rv)
	var seen []string
	for len(seen) < 4 {
		ev := w.nextChange(t)
		seen = append(seen, ev.Type.String()+" "+ev.Key)
	}
	if want := []string{"Modified k00", "Modified k09", "Added k05a", "Deleted k07"}; !slices.Equal(seen, want) {
		t.Fatalf("watch from the List's revision: %v, want %v", seen, want)
	}
}

// TestWatchEvents checks types, objects and revisions of puts and deletes,
// including a delete whose previous value etcd has compacted away.
func TestWatchEvents(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("events")
	lw := rawLW(t, c, prefix, false)
	_, rv := list(t, lw)
	w := startWatch[[]byte](t, lw, rv)

	r1 := mustPut(t, c, prefix+"k", "one")
	r2 := mustPut(t, c, prefix+"k", "two")
	r3 := mustDelete(t, c, prefix+"k")
	want := []driver.Event[[]byte]{
		{Type: driver.Added, Key: "k", Object: []byte("one"), HasObject: true, RV: r1},
		{Type: driver.Modified, Key: "k", Object: []byte("two"), HasObject: true, RV: r2},
		{Type: driver.Deleted, Key: "k", Object: []byte("two"), HasObject: true, RV: r3},
	}
	var got []driver.Event[[]byte]
	for len(got) < len(want) {
		got = append(got, w.nextChange(t))
	}
	for i := range want {
		g, e := got[i], want[i]
		if g.Type != e.Type || g.Key != e.Key || string(g.Object) != string(e.Object) || g.HasObject != e.HasObject || g.RV != e.RV || g.Err != nil {
			t.Errorf("event %d: got %+v, want %+v", i, g, e)
		}
	}

	// A delete whose previous value is compacted: key only.
	mustPut(t, c, prefix+"old", "gone")
	before := mustPut(t, c, prefix+"other", "x")
	del := mustDelete(t, c, prefix+"old")
	srv.Compact(t, int64(del))
	w2 := startWatch[[]byte](t, lw, del-1)
	ev := w2.nextChange(t)
	if ev.Type != driver.Deleted || ev.Key != "old" || ev.HasObject || ev.RV != del {
		t.Fatalf("delete at %d watched after compaction (previous write at %d): %+v, want Deleted old without object", del, before, ev)
	}
}

// TestWatchCompacted: a watch from a compacted revision fails with an
// error matching driver.ErrExpired and rpctypes.ErrCompacted that names the
// prefix.
func TestWatchCompacted(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("compacted")
	r1 := mustPut(t, c, prefix+"a", "1")
	r2 := mustPut(t, c, prefix+"a", "2")
	srv.Compact(t, int64(r2))
	lw := rawLW(t, c, prefix, false)
	err := startWatch[[]byte](t, lw, r1-1).end(t)
	if !errors.Is(err, driver.ErrExpired) || !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("watch from compacted revision %d: %v, want ErrExpired and ErrCompacted", r1, err)
	}
	if !strings.Contains(err.Error(), prefix) || !strings.Contains(err.Error(), fmt.Sprint(r2)) {
		t.Errorf("error does not name the prefix and the compaction revision: %v", err)
	}
}

// TestUndecodableValue: List and Watch report a DecodeError naming prefix,
// key and revision but not the value, and the watch goes on.
func TestUndecodableValue(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("undecodable")
	const secret = "token=s3cr3t"
	listedRV := mustPut(t, c, prefix+"listed", secret)
	mustPut(t, c, prefix+"fine", `{"version":1}`)
	lw := newLW(t, c, prefix, 0)
	got, rv := list(t, lw)
	check := func(ev driver.Event[item], key string, at core.ResourceVersion) {
		t.Helper()
		var de *driver.DecodeError
		if !errors.As(ev.Err, &de) || de.Key != key || de.RV != at || ev.Key != key || ev.RV != at || ev.HasObject {
			t.Fatalf("event %+v, want a DecodeError for %q at %d", ev, key, at)
		}
		msg := ev.Err.Error()
		if strings.Contains(msg, "s3cr3t") || !strings.Contains(msg, prefix) || !strings.Contains(msg, key) {
			t.Fatalf("decode error %q must name prefix %q and key %q and not show the value", msg, prefix, key)
		}
	}
	check(got["listed"], "listed", listedRV)
	if got["fine"].Err != nil || got["fine"].Object.Version != 1 {
		t.Fatalf("fine key: %+v", got["fine"])
	}

	w := startWatch[item](t, lw, rv)
	badRV := mustPut(t, c, prefix+"watched", secret)
	goodRV := mustPut(t, c, prefix+"watched", `{"version":2}`)
	check(w.nextChange(t), "watched", badRV)
	if ev := w.nextChange(t); ev.Err != nil || ev.Object.Version != 2 || ev.RV != goodRV || ev.Type != driver.Modified {
		t.Fatalf("after the bad value the watch delivered %+v", ev)
	}
	// Deleting a key whose last value was undecodable is still a delete.
	mustPut(t, c, prefix+"watched", secret)
	w.nextChange(t)
	delRV := mustDelete(t, c, prefix+"watched")
	if ev := w.nextChange(t); ev.Type != driver.Deleted || ev.HasObject || ev.Err != nil || ev.RV != delRV {
		t.Fatalf("delete of an undecodable value: %+v", ev)
	}
}

// TestRequestProgress: with periodic notifications off, a progress request
// on the watch yields a Bookmark at or after a write under another prefix.
func TestRequestProgress(t *testing.T) {
	srv := harness.StartEtcdWith(t, harness.EtcdOptions{ProgressNotifyInterval: time.Hour})
	c := srv.Client(t)
	prefix := uniquePrefix("progress")
	lw := rawLW(t, c, prefix, false)
	_, rv := list(t, lw)
	if !lw.ReportsProgress() {
		t.Fatal("ReportsProgress() = false")
	}
	w := startWatch[[]byte](t, lw, rv)
	other := mustPut(t, c, "/elsewhere/x", "1")
	for {
		w.requestProgress(t)
		b := w.next(t)
		if len(b) != 1 || b[0].Type != driver.Bookmark {
			t.Fatalf("got %+v, want a Bookmark", b)
		}
		if b[0].RV >= other {
			break
		}
		// A bookmark below the write may answer a request made before
		// the watch caught up; ask again.
	}
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	head, err := lw.Head(ctx)
	if err != nil || head < other {
		t.Fatalf("Head = %d, %v; want at least %d", head, err, other)
	}
}

// TestNewPrefixAndClosedClient: NewPrefix refuses a nil client and a
// negative page size, and a client the caller closed makes List, Head and
// Watch fail with an error matching driver.ErrPermanent, which the informer
// stops on instead of retrying forever.
func TestNewPrefixAndClosedClient(t *testing.T) {
	srv := harness.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	if _, err := etcdinformer.NewPrefix(ctx, nil, "/x", etcdinformer.Options[item]{}); err == nil {
		t.Fatal("NewPrefix without a client succeeded")
	}
	if _, err := etcdinformer.NewPrefix(ctx, srv.Client(t), "/x", etcdinformer.Options[item]{PageSize: -1}); err == nil {
		t.Fatal("NewPrefix with a negative page size succeeded")
	}

	c, err := clientv3.New(srv.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, c, "/closed/k", `{"version":5}`)
	p := newLW(t, c, "/closed", 0)
	got, rv := list(t, p)
	if got["k"].Object.Version != 5 {
		t.Fatalf("list: %+v", got)
	}
	w := startWatch[item](t, p, rv)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.end(t); !errors.Is(err, driver.ErrPermanent) {
		t.Errorf("Watch when the client is closed: %v, want core.ErrPermanent", err)
	}
	if _, err := p.Head(ctx); !errors.Is(err, driver.ErrPermanent) {
		t.Errorf("Head on a closed client: %v, want core.ErrPermanent", err)
	}
	if _, err := p.List(ctx, driver.ListSink[item]{Emit: func(driver.Event[item]) error { return nil }}); !errors.Is(err, driver.ErrPermanent) {
		t.Errorf("List on a closed client: %v, want core.ErrPermanent", err)
	}
	if err := startWatch[item](t, p, rv).end(t); !errors.Is(err, driver.ErrPermanent) {
		t.Errorf("Watch on a closed client: %v, want core.ErrPermanent", err)
	}
}

// TestCodecPanic: a codec that panics is a *driver.DecodeError for that key,
// in List and in Watch, and the watch goes on.
func TestCodecPanic(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("panic")
	codec := codecs.Funcs[string]{DecodeFunc: func(b []byte) (string, error) {
		if string(b) == "boom" {
			panic("codec exploded")
		}
		return string(b), nil
	}}
	listed := mustPut(t, c, prefix+"listed", "boom")
	p, err := etcdinformer.NewPrefix(context.Background(), c, prefix, etcdinformer.Options[string]{Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	got, rv := list(t, p)
	check := func(ev driver.Event[string], key string, at core.ResourceVersion) {
		t.Helper()
		var de *driver.DecodeError
		if !errors.As(ev.Err, &de) || de.Key != key || de.RV != at || ev.HasObject || !strings.Contains(ev.Err.Error(), "codec exploded") {
			t.Fatalf("event %+v, want a DecodeError for %q at %d", ev, key, at)
		}
	}
	check(got["listed"], "listed", listed)
	w := startWatch[string](t, p, rv)
	boom := mustPut(t, c, prefix+"watched", "boom")
	fine := mustPut(t, c, prefix+"watched", "fine")
	check(w.nextChange(t), "watched", boom)
	if ev := w.nextChange(t); ev.Err != nil || ev.Object != "fine" || ev.RV != fine {
		t.Fatalf("after the panic the watch delivered %+v", ev)
	}
}

// TestAuthPassesThrough: with auth on, a Prefix works with the credentials
// of the client it is given, a user who may only read
// the prefix can list, watch and read the head, and a wrong password fails
// without showing up in the error.
func TestAuthPassesThrough(t *testing.T) {
	srv := harness.StartEtcd(t)
	admin := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	const rootPW, readerPW = "root-pw-1f3a", "reader-pw-9c2e"
	mustPut(t, admin, "/auth/k", `{"version":1}`)
	mustPut(t, admin, "/secret/k", `{"version":1}`)
	steps := []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", rootPW); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "auth-reader"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "auth-reader", "/auth/", clientv3.GetPrefixRangeEnd("/auth/"), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "reader", readerPW); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "reader", "auth-reader"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}

	cfg := func(user, pw string) clientv3.Config {
		c := srv.ClientConfig()
		c.Username, c.Password = user, pw
		return c
	}
	reader, err := clientv3.New(cfg("reader", readerPW))
	if err != nil {
		t.Fatalf("client as reader: %v", err)
	}
	// A cleanup, so that it runs after the watch's: a client closed under
	// a running watch ends it with driver.ErrPermanent.
	t.Cleanup(func() { _ = reader.Close() })
	lw := newLW(t, reader, "/auth", 0)
	got, rv := list(t, lw)
	if got["k"].Object.Version != 1 || len(got) != 1 {
		t.Fatalf("reader lists %+v", got)
	}
	if _, err := lw.Head(ctx); err != nil {
		t.Fatalf("Head as reader: %v", err)
	}
	w := startWatch[item](t, lw, rv)
	root, err := clientv3.New(cfg("root", rootPW))
	if err != nil {
		t.Fatalf("root client: %v", err)
	}
	defer root.Close()
	putRV := mustPut(t, root, "/auth/k", `{"version":2}`)
	if ev := w.nextChange(t); ev.Object.Version != 2 || ev.RV != putRV {
		t.Fatalf("reader's watch got %+v", ev)
	}

	// The reader may not read another prefix.
	other := newLW(t, reader, "/secret", 0)
	if _, err := other.List(ctx, driver.ListSink[item]{Emit: func(driver.Event[item]) error { return nil }}); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("reader listing /secret: %v, want permission denied", err)
	}

	// clientv3.New authenticates when it connects.
	bad, err := clientv3.New(cfg("reader", "wrong-pw-77"))
	if err == nil {
		_, err = newLW(t, bad, "/auth", 0).List(ctx, driver.ListSink[item]{Emit: func(driver.Event[item]) error { return nil }})
		bad.Close()
	}
	if err == nil {
		t.Fatal("a wrong password was accepted")
	}
	if strings.Contains(err.Error(), "wrong-pw-77") || strings.Contains(err.Error(), readerPW) {
		t.Fatalf("error shows a password: %v", err)
	}
}

// TestWatchCutsLargeResponses: a watch catching up on history gets one
// etcd response of many revisions; it hands it to Emit in batches cut at
// the first revision boundary after etcdinformer.MaxBatch events, never
// splitting a revision (here a delete of 5000 keys at one revision, more
// than a watch keeps room for), in revision order, none missing, deletes
// with their previous values.
func TestWatchCutsLargeResponses(t *testing.T) {
	srv := harness.StartEtcd(t)
	c := srv.Client(t)
	prefix := uniquePrefix("cut")
	lw := rawLW(t, c, prefix, false)
	_, from := list(t, lw)
	ctx, cancel := context.WithTimeout(context.Background(), converge)
	defer cancel()
	want := map[core.ResourceVersion]int{} // events per revision
	putAll := func(name string, n int) {
		for i := 0; i < n; i += 100 {
			ops := make([]clientv3.Op, 0, 100)
			for j := i; j < i+100; j++ {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%s-%04d", prefix, name, j), name))
			}
			resp, err := c.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				t.Fatalf("put %s: %v", name, err)
			}
			want[core.ResourceVersion(resp.Header.Revision)] = 100
		}
	}
	if etcdinformer.KeptBatch >= 5000 {
		t.Fatalf("the delete of 5000 keys no longer exceeds the %d events a watch keeps room for: make it larger", etcdinformer.KeptBatch)
	}
	putAll("a", 5000)
	del, err := c.Delete(ctx, prefix+"a-", clientv3.WithPrefix())
	if err != nil || del.Deleted != 5000 {
		t.Fatalf("delete a-*: deleted %v, %v; want 5000", del, err)
	}
	delRV := core.ResourceVersion(del.Header.Revision)
	want[delRV] = 5000
	putAll("b", 1500)
	total := 5000 + 5000 + 1500

	w := startWatch[[]byte](t, lw, from)
	got := map[core.ResourceVersion]int{}
	var last core.ResourceVersion
	batches := 0
	for n := 0; n < total; {
		b := w.next(t)
		var revs []core.ResourceVersion // of this batch, in order
		for _, ev := range b {
			if ev.Type == driver.Bookmark {
				continue
			}
			n++
			if ev.RV < last {
				t.Fatalf("event %+v after revision %d", ev, last)
			}
			if got[ev.RV] > 0 && ev.RV != last {
				t.Fatalf("revision %d resumes after revision %d", ev.RV, last)
			}
			if len(revs) == 0 && got[ev.RV] > 0 {
				t.Fatalf("revision %d split across two batches", ev.RV)
			}
			if len(revs) == 0 || revs[len(revs)-1] != ev.RV {
				revs = append(revs, ev.RV)
			}
			last = ev.RV
			got[ev.RV]++
			wantType, wantObj := driver.Added, ev.Key[:1]
			if ev.RV == delRV {
				wantType = driver.Deleted
			}
			if ev.Type != wantType || !ev.HasObject || string(ev.Object) != wantObj || ev.Err != nil {
				t.Fatalf("event %+v at revision %d: want %v with object %q", ev, ev.RV, wantType, wantObj)
			}
		}
		if len(revs) == 0 {
			continue // a bookmark
		}
		batches++
		// The events before the batch's last revision number fewer than
		// MaxBatch: the batch was cut at the first boundary after it.
		if before := len(b) - got[revs[len(revs)-1]]; len(revs) > 1 && before >= etcdinformer.MaxBatch {
			t.Errorf("batch of %d events over revisions %d..%d has %d before its last revision, want fewer than %d", len(b), revs[0], revs[len(revs)-1], before, etcdinformer.MaxBatch)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("events per revision: got %v, want %v", got, want)
	}
	// One response cut as described makes cuts batches; etcd may have sent
	// several responses, each cut on its own: never fewer.
	cuts, acc := 0, 0
	for _, rv := range slices.Sorted(maps.Keys(want)) {
		if acc += want[rv]; acc >= etcdinformer.MaxBatch {
			cuts, acc = cuts+1, 0
		}
	}
	if acc > 0 {
		cuts++
	}
	if batches < cuts {
		t.Errorf("%d events in %d batches, want at least %d (batches of about %d events)", total, batches, cuts, etcdinformer.MaxBatch)
	}
}
