package core_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
	"github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
)

func versionOf(o versioned) int64 { return int64(o.V) }

func ckptOptions(t *testing.T, dir string) core.InformerOptions[versioned] {
	t.Helper()
	store, err := checkpoint.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return core.InformerOptions[versioned]{
		Name:       "users",
		Checkpoint: &core.CheckpointOptions[versioned]{Store: store, Codec: codec.JSON[versioned]{}, Interval: -1},
	}
}

// runUntilStopped runs inf until the returned stop is called; stop waits
// for Run (and with it the final checkpoint).
func runUntilStopped(t *testing.T, inf *core.SharedIndexInformer[versioned]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func syncOrFail(t *testing.T, inf *core.SharedIndexInformer[versioned]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), informertest.Timeout)
	defer cancel()
	if err := inf.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
}

// runOnce runs an informer over src until it has synced, then stops it,
// leaving its final checkpoint.
func runOnce(t *testing.T, src driver.ListerWatcher[versioned], opts core.InformerOptions[versioned]) {
	t.Helper()
	inf := core.NewSharedIndexInformer[versioned](src, opts)
	stop := runUntilStopped(t, inf)
	syncOrFail(t, inf)
	stop()
}

// heldRestart starts an informer over src with the checkpoint in dir, a
// Recorder as its handler (which fails the test when a key's version goes
// backwards), and its watches held until gate is released; it returns once
// the first watch waits at the gate.
func heldRestart(t *testing.T, src *memory.Source[versioned], dir string) (*informertest.Spy[versioned], *informertest.Gate, *core.SharedIndexInformer[versioned], *informertest.Recorder[versioned]) {
	t.Helper()
	spy := informertest.Wrap[versioned](src)
	gate := spy.HoldWatches()
	inf := core.NewSharedIndexInformer[versioned](spy, ckptOptions(t, dir))
	rec := informertest.NewRecorder[versioned](t, versionOf)
	if _, err := inf.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	runUntilStopped(t, inf)
	ctx, cancel := context.WithTimeout(context.Background(), informertest.Timeout)
	defer cancel()
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	return spy, gate, inf, rec
}

// expectCaughtUp waits for inf to sync and apply the source's head, and
// checks that it did not list and that its cache equals the source.
func expectCaughtUp(t *testing.T, what string, spy *informertest.Spy[versioned], inf *core.SharedIndexInformer[versioned], src *memory.Source[versioned]) {
	t.Helper()
	syncOrFail(t, inf)
	if err := inf.WaitFor(context.Background(), src.HeadRV()); err != nil {
		t.Fatal(err)
	}
	if n := spy.Lists(); n != 0 {
		t.Errorf("%s: the restart listed %d times, want 0", what, n)
	}
	if got, want := cacheState(inf), truth(src); !mapsEqual(got, want) {
		t.Errorf("%s: the cache differs from the source on %d keys", what, len(diffKeys(got, want)))
	}
}

func cacheState(inf *core.SharedIndexInformer[versioned]) map[string]int64 {
	m := map[string]int64{}
	inf.Indexer().Range(func(k string, o versioned) bool { m[k] = int64(o.V); return true })
	return m
}

func truth(src *memory.Source[versioned]) map[string]int64 {
	m := map[string]int64{}
	ctx := context.Background()
	src.List(ctx, driver.ListSink[versioned]{Emit: func(ev driver.Event[versioned]) error {
		m[ev.Key] = int64(ev.Object.V)
		return nil
	}})
	return m
}

