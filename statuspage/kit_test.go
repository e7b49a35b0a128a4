package statuspage_test

import (
	"context"
	"sync"

	"github.com/dbinformer/dbinformer/core"
	"github.com/dbinformer/dbinformer/core/driver"
)

// pausing wraps a ListerWatcher so that a test can hold an informer in the
// middle of its initial list, and hold its watch, at points it chooses
// rather than at times: the list stops after listAfter objects until
// ReleaseList, and while HoldWatch is in force each watch batch waits.
type pausing[T any] struct {
	driver.ListerWatcher[T]
	listAfter int

	mu         sync.Mutex
	listGate   chan struct{} // closed by ReleaseList
	listPaused chan struct{} // closed when the list is held
	pausedOnce bool
	watchGate  chan struct{} // non-nil while watches are held
}

func newPausing[T any](lw driver.ListerWatcher[T], listAfter int) *pausing[T] {
	return &pausing[T]{
		ListerWatcher: lw,
		listAfter:     listAfter,
		listGate:      make(chan struct{}),
		listPaused:    make(chan struct{}),
	}
}

// ListPaused is closed once the list is held.
func (p *pausing[T]) ListPaused() <-chan struct{} { return p.listPaused }

// ReleaseList lets the held list go on.
func (p *pausing[T]) ReleaseList() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.listGate:
	default:
		close(p.listGate)
	}
}

// HoldWatch makes watch batches wait until the returned release is called.
func (p *pausing[T]) HoldWatch() (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := make(chan struct{})
	p.watchGate = g
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.watchGate == g {
				p.watchGate = nil
			}
			close(g)
		})
	}
}

func (p *pausing[T]) List(ctx context.Context, sink driver.ListSink[T]) (core.ResourceVersion, error) {
	n := 0
	emit := sink.Emit
	sink.Emit = func(ev driver.Event[T]) error {
		n++
		if n == p.listAfter+1 {
			p.mu.Lock()
			first := !p.pausedOnce
			p.pausedOnce = true
			gate := p.listGate
			if first {
				close(p.listPaused)
			}
			p.mu.Unlock()
			if first {
				select {
				case <-gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return emit(ev)
	}
	return p.ListerWatcher.List(ctx, sink)
}

func (p *pausing[T]) Watch(ctx context.Context, from core.ResourceVersion, opts driver.WatchOptions[T]) error {
	emit := opts.Emit
	opts.Emit = func(batch []driver.Event[T]) error {
		p.mu.Lock()
		g := p.watchGate
		p.mu.Unlock()
		if g != nil {
			select {
			case <-g:
			case <-ctx.Done():
				return driver.Stopped(ctx)
			}
		}
		return emit(batch)
	}
	return p.ListerWatcher.Watch(ctx, from, opts)
}

// blocker is an event handler that blocks on its first notification until
// released, so that its pending notifications pile up: the slow handler.
type blocker[T any] struct {
	once    sync.Once
	entered chan struct{}
	gate    chan struct{}
	mu      sync.Mutex
	closed  bool
}

func newBlocker[T any]() *blocker[T] {
	return &blocker[T]{entered: make(chan struct{}), gate: make(chan struct{})}
}

func (b *blocker[T]) wait() {
	b.once.Do(func() { close(b.entered) })
	<-b.gate
}

func (b *blocker[T]) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.gate)
	}
}

func (b *blocker[T]) OnAdd(string, T, bool)            { b.wait() }
func (b *blocker[T]) OnUpdate(string, T, T)            { b.wait() }
func (b *blocker[T]) OnDelete(key string, _ T, _ bool) { b.wait() }
