package driver_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
	"github.com/dbinformer/dbinformer/core/memory"
)

type item struct{ N int }

// named keeps the ListerWatcher in a named field: without Unwrap it hides
// what it wraps.
type named struct{ lw driver.ListerWatcher[item] }

func (n named) List(ctx context.Context, sink driver.ListSink[item]) (core.ResourceVersion, error) {
	return n.lw.List(ctx, sink)
}
func (n named) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[item]) error {
	return n.lw.Watch(ctx, from, opts)
}

type unwrapping struct{ named }

func (u unwrapping) Unwrap() driver.ListerWatcher[item] { return u.lw }

// silencing overrides a capability of what it embeds.
type silencing struct{ driver.ListerWatcher[item] }

func (silencing) ReportsProgress() bool { return false }

// loop unwraps to itself.
type loop struct{ named }

func (l *loop) Unwrap() driver.ListerWatcher[item] { return l }

func TestCapability(t *testing.T) {
	src := memory.New[item](memory.Options{})
	reports := func(lw driver.ListerWatcher[item]) (found, reports bool) {
		pr, ok := driver.Capability[driver.ProgressReporter](lw)
		return ok, ok && pr.ReportsProgress()
	}
	for _, c := range []struct {
		name           string
		lw             driver.ListerWatcher[item]
		found, reports bool
	}{
		{"the source itself", src, true, true},
		{"a named field without Unwrap", named{src}, false, false},
		{"a named field with Unwrap", unwrapping{named{src}}, true, true},
		{"an embedded ListerWatcher", struct{ driver.ListerWatcher[item] }{src}, true, true},
		{"a pointer to an embedded ListerWatcher", &struct{ driver.ListerWatcher[item] }{src}, true, true},
		{"an embedded nil ListerWatcher", struct{ driver.ListerWatcher[item] }{}, false, false},
		{"a nil pointer to an embedding struct", (*struct{ driver.ListerWatcher[item] })(nil), false, false},
		{"three wrappers deep", &struct{ driver.ListerWatcher[item] }{unwrapping{named{struct{ driver.ListerWatcher[item] }{src}}}}, true, true},
		{"a wrapper overriding it", silencing{src}, true, false},
		{"nil", nil, false, false},
		{"an Unwrap chain that loops", &loop{named{src}}, false, false},
	} {
		found, rep := reports(c.lw)
		if found != c.found || rep != c.reports {
			t.Errorf("%s: found %v, reports %v; want %v, %v", c.name, found, rep, c.found, c.reports)
		}
	}
	if h, ok := driver.Capability[driver.HeadReader](unwrapping{named{src}}); !ok || h != driver.HeadReader(src) {
		t.Errorf("HeadReader behind Unwrap = %v, %v; want the source", h, ok)
	}
}

// logged is a user's wrapper that logs each watch. Embedding the
// ListerWatcher keeps every optional capability of the source visible to
// the informer (driver.Capability finds them through the embedded field).
type logged[T any] struct {
	driver.ListerWatcher[T]
	log *slog.Logger
}

func (l logged[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	l.log.Info("watch", "from", from)
	return l.ListerWatcher.Watch(ctx, from, opts)
}

func ExampleCapability() {
	src := memory.New[item](memory.Options{})
	var lw driver.ListerWatcher[item] = logged[item]{src, slog.New(slog.DiscardHandler)}
	_, bare := lw.(driver.HeadReader)
	_, found := driver.Capability[driver.HeadReader](lw)
	fmt.Println("type assertion:", bare, "Capability:", found)
	// Output: type assertion: false Capability: true
}
