package informertest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/informertest"
	"github.com/dbinformer/dbinformer/core/memory"
)

// printT stands in for the *testing.T a test passes: an Example has none.
type printT struct{ cleanups []func() }

func (*printT) Helper()                   {}
func (*printT) Name() string              { return "example" }
func (*printT) Errorf(f string, a ...any) { fmt.Printf("FAIL: "+f+"\n", a...) }
func (*printT) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (p *printT) Cleanup(f func())        { p.cleanups = append(p.cleanups, f) }
func (p *printT) done() {
	for _, f := range slices.Backward(p.cleanups) {
		f()
	}
}
func version(it item) int64 { return it.V }
func fastRetry() core.InformerOptions[item] {
	return core.InformerOptions[item]{Backoff: core.Backoff{Initial: time.Millisecond}}
}

type item struct{ V int64 }

// A Recorder logs what a handler is told, checks that no key goes back in
// time, and waits for the lines a test expects.
func ExampleRecorder() {
	t := &printT{} // in a test: t
	defer t.done()
	src := memory.New[item](memory.Options{})
	src.Put("a", item{1})

	rec := informertest.NewRecorder(t, version)
	inf, _ := informertest.Run[item](t, src, core.InformerOptions[item]{}, rec)
	src.Put("a", item{2})
	src.Put("b", item{3})
	src.Delete("a")
	informertest.WaitFor(t, inf, src.HeadRV())

	rec.Expect("add a v=1 initial", "update a 1->2", "add b v=3", "delete a v=2")
	fmt.Println(strings.Join(rec.Log(), "\n"))
	fmt.Println(rec.State())
	// Output:
	// add a v=1 initial
	// update a 1->2
	// add b v=3
	// delete a v=2
	// map[b:3]
}

// A Spy breaks the informer's watch as a dropped connection would; the
// informer resumes from the version it had reached.
func ExampleSpy_Break() {
	t := &printT{}
	defer t.done()
	src := memory.New[item](memory.Options{})
	src.Put("a", item{1})
	spy := informertest.Wrap[item](src)
	inf, errs := informertest.Run[item](t, spy, fastRetry())

	ctx := context.Background()
	_ = spy.WaitOpen(ctx, 1)
	n := spy.Watches()
	spy.Break(errors.New("connection reset"))
	_ = spy.WaitWatch(ctx, n+1) // the informer watches again
	src.Put("a", item{2})
	informertest.WaitFor(t, inf, src.HeadRV())

	for _, c := range spy.Calls() {
		fmt.Println(c)
	}
	fmt.Println(errs.Len() > 0, "error reported")
	// Output:
	// list at 1
	// watch from 1: connection reset
	// watch from 1 (running)
	// true error reported
}

// A Gate holds the informer's next watch, so that a test decides exactly
// what happens while it is down: here, writes the informer must catch up
// on once released.
func ExampleSpy_HoldWatches() {
	t := &printT{}
	defer t.done()
	src := memory.New[item](memory.Options{})
	spy := informertest.Wrap[item](src)
	rec := informertest.NewRecorder(t, version)
	inf, _ := informertest.Run[item](t, spy, fastRetry(), rec)

	ctx := context.Background()
	_ = spy.WaitOpen(ctx, 1)
	gate := spy.HoldWatches()
	spy.Break(errors.New("connection reset"))
	_ = gate.Wait(ctx) // the informer is reconnecting, and held
	src.Put("a", item{1})
	src.Put("a", item{2})
	fmt.Println("held:", gate.Held(), "open:", spy.Open())
	gate.Release()
	informertest.WaitFor(t, inf, src.HeadRV())
	rec.Expect("add a v=1", "update a 1->2")
	fmt.Println(rec.State())
	// Output:
	// held: 1 open: 0
	// map[a:2]
}

// FailNextList makes the informer's first List fail; it retries, syncs,
// and reports the failure.
func ExampleSpy_FailNextList() {
	t := &printT{}
	defer t.done()
	src := memory.New[item](memory.Options{})
	src.Put("a", item{1})
	spy := informertest.Wrap[item](src)
	refused := errors.New("connection refused")
	spy.FailNextList(refused)
	inf, errs := informertest.Run[item](t, spy, fastRetry())

	fmt.Println("lists:", spy.Lists())
	fmt.Println("reported:", errs.Is(refused) != nil)
	fmt.Println("cached:", inf.Lister().List(nil))
	// Output:
	// lists: 2
	// reported: true
	// cached: [{1}]
}