// A restarted informer serves its checkpoint at once, not synced, watches
// from the checkpoint's version without listing, hands handlers the loaded
// objects as initial adds and then the changes made while it was stopped.
func TestCheckpointWarmRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	src := memory.New[versioned](memory.Options{})
	src.Put("a", versioned{"a", 1})
	src.Put("b", versioned{"b", 2})
	src.Put("c", versioned{"c", 3})

	inf1 := core.NewSharedIndexInformer[versioned](src, ckptOptions(t, dir))
	stop1 := runUntilStopped(t, inf1)
	syncOrFail(t, inf1)
	if _, serving := inf1.ServingCheckpoint(); serving {
		t.Error("a cold start reports serving a checkpoint")
	}
	stop1()
	saved := src.HeadRV()

	// Checkpoints hold user data: owner only.
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("checkpoint directory: %v, mode %v; want 0700", err, fi.Mode().Perm())
	}
	if fi, err := os.Stat(filepath.Join(dir, "users.ckpt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("checkpoint file: %v; want mode 0600", err)
	}

	// Written while the informer is down.
	src.Put("b", versioned{"b", 4})
	src.Delete("c")
	src.Put("d", versioned{"d", 5})

	spy, gate, inf2, rec := heldRestart(t, src, dir)
	// The watch is held: the cache is the checkpoint, readers see it, and
	// the informer says it is not synced yet.
	informertest.Eventually(t, "checkpoint loaded", func() bool { return len(cacheState(inf2)) == 3 })
	if got, want := cacheState(inf2), map[string]int64{"a": 1, "b": 2, "c": 3}; !mapsEqual(got, want) {
		t.Errorf("cache while serving the checkpoint: %v, want %v", got, want)
	}
	if inf2.HasSynced() {
		t.Error("HasSynced is true before the informer caught up with the source")
	}
	if v, ok := inf2.ServingCheckpoint(); !ok || v != saved {
		t.Errorf("ServingCheckpoint() = %d, %v; want %d, true", v, ok, saved)
	}
	st := inf2.SyncStatus()
	if st.Checkpoint != saved || !strings.Contains(st.String(), "serving checkpoint") {
		t.Errorf("SyncStatus: Checkpoint %d, %q; want version %d and 'serving checkpoint'", st.Checkpoint, st, saved)
	}
	gate.Release()
	syncOrFail(t, inf2)
	if _, ok := inf2.ServingCheckpoint(); ok {
		t.Error("ServingCheckpoint still true after sync")
	}
	if n := spy.Lists(); n != 0 {
		t.Errorf("a warm start listed %d times, want 0", n)
	}
	if calls := spy.Calls(); len(calls) == 0 || calls[0].From != saved {
		t.Errorf("first call %v, want a watch from the checkpoint's version %d", calls, saved)
	}
	rec.ExpectSet("add a v=1 initial", "add b v=2 initial", "add c v=3 initial")
	rec.Expect("update b 2->4", "delete c v=3", "add d v=5")
	if got, want := cacheState(inf2), truth(src); !mapsEqual(got, want) {
		t.Errorf("cache %v, source %v", got, want)
	}
}

// When the checkpoint's version has expired, the informer relists and
// handlers get only the real differences against the loaded state.
func TestCheckpointExpiredRelistsDifferencesOnly(t *testing.T) {
	dir := t.TempDir()
	src := memory.New[versioned](memory.Options{})
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		src.Put(k, versioned{k, 1})
	}
	runOnce(t, src, ckptOptions(t, dir))

	src.Put("b", versioned{"b", 2})
	src.Delete("c")
	src.Put("f", versioned{"f", 3})
	if err := src.Compact(src.HeadRV()); err != nil {
		t.Fatal(err)
	}

	spy := informertest.Wrap[versioned](src)
	rec := informertest.NewRecorder[versioned](t, versionOf)
	inf2, errs := informertest.Run[versioned](t, spy, ckptOptions(t, dir), rec)
	if errs.Is(driver.ErrExpired) == nil {
		t.Error("no expired watch reported: the test did not take the expired path")
	}
	if n := spy.Lists(); n != 1 {
		t.Errorf("lists: %d, want 1", n)
	}
	rec.ExpectSet("add a v=1 initial", "add b v=1 initial", "add c v=1 initial", "add d v=1 initial", "add e v=1 initial")
	rec.ExpectSet("update b 1->2", "delete c v=1 unknown", "add f v=3")
	rec.ExpectNone()
	if got, want := cacheState(inf2), truth(src); !mapsEqual(got, want) {
		t.Errorf("cache %v, source %v", got, want)
	}
}

