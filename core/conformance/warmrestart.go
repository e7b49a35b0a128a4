package conformance

import (
	"context"
	"errors"
	"maps"
	"os"
	"strings"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/checkpoint"
	codecs "github.com/dbinformer/dbinformer/core/codec"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/informertest"
)

// warmRestart: an informer with checkpoints (core.CheckpointOptions) is
// stopped, the source changes, and an informer started from the
// checkpoint converges to the source, handing its handlers the loaded
// objects as initial adds and then notifications only for the keys that
// changed. When the harness is an Expirer the case repeats with the
// checkpoint's version expired: the informer relists, and handlers still
// get only the real differences.
//
// The informers run over the Harness's one ListerWatcher, one after the
// other, as a process restarted in place would; a restart of the process
// (a fresh ListerWatcher, nothing parked) is what the reliability suite's
// kill fault does.
func warmRestart[T any](e *env[T]) {
	dir, err := os.MkdirTemp("", "dbinformer-conformance-checkpoint-")
	if err != nil {
		e.t.Fatalf("temporary directory: %v", err)
	}
	e.t.Cleanup(func() { os.RemoveAll(dir) })
	store, err := checkpoint.NewDirStore(dir)
	if err != nil {
		e.t.Fatalf("%v", err)
	}
	for _, k := range []string{"w1", "w2", "w3", "w4", "w5", "w6"} {
		e.put(k, 1)
	}
	stop, _ := e.warmInformer(store, "first start")
	stop()

	e.put("w1", 2)
	e.del("w2")
	e.put("w7", 1)
	stop, rec := e.warmInformer(store, "start from a checkpoint")
	e.checkOnlyChanged(rec, "start from a checkpoint", "w1", "w2", "w7")
	stop()

	x, ok := e.h.(Expirer)
	if !ok {
		e.t.Logf("the harness is not an Expirer: the expired-checkpoint half of the case is not run")
		return
	}
	before := maps.Clone(e.live) // what the checkpoint holds
	e.put("w3", 2)
	e.del("w4")
	e.put("w8", 1)
	ctx, cancel := e.opCtx()
	err = x.Expire(ctx)
	cancel()
	if err != nil {
		e.t.Fatalf("Expire: %v", err)
	}
	// Expire may have removed data too (a purged stream): the model is
	// what the source lists now, and the real differences are against it.
	e.live, _ = e.list()
	var changed []string
	for k, n := range e.live {
		if m, ok := before[k]; !ok || m != n {
			changed = append(changed, k)
		}
	}
	for k := range before {
		if _, ok := e.live[k]; !ok {
			changed = append(changed, k)
		}
	}
	stop, rec = e.warmInformer(store, "start from an expired checkpoint")
	e.checkOnlyChanged(rec, "start from an expired checkpoint", changed...)
	stop()
}

// nameTB gives the suite's tb the Name informertest wants.
type nameTB struct{ tb }

func (nameTB) Name() string { return "conformance" }

// warmInformer runs a checkpointing informer over the harness until it has
// applied every write so far and its handler holds exactly the live keys;
// stop ends it (saving its final checkpoint).
func (e *env[T]) warmInformer(store checkpoint.Store, what string) (stop func(), rec *informertest.Recorder[T]) {
	e.t.Helper()
	t := nameTB{e.t}
	var codec codecs.Codec[T]
	if p, ok := driver.Capability[driver.CodecProvider[T]](e.lw); ok {
		codec = p.Codec()
	}
	if codec == nil {
		codec = codecs.JSON[T]{}
	}
	errs := &informertest.Errors{}
	inf := core.NewSharedIndexInformer(e.lw, core.InformerOptions[T]{
		Name:         "conformance",
		ErrorHandler: errs.Add,
		Backoff:      core.Backoff{Initial: 10 * time.Millisecond, Max: time.Second},
		Checkpoint:   &core.CheckpointOptions[T]{Store: store, Codec: codec, Interval: -1},
	})
	rec = informertest.NewRecorder(t, e.h.Version)
	if _, err := inf.AddEventHandler(rec); err != nil {
		e.t.Fatalf("AddEventHandler: %v", err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
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
			e.t.Errorf("%s: Run: %v", what, err)
		}
		for _, err := range errs.All() {
			var ce *core.CheckpointError
			if errors.As(err, &ce) {
				e.t.Errorf("%s: %v", what, err)
			}
		}
	}
	e.t.Cleanup(stop)
	informertest.WaitFor(t, inf, e.lastRV())
	want := map[string]int64{}
	for k, n := range e.live {
		want[e.eventKey(k)] = n
	}
	rec.WaitState(want)
	if st := inf.SyncStatus(); what != "first start" && st.Checkpoint == 0 {
		e.t.Errorf("%s: the informer did not load the checkpoint (SyncStatus %+v; errors %v)", what, st, errs.All())
	}
	return stop, rec
}

// checkOnlyChanged checks that, beside initial adds, the handler was told
// only of the keys in changed.
func (e *env[T]) checkOnlyChanged(rec *informertest.Recorder[T], what string, changed ...string) {
	e.t.Helper()
	allowed := map[string]bool{}
	for _, k := range changed {
		allowed[e.eventKey(k)] = true
	}
	told := map[string]bool{}
	for _, line := range rec.Log() {
		if strings.HasSuffix(line, " initial") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if !allowed[f[1]] {
			e.t.Errorf("%s: handler told %q, but key %q did not change while the informer was stopped", what, line, f[1])
		}
		told[f[1]] = true
	}
	for k := range allowed {
		if !told[k] {
			e.t.Errorf("%s: handler never told of key %q, which changed while the informer was stopped (log %v)", what, k, rec.Log())
		}
	}
}
