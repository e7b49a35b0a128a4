package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/clock"
	"github.com/dbinformer/dbinformer/core/memory"
)

type item struct{ N int }

// named keeps the ListerWatcher in a named field: without Unwrap it hides
// what it wraps.
type named struct{ lw core.ListerWatcher[item] }

func (n named) List(ctx context.Context, sink core.ListSink[item]) (core.ResourceVersion, error) {
	return n.lw.List(ctx, sink)
}
func (n named) Watch(ctx context.Context, from core.ResourceVersion, opts core.WatchOptions[item]) error {
	return n.lw.Watch(ctx, from, opts)
}

type unwrapping struct{ named }

func (u unwrapping) Unwrap() core.ListerWatcher[item] { return u.lw }

// silencing overrides a capability of what it embeds.
type silencing struct{ core.ListerWatcher[item] }

func (silencing) ReportsProgress() bool { return false }

// loop unwraps to itself.
type loop struct{ named }

func (l *loop) Unwrap() core.ListerWatcher[item] { return l }

func TestCapability(t *testing.T) {
	src := memory.New[item](memory.Options{})
	reports := func(lw core.ListerWatcher[item]) (found, reports bool) {
		pr, ok := core.Capability[core.ProgressReporter](lw)
		return ok, ok && pr.ReportsProgress()
	}
	for _, c := range []struct {
		name           string
		lw             core.ListerWatcher[item]
		found, reports bool
	}{
		{"the source itself", src, true, true},
		{"a named field without Unwrap", named{src}, false, false},
		{"a named field with Unwrap", unwrapping{named{src}}, true, true},
		{"an embedded ListerWatcher", struct{ core.ListerWatcher[item] }{src}, true, true},
		{"a pointer to an embedded ListerWatcher", &struct{ core.ListerWatcher[item] }{src}, true, true},
		{"an embedded nil ListerWatcher", struct{ core.ListerWatcher[item] }{}, false, false},
		{"a nil pointer to an embedding struct", (*struct{ core.ListerWatcher[item] })(nil), false, false},
		{"three wrappers deep", &struct{ core.ListerWatcher[item] }{unwrapping{named{struct{ core.ListerWatcher[item] }{src}}}}, true, true},
		{"a wrapper overriding it", silencing{src}, true, false},
		{"nil", nil, false, false},
		{"an Unwrap chain that loops", &loop{named{src}}, false, false},
	} {
		found, rep := reports(c.lw)
		if found != c.found || rep != c.reports {
			t.Errorf("%s: found %v, reports %v; want %v, %v", c.name, found, rep, c.found, c.reports)
		}
	}
	if h, ok := core.Capability[core.HeadReader](unwrapping{named{src}}); !ok || h != core.HeadReader(src) {
		t.Errorf("HeadReader behind Unwrap = %v, %v; want the source", h, ok)
	}
}

// logged is a user's wrapper that logs each watch. Embedding the
// ListerWatcher keeps every optional capability of the source visible to
// the informer (core.Capability finds them through the embedded field).
type logged[T any] struct {
	core.ListerWatcher[T]
	log *slog.Logger
}

func (l logged[T]) Watch(ctx context.Context, from core.ResourceVersion, opts core.WatchOptions[T]) error {
	l.log.Info("watch", "from", from)
	return l.ListerWatcher.Watch(ctx, from, opts)
}

func ExampleCapability() {
	src := memory.New[item](memory.Options{})
	var lw core.ListerWatcher[item] = logged[item]{src, slog.New(slog.DiscardHandler)}
	_, bare := lw.(core.HeadReader)
	_, found := core.Capability[core.HeadReader](lw)
	fmt.Println("type assertion:", bare, "Capability:", found)
	// Output: type assertion: false Capability: true
}

// headCounter is a memory source whose head reads are counted.
type headCounter struct {
	*memory.Source[item]
	reads atomic.Int32
}

func (h *headCounter) Head(ctx context.Context) (core.ResourceVersion, error) {
	h.reads.Add(1)
	return h.Source.Head(ctx)
}

// The informer's Head reads its source's head through wrappers, and its
// observers share one read within a second.
func TestInformerHeadIsShared(t *testing.T) {
	src := &headCounter{Source: memory.New[item](memory.Options{})}
	src.Put("a", item{1})
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	inf := core.NewSharedIndexInformer[item](struct{ core.ListerWatcher[item] }{src}, core.InformerOptions[item]{Clock: fc})
	ctx := context.Background()
	for range 3 {
		if rv, err := inf.Head(ctx); err != nil || rv != 1 {
			t.Fatalf("Head = %d, %v", rv, err)
		}
	}
	if n := src.reads.Load(); n != 1 {
		t.Fatalf("%d reads of the source for three Heads within a second, want 1", n)
	}
	src.Put("b", item{2})
	fc.Step(time.Second)
	if rv, err := inf.Head(ctx); err != nil || rv != 2 || src.reads.Load() != 2 {
		t.Fatalf("Head a second later = %d, %v (%d reads); want 2 from a second read", rv, err, src.reads.Load())
	}
	if inf.Source() != "core_test.headCounter" {
		t.Errorf("Source = %q, want the kind beneath the embedding wrapper", inf.Source())
	}
	headless := core.NewSharedIndexInformer[item](named{src.Source}, core.InformerOptions[item]{})
	if _, err := headless.Head(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Head of a source without one = %v, want errors.ErrUnsupported", err)
	}
}

// A handler is named by HandlerOptions.Name, else by its own Name.
func TestHandlerNames(t *testing.T) {
	inf := core.NewSharedIndexInformer[item](memory.New[item](memory.Options{}), core.InformerOptions[item]{})
	for _, c := range []struct {
		h    core.ResourceEventHandler[item]
		opts core.HandlerOptions
		want string
	}{
		{core.ResourceEventHandlerFuncs[item]{Name: "mailer"}, core.HandlerOptions{}, "mailer"},
		{core.ResourceEventHandlerFuncs[item]{Name: "mailer"}, core.HandlerOptions{Name: "override"}, "override"},
		{core.ResourceEventHandlerFuncs[item]{}, core.HandlerOptions{}, "core.ResourceEventHandlerFuncs[github.com/dbinformer/dbinformer/core_test.item]#3"},
	} {
		reg, err := inf.AddEventHandlerWithOptions(c.h, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if reg.Name() != c.want {
			t.Errorf("handler name %q, want %q", reg.Name(), c.want)
		}
	}
}