// A corrupt, truncated or foreign checkpoint is reported and ignored: the
// informer lists, and the error holds nothing of the checkpoint's content.
func TestCheckpointUnusableIsIgnored(t *testing.T) {
	const secret = "hunter2-secret"
	type damage struct {
		name string
		do   func(t *testing.T, path string, opts *core.InformerOptions[versioned])
		want string
	}
	rewrite := func(f func([]byte) []byte) func(*testing.T, string, *core.InformerOptions[versioned]) {
		return func(t *testing.T, path string, _ *core.InformerOptions[versioned]) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, f(b), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []damage{
		{"flipped byte", rewrite(func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }), "corrupt"},
		{"truncated", rewrite(func(b []byte) []byte { return b[:len(b)-7] }), "truncated"},
		{"not a checkpoint", rewrite(func(b []byte) []byte { return []byte("{\"hello\": \"" + secret + "\"}") }), "bad magic"},
		{"format version", rewrite(func(b []byte) []byte { b[9] = 9; return b }), "format version"},
		{"another informer", func(t *testing.T, path string, _ *core.InformerOptions[versioned]) {
			if err := os.Rename(path, filepath.Join(filepath.Dir(path), "other.ckpt")); err != nil {
				t.Fatal(err)
			}
		}, "written by informer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			src := memory.New[versioned](memory.Options{})
			src.Put(secret, versioned{secret, 1})
			opts := ckptOptions(t, dir)
			inf1 := core.NewSharedIndexInformer[versioned](src, opts)
			stop := runUntilStopped(t, inf1)
			syncOrFail(t, inf1)
			stop()
			path := filepath.Join(dir, "users.ckpt")
			c.do(t, path, &opts)
			if c.name == "another informer" {
				opts.Name = "other"
			}
			spy := informertest.Wrap[versioned](src)
			inf2, errs := informertest.Run[versioned](t, spy, opts)
			var ce *core.CheckpointError
			if err := errs.Find(func(err error) bool { return errors.As(err, &ce) }); err == nil {
				t.Fatalf("no *core.CheckpointError reported; errors: %v", errs.All())
			}
			if ce.Op != "load" || !strings.Contains(ce.Error(), c.want) || !strings.Contains(ce.Error(), "ignored") {
				t.Errorf("error %q, want a load error saying %q and that it was ignored", ce, c.want)
			}
			if strings.Contains(ce.Error(), secret) {
				t.Errorf("error %q holds the checkpoint's content", ce)
			}
			if n := spy.Lists(); n != 1 {
				t.Errorf("lists: %d, want 1 (a cold start)", n)
			}
			if got, want := cacheState(inf2), truth(src); !mapsEqual(got, want) {
				t.Errorf("cache %v, source %v", got, want)
			}
		})
	}
}

// An informer without a codec cannot checkpoint and says how to fix it:
// Run fails permanently, and SyncStatus and WaitForCacheSync (also one
// that waited before Run) say why rather than "not started".
func TestCheckpointNeedsCodec(t *testing.T) {
	store, err := checkpoint.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src := memory.New[versioned](memory.Options{})
	inf := core.NewSharedIndexInformer[versioned](src, core.InformerOptions[versioned]{Checkpoint: &core.CheckpointOptions[versioned]{Store: store}})
	waited := make(chan error, 1)
	go func() { waited <- inf.WaitForCacheSync(context.Background()) }()
	err = inf.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Checkpoint.Codec") || !errors.Is(err, driver.ErrPermanent) {
		t.Errorf("Run: %v, want a permanent error naming Checkpoint.Codec", err)
	}
	if st := inf.SyncStatus().String(); !strings.HasPrefix(st, "did not start: ") || !strings.Contains(st, "Checkpoint.Codec") {
		t.Errorf("SyncStatus: %q, want why the informer did not start", st)
	}
	if err := <-waited; err == nil || !strings.Contains(err.Error(), "Checkpoint.Codec") {
		t.Errorf("WaitForCacheSync: %v, want the reason the informer did not start", err)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A checkpoint loaded into an empty cache fills the indexes too; the same
// informer run again (its cache kept) loads its checkpoint as a list that
// tells handlers only the differences, then the changes since.
func TestCheckpointLoadIndexesAndRunAgain(t *testing.T) {
	for _, deltaFIFO := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeltaFIFO=%v", deltaFIFO), func(t *testing.T) { checkpointLoadIndexesAndRunAgain(t, deltaFIFO) })
	}
}

func checkpointLoadIndexesAndRunAgain(t *testing.T, deltaFIFO bool) {
	dir := t.TempDir()
	src := memory.New[versioned](memory.Options{})
	for i := range 1000 {
		k := fmt.Sprintf("k%03d", i)
		src.Put(k, versioned{k, i % 10})
	}
	byV := core.Indexers[versioned]{"v": func(o versioned) ([]string, error) { return []string{fmt.Sprint(o.V)}, nil }}
	opts := ckptOptions(t, dir)
	opts.Indexers = byV
	opts.DeltaFIFO = deltaFIFO
	runOnce(t, src, opts)

	inf2 := core.NewSharedIndexInformer[versioned](src, opts)
	rec := informertest.NewRecorder[versioned](t, versionOf)
	if _, err := inf2.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	stop2 := runUntilStopped(t, inf2)
	syncOrFail(t, inf2)
	if keys, err := inf2.Indexer().IndexKeys("v", "3"); err != nil || len(keys) != 100 || keys[0] != "k003" {
		t.Errorf("index v=3 after a warm start: %d keys (%v), want 100 from k003", len(keys), err)
	}
	var initial []string
	for i := range 1000 {
		initial = append(initial, fmt.Sprintf("add k%03d v=%d initial", i, i%10))
	}
	rec.ExpectSet(initial...)
	stop2()

	src.Put("k001", versioned{"k001", 42})
	src.Delete("k002")
	src.Put("new", versioned{"new", 7})
	runUntilStopped(t, inf2)
	informertest.Eventually(t, "the changes applied", func() bool { _, ok := inf2.Indexer().Get("new"); return ok })
	if deltaFIFO {
		// Per-key grouping orders changes by when their key became
		// pending: the checkpoint queued every key first.
		rec.ExpectSet("update k001 1->42", "delete k002 v=2", "add new v=7")
	} else {
		rec.Expect("update k001 1->42", "delete k002 v=2", "add new v=7")
	}
	if keys, _ := inf2.Indexer().IndexKeys("v", "42"); !slices.Equal(keys, []string{"k001"}) {
		t.Errorf("index v=42: %v, want [k001]", keys)
	}
}

// gatedRecorder blocks its first OnAdd until released.
type gatedRecorder struct {
	*informertest.Recorder[versioned]
	once             sync.Once
	started, release chan struct{}
}

func (g *gatedRecorder) OnAdd(key string, obj versioned, initial bool) {
	g.once.Do(func() { close(g.started); <-g.release })
	g.Recorder.OnAdd(key, obj, initial)
}

// With a Binary codec and no index function the checkpoint loads lazily:
// each handler gets a page of initial adds as one notification, counted as
// its objects in Pending, and decoded when delivered from the checkpoint's
// bytes, so a handler still behind its initial adds when the cache takes
// the changes made while the informer was down gets the values loaded
// first and then those changes, in order.
func TestCheckpointLazyLoadReplaysLoadedValues(t *testing.T) {
	dir := t.TempDir()
	bin, err := codec.NewBinary[versioned]()
	if err != nil {
		t.Fatal(err)
	}
	opts := ckptOptions(t, dir)
	opts.Checkpoint.Codec = bin
	src := memory.New[versioned](memory.Options{})
	const n = 1500 // three chunks
	var initial []string
	for i := range n {
		k := fmt.Sprintf("k%04d", i)
		src.Put(k, versioned{k, 1})
		initial = append(initial, fmt.Sprintf("add %s v=1 initial", k))
	}
	runOnce(t, src, opts)

	src.Put("k0007", versioned{"k0007", 2})
	src.Delete("k1200")
	src.Put("new", versioned{"new", 3})

	g := &gatedRecorder{Recorder: informertest.NewRecorder[versioned](t, versionOf), started: make(chan struct{}), release: make(chan struct{})}
	inf2 := core.NewSharedIndexInformer[versioned](src, opts)
	reg, err := inf2.AddEventHandler(g)
	if err != nil {
		t.Fatal(err)
	}
	runUntilStopped(t, inf2)
	syncOrFail(t, inf2)
	<-g.started
	if got, want := cacheState(inf2), truth(src); !mapsEqual(got, want) {
		t.Fatalf("cache %v, source %v", got, want)
	}
	if inf2.SyncStatus().Checkpoint == 0 {
		t.Fatal("the second start did not load the checkpoint")
	}
	informertest.Eventually(t, "the changes queued behind the initial adds", func() bool { return reg.Pending() == n+3 })
	if reg.HasSynced() {
		t.Error("the registration reports synced with its initial adds undelivered")
	}
	close(g.release)
	informertest.Eventually(t, "the initial adds delivered", reg.HasSynced)
	g.ExpectSet(initial...)
	g.Expect("update k0007 1->2", "delete k1200 v=1", "add new v=3")
	g.ExpectNone()
	informertest.Eventually(t, "nothing pending", func() bool { return reg.Pending() == 0 })
}

// A warm start that has synced logs what it waited for: the checkpoint's
// load, then the changes from its version to the source's head.
func TestCheckpointWarmStartLogsWhatItWaited(t *testing.T) {
	dir := t.TempDir()
	src := memory.New[versioned](memory.Options{})
	src.Put("a", versioned{"a", 1})
	src.Put("b", versioned{"b", 2})
	runOnce(t, src, ckptOptions(t, dir))
	saved := src.HeadRV()
	src.Put("b", versioned{"b", 3})
	src.Delete("a")
	src.Put("c", versioned{"c", 4})

	var mu sync.Mutex
	var logs bytes.Buffer
	opts := ckptOptions(t, dir)
	opts.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	inf := core.NewSharedIndexInformer[versioned](src, opts)
	runUntilStopped(t, inf)
	syncOrFail(t, inf)
	line := func() string {
		mu.Lock()
		defer mu.Unlock()
		return logs.String()
	}
	informertest.Eventually(t, "the warm start's log line", func() bool { return strings.Contains(line(), "warm start synced") })
	for _, want := range []string{
		"checkpoint=" + saved.String(), "objects=2", "head=" + src.HeadRV().String(), "changes=3",
		`waited_for="the source's changes from the checkpoint's version to its head"`,
	} {
		if !strings.Contains(line(), want) {
			t.Errorf("log %q lacks %s", line(), want)
		}
	}
}

// Checkpoints saved while keys are written and deleted are each a state
// the changes since their version bring up to date: after a restart from
// the last one, the cache equals the source.
func TestCheckpointSavedUnderWrites(t *testing.T) {
	dir := t.TempDir()
	src := memory.New[versioned](memory.Options{})
	const n = 5000
	for k := range n {
		src.Put("k"+strconv.Itoa(k), versioned{"k" + strconv.Itoa(k), 1})
	}
	inf := core.NewSharedIndexInformer[versioned](src, ckptOptions(t, dir))
	stop := runUntilStopped(t, inf)
	syncOrFail(t, inf)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for v := 2; ; v++ {
			select {
			case <-done:
				return
			default:
			}
			k := "k" + strconv.Itoa(v*7919%n)
			if v%3 == 0 {
				src.Delete(k)
			} else {
				src.Put(k, versioned{k, v})
			}
		}
	})
	ctx := context.Background()
	for range 20 {
		if err := inf.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	last := src.HeadRV()
	// The last checkpoint is saved at the version the cache reached, and
	// what came after it is replayed.
	if err := inf.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	src.Put("k1", versioned{"k1", 1 << 30})
	stop()

	spy := informertest.Wrap[versioned](src)
	inf2 := core.NewSharedIndexInformer[versioned](spy, ckptOptions(t, dir))
	runUntilStopped(t, inf2)
	expectCaughtUp(t, fmt.Sprintf("after a restart from a checkpoint saved under writes (last write at %d)", last), spy, inf2, src)
}

func diffKeys(a, b map[string]int64) []string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			d = append(d, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, k)
		}
	}
	return d
}

// pausingStore is a DirStore whose first Save, once its write
// has begun writing, runs pause before going on, and which records
// whether each Save's write failed.
type pausingStore struct {
	checkpoint.DirStore
	pause  func()
	paused bool
	failed []bool
}

type pauseWriter struct {
	w     io.Writer
	pause func()
}

func (p *pauseWriter) Write(b []byte) (int, error) {
	if p.pause != nil {
		p.pause()
		p.pause = nil
	}
	return p.w.Write(b)
}

func (s *pausingStore) Save(ctx context.Context, name string, write func(io.Writer) error) error {
	var pause func()
	if !s.paused {
		s.paused, pause = true, s.pause
	}
	failed := false
	err := s.DirStore.Save(ctx, name, func(w io.Writer) error {
		err := write(&pauseWriter{w, pause})
		failed = err != nil
		return err
	})
	s.failed = append(s.failed, failed)
	return err
}

// savePaused runs an informer with a checkpoint over src until it has
// synced, saves one checkpoint whose write runs pause once it has begun
// writing (its version read, most chunks not), and stops. It returns
// which of the saves that made (a failed write starts again) failed, and
// a directory holding only that checkpoint.
func savePaused(t *testing.T, src *memory.Source[versioned], pause func(inf *core.SharedIndexInformer[versioned])) (failed []bool, dir2 string) {
	t.Helper()
	dir := t.TempDir()
	dirStore, err := checkpoint.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	opts := ckptOptions(t, dir)
	store := &pausingStore{DirStore: *dirStore}
	opts.Checkpoint.Store = store
	inf := core.NewSharedIndexInformer[versioned](src, opts)
	stop := runUntilStopped(t, inf)
	syncOrFail(t, inf)
	store.pause = func() { pause(inf) }
	if err := inf.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The restart loads that checkpoint, not the one the run saves when
	// it stops.
	saved, err := os.ReadFile(filepath.Join(dir, "users.ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	failed = slices.Clone(store.failed)
	stop()
	dir2 = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir2, "users.ckpt"), saved, 0o600); err != nil {
		t.Fatal(err)
	}
	return failed, dir2
}

// manyChunks puts many more chunks of keys (512 objects) into src than a
// save encodes ahead of what it wrote (two per CPU), each at version 1.
func manyChunks(src *memory.Source[versioned]) int {
	n := 512 * (8*runtime.GOMAXPROCS(0) + 8)
	for k := range n {
		src.Put("k"+strconv.Itoa(k), versioned{"k" + strconv.Itoa(k), 1})
	}
	return n
}

// A checkpoint is written a chunk at a time from the cache: when keys are
// deleted from the cache meanwhile, the save starts again from a copy
// taken at once, and the checkpoint holds the cache's objects.
func TestCheckpointSaveWhileKeysAreDeleted(t *testing.T) {
	src := memory.New[versioned](memory.Options{})
	n := manyChunks(src)
	ctx := context.Background()
	// While the first save writes its first bytes, every other key goes:
	// the chunks read after that miss some.
	failed, dir2 := savePaused(t, src, func(inf *core.SharedIndexInformer[versioned]) {
		for k := 0; k < n; k += 2 {
			src.Delete("k" + strconv.Itoa(k))
		}
		if err := inf.WaitFor(ctx, src.HeadRV()); err != nil {
			t.Error(err)
		}
	})
	if want := []bool{true, false}; !slices.Equal(failed, want) {
		t.Errorf("saves whose write failed: %v, want %v", failed, want)
	}
	spy := informertest.Wrap[versioned](src)
	inf2 := core.NewSharedIndexInformer[versioned](spy, ckptOptions(t, dir2))
	runUntilStopped(t, inf2)
	expectCaughtUp(t, "a checkpoint saved while keys were deleted", spy, inf2, src)
}

// failingWatch is a source whose first watches fail: a restart whose
// stream cannot start at once (a slot still held by a dead process's
// walsender, say).
type failingWatch struct {
	*memory.Source[versioned]
	fails atomic.Int32
}

func (f *failingWatch) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[versioned]) error {
	if f.fails.Add(-1) >= 0 {
		return errors.New("replication slot is active for PID 4242")
	}
	return f.Source.Watch(ctx, from, opts)
}

// A warm start that met errors before it synced says so in its log line:
// how many, and the last one (a restart slower than usual says why).
func TestCheckpointWarmStartLogsItsErrors(t *testing.T) {
	dir := t.TempDir()
	src := memory.New[versioned](memory.Options{})
	src.Put("a", versioned{"a", 1})
	runOnce(t, src, ckptOptions(t, dir))
	src.Put("a", versioned{"a", 2})

	var mu sync.Mutex
	var logs bytes.Buffer
	opts := ckptOptions(t, dir)
	opts.ErrorHandler = nil
	opts.Backoff = core.Backoff{Initial: time.Millisecond, Max: time.Millisecond}
	opts.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	fw := &failingWatch{Source: src}
	fw.fails.Store(2)
	inf := core.NewSharedIndexInformer[versioned](fw, opts)
	runUntilStopped(t, inf)
	syncOrFail(t, inf)
	line := func() string {
		mu.Lock()
		defer mu.Unlock()
		for l := range strings.Lines(logs.String()) {
			if strings.Contains(l, "warm start synced") {
				return l
			}
		}
		return ""
	}
	informertest.Eventually(t, "the warm start's log line", func() bool { return line() != "" })
	for _, want := range []string{"errors=2", `last_error="users: watch from version 1: replication slot is active for PID 4242"`} {
		if !strings.Contains(line(), want) {
			t.Errorf("log line %q lacks %s", line(), want)
		}
	}
}

// A save reads the cache a chunk at a time while it moves on: a key read
// after two changes past the checkpoint's version is in a later state
// than the version, and the restart's watch from that version replays
// both changes. The checkpoint says which objects it holds in a later
// state, and the warm start drops the changes they already hold: no
// handler sees a version go backwards (the Recorder fails the test if
// one does), and the cache ends equal to the source without a list.
func TestCheckpointSavedMidChangeReplaysForward(t *testing.T) {
	src := memory.New[versioned](memory.Options{})
	n := manyChunks(src)
	ctx := context.Background()
	// While the save writes its first bytes, every key changes twice.
	failed, dir2 := savePaused(t, src, func(inf *core.SharedIndexInformer[versioned]) {
		for v := 2; v <= 3; v++ {
			for k := range n {
				src.Put("k"+strconv.Itoa(k), versioned{"k" + strconv.Itoa(k), v})
			}
		}
		if err := inf.WaitFor(ctx, src.HeadRV()); err != nil {
			t.Error(err)
		}
	})
	if want := []bool{false}; !slices.Equal(failed, want) {
		t.Fatalf("saves whose write failed: %v, want %v", failed, want)
	}
	// The checkpoint's objects are a mix: some at 1 (read before the
	// writes), some at 3.
	spy, gate, inf2, _ := heldRestart(t, src, dir2)
	informertest.Eventually(t, "checkpoint loaded", func() bool { return len(cacheState(inf2)) == n })
	loaded := map[int64]int{}
	for _, v := range cacheState(inf2) {
		loaded[v]++
	}
	if loaded[3] == 0 || loaded[1] == 0 {
		t.Fatalf("versions of the loaded objects: %v; the test needs some read before the writes and some after", loaded)
	}
	gate.Release()
	expectCaughtUp(t, "a checkpoint saved while keys changed", spy, inf2, src)
}
